/* Small helpers: aligned buffers, full-length I/O, sizes, UUIDs. */
#include <ctype.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "internal.h"

void *ploop_aligned_alloc_uninit(size_t len)
{
  void *p = NULL;
  int rc = posix_memalign(&p, PLOOP_ALIGN, len ? round_up(len, PLOOP_ALIGN) : PLOOP_ALIGN);
  if (rc != 0) {
    ploop_error(PLOOP_ERR_GENERIC, rc, "out of memory allocating %zu bytes", len);
    return NULL;
  }
  return p;
}

void *ploop_aligned_alloc(size_t len)
{
  void *p = ploop_aligned_alloc_uninit(len);
  if (p)
    memset(p, 0, len);
  return p;
}

bool ploop_is_zero(const void *buf, size_t len)
{
  const unsigned char *p = buf;
  /* Check the first 16 bytes, then compare the buffer with itself shifted:
   * memcmp runs at memory speed. */
  size_t head = len < 16 ? len : 16;
  for (size_t i = 0; i < head; i++)
    if (p[i])
      return false;
  return len <= 16 || memcmp(p, p + 16, len - 16) == 0;
}

int ploop_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path)
{
  char *p = buf;
  while (len > 0) {
    ssize_t n = pread(fd, p, len, (off_t)off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return ploop_error(PLOOP_ERR_READ, errno, "%s: read at %llu: %s", path, (unsigned long long)off,
                         strerror(errno));
    }
    if (n == 0) /* past EOF reads as zeros (a truncated tail after a crash) */
      break;
    p += n;
    off += (uint64_t)n;
    len -= (size_t)n;
  }
  if (len)
    memset(p, 0, len);
  return 0;
}

int ploop_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *path)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, (off_t)off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return ploop_error(PLOOP_ERR_IO, errno, "%s: write at %llu: %s", path, (unsigned long long)off,
                         strerror(errno));
    }
    p += n;
    off += (uint64_t)n;
    len -= (size_t)n;
  }
  return 0;
}

int ploop_fsync_dir(const char *dir)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ploop_error_os(dir, "open directory");
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  if (rc < 0) {
    errno = e;
    return ploop_error_os(dir, "fsync directory");
  }
  return 0;
}

int ploop_fsync_parent(const char *path)
{
  char *c = ploop_strdup(path);
  if (!c)
    return -1;
  int rc = ploop_fsync_dir(dirname(c));
  free(c);
  return rc;
}

char *ploop_strdup(const char *s)
{
  char *r = strdup(s);
  if (!r)
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  return r;
}

int ploop_parse_size(const char *s, uint64_t *out)
{
  if (!s || !*s || !isdigit((unsigned char)*s))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "invalid size '%s': expected a number with an optional K/M/G/T suffix", s ? s : "");
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno)
    return ploop_error(PLOOP_ERR_PARAM, ERANGE, "invalid size '%s': too large", s);
  unsigned shift = 0;
  if (*end) {
    switch (toupper((unsigned char)*end)) {
    case 'B':
      shift = 0;
      break;
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case 'T':
      shift = 40;
      break;
    case 'P':
      shift = 50;
      break;
    default:
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "invalid size '%s': unknown suffix '%s'", s, end);
    }
    end++;
    /* Accept "G", "GB", "GiB". */
    if (shift && (*end == 'i' || *end == 'I'))
      end++;
    if (shift && (*end == 'b' || *end == 'B'))
      end++;
    if (*end)
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "invalid size '%s': trailing '%s'", s, end);
  }
  if (shift && v > (UINT64_MAX >> shift))
    return ploop_error(PLOOP_ERR_PARAM, ERANGE, "invalid size '%s': too large", s);
  *out = (uint64_t)v << shift;
  return 0;
}

void ploop_uuid_generate(char *out)
{
  uuid_t u;
  char s[37];
  uuid_generate_random(u);
  uuid_unparse_lower(u, s);
  snprintf(out, PLOOP_UUID_LEN + 1, "{%s}", s);
}

int ploop_uuid_normalize(const char *in, char *out)
{
  char tmp[40];
  size_t n = in ? strlen(in) : 0;
  if (n == PLOOP_UUID_LEN && in[0] == '{' && in[n - 1] == '}') {
    memcpy(tmp, in + 1, 36);
    tmp[36] = 0;
  } else if (n == 36) {
    memcpy(tmp, in, 37);
  } else {
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "invalid UUID '%s'", in ? in : "");
  }
  uuid_t u;
  if (uuid_parse(tmp, u) != 0)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "invalid UUID '%s'", in);
  char s[37];
  uuid_unparse_lower(u, s);
  snprintf(out, PLOOP_UUID_LEN + 1, "{%s}", s);
  return 0;
}
