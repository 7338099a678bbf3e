/* The CRIU images of a migration on the wire: each file of the source's
 * images directory as one FILE message (name, size, XXH3-64 of the bytes)
 * followed by DATA messages; the destination writes them into a directory
 * of its own, checks size and digest, and refuses names that are not plain
 * file names. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"
#include "migrate-images.h"
#include "migrate-proto.h"
#include "util.h"

#define CHUNK MIG_MAX_PAYLOAD

static int write_full(int fd, const char *p, size_t len)
{
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int send_one(int fd, int dfd, const char *name, uint64_t *bytes)
{
  cleanup_close int f = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat st;
  if (f < 0 || fstat(f, &st) < 0)
    return ct_fail(errno, "CRIU image %s", name);
  if (!S_ISREG(st.st_mode))
    return 0;
  /* Read whole first (images are tmpfs pages): the digest goes ahead of the data. */
  size_t size = (size_t)st.st_size;
  cleanup_free char *buf = malloc(size ? size : 1);
  if (!buf)
    return ct_fail(ENOMEM, "CRIU image %s", name);
  for (size_t off = 0; off < size;) {
    ssize_t n = pread(f, buf + off, size - off, (off_t)off);
    if (n <= 0)
      return ct_fail(n < 0 ? errno : EIO, "read CRIU image %s", name);
    off += (size_t)n;
  }
  char msg[512];
  snprintf(msg, sizeof msg, "name=%s\nsize=%zu\nxxh3=%016" PRIx64 "\n", name, size,
           (uint64_t)XXH3_64bits(buf, size));
  if (mig_send_text(fd, MIG_FILE, msg) < 0)
    return -1;
  for (size_t off = 0; off < size; off += CHUNK) {
    size_t n = size - off < CHUNK ? size - off : CHUNK;
    if (mig_send(fd, MIG_DATA, buf + off, n) < 0)
      return -1;
  }
  *bytes += size;
  return 1;
}

int mig_send_images(int fd, const char *dir, unsigned *files, uint64_t *bytes)
{
  DIR *d = opendir(dir);
  if (!d)
    return ct_fail(errno, "open %s", dir);
  *files = 0;
  *bytes = 0;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    int r = send_one(fd, dirfd(d), e->d_name, bytes);
    if (r < 0)
      rc = -1;
    else
      *files += (unsigned)r;
  }
  closedir(d);
  return rc;
}

bool mig_image_name_ok(const char *name)
{
  size_t n = strlen(name);
  return n > 0 && n < 200 && name[0] != '.' && !strchr(name, '/') &&
         strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int mig_recv_image(int fd, const char *dir, const char *msg, uint64_t max_bytes, uint64_t *bytes)
{
  char name[256], hex[32];
  uint64_t size;
  if (!mig_kv(msg, "name", name, sizeof name) || !mig_image_name_ok(name))
    return ct_fail(0, "protocol error: bad CRIU image name");
  if (mig_kv_u64(msg, "size", &size) < 0 || !mig_kv(msg, "xxh3", hex, sizeof hex))
    return -1;
  if (size > max_bytes || *bytes + size > max_bytes)
    return ct_fail(0, "CRIU images over the %" PRIu64 " MiB limit", max_bytes >> 20);
  char *end;
  uint64_t want = strtoull(hex, &end, 16);
  if (*end || !hex[0])
    return ct_fail(0, "protocol error: bad digest of %s", name);
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cleanup_close int f = dfd < 0 ? -1 : openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (f < 0)
    return ct_fail(errno, "create %s/%s", dir, name);
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  for (uint64_t got = 0; got < size;) {
    cleanup_free char *data = NULL;
    size_t len;
    if (mig_expect(fd, MIG_DATA, &data, &len) < 0)
      return ct_wrap("CRIU image %s", name);
    if (len == 0 || len > size - got)
      return ct_fail(0, "protocol error: CRIU image %s longer than announced", name);
    XXH3_64bits_update(&st, data, len);
    if (write_full(f, data, len) < 0)
      return ct_fail(errno, "write %s/%s", dir, name);
    got += len;
  }
  if (XXH3_64bits_digest(&st) != want)
    return ct_fail(0, "CRIU image %s: checksum mismatch", name);
  *bytes += size;
  return 0;
}
