/* `ploop import -`: a raw image read from a pipe (stdin), front to back,
 * cluster by cluster, through the disk's public write path. Zero clusters
 * stay holes (or are discarded where the disk holds data). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "import-stream.h"

/* Reads up to LEN bytes; fewer only at the end of the stream. */
static ssize_t read_chunk(int fd, uint8_t *buf, size_t len)
{
  size_t got = 0;
  while (got < len) {
    if (ploop_cancelled())
      return -2;
    ssize_t r = read(fd, buf + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

static bool all_zero(const uint8_t *p, size_t n)
{
  return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

int import_stream(int fd, const char *dir, struct cli_progress *prog, struct ploop_copy_stats *st)
{
  struct ploop_disk *disk = ploop_disk_open(dir, NULL, PLOOP_OPEN_RDWR);
  if (!disk)
    return cli_lib_error();
  uint64_t size = ploop_disk_size(disk), cb = ploop_disk_cluster_size(disk);
  uint8_t *buf = aligned_alloc(4096, cb);
  int rc = 0;
  if (!buf) {
    rc = cli_error(EXIT_GENERIC, "out of memory");
    goto out;
  }
  uint64_t off = 0;
  for (;;) {
    ssize_t n = read_chunk(fd, buf, cb);
    if (n == -2) {
      ploop_set_error(PLOOP_ERR_CANCELLED, EINTR, "interrupted");
      rc = cli_lib_error();
      break;
    }
    if (n < 0) {
      rc = cli_error(EXIT_READ, "stdin: read: %s", strerror(errno));
      break;
    }
    if (n == 0)
      break;
    if (off >= size || (uint64_t)n > size - off) {
      rc = cli_error(EXIT_USAGE, "stdin: longer than the disk (%" PRIu64 " bytes)", size);
      break;
    }
    size_t len = (size_t)n;
    struct ploop_extent e;
    if (all_zero(buf, len)) {
      if (ploop_disk_block_status(disk, off, len, &e, 1) < 0) {
        rc = cli_lib_error();
        break;
      }
      if (e.depth && ploop_disk_discard(disk, off, len) < 0) {
        rc = cli_lib_error();
        break;
      }
      if (e.depth)
        st->clusters_zeroed++;
      else
        st->clusters_skipped++;
    } else {
      if (ploop_disk_pwrite(disk, buf, len, off, 0) < 0) {
        rc = cli_lib_error();
        break;
      }
      st->clusters_written++;
    }
    off += len;
    st->bytes_total = off;
    cli_progress_cb(prog, off, size);
    if ((size_t)n < cb)
      break;
  }
  if (rc == 0 && ploop_disk_flush(disk) < 0)
    rc = cli_lib_error();
out:
  free(buf);
  if (ploop_disk_close(disk) < 0 && rc == 0)
    rc = cli_lib_error();
  return rc;
}
