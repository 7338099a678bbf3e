/* How a delta's clusters sit in the host file, so that OpenVZ accepts it:
 * its kernel maps image extents directly and its `ploop check` refuses a
 * file with a hole, or with an unwritten (fallocated) extent that does not
 * start and end on a cluster boundary. So every cluster of the file is
 * either written whole or allocated whole: the header/BAT clusters are
 * fallocated (cheap for any disk size), cluster 0 is written whole (it
 * holds the header), and the first BAT page written into a still-unwritten
 * BAT cluster takes the whole cluster with it (delta_bat_materialize). */
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "internal.h"

int ploop_reserve_zeroed(int fd, const char *path, uint64_t off, uint64_t len)
{
  if (len == 0)
    return 0;
  /* ZERO_RANGE: the range may hold old data (a BAT that grows over
   * relocated clusters); on a fresh range it is a plain allocation. */
  if (fallocate(fd, FALLOC_FL_ZERO_RANGE, (off_t)off, (off_t)len) == 0)
    return 0;
  if (errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL)
    return ploop_error_os(path, "fallocate");
  /* No fallocate here: zeros, written. */
  return ploop_reserve_written(fd, path, off, len);
}

int ploop_reserve_written(int fd, const char *path, uint64_t off, uint64_t len)
{
  size_t chunk = (size_t)min_u64(len, 1u << 20);
  uint8_t *z = ploop_aligned_alloc(chunk);
  if (!z)
    return -1;
  int rc = 0;
  for (uint64_t o = 0; o < len && rc == 0; o += chunk)
    rc = ploop_pwrite_full(fd, z, (size_t)min_u64(chunk, len - o), off + o, path);
  free(z);
  return rc;
}

size_t delta_bat_clusters(const struct ploop_delta *d)
{
  return (size_t)div_round_up(d->bat_bytes, d->cluster_bytes);
}

/* Capacity of the data-cluster bitmap: what the file holds now or its BAT
 * can reference, with room for growth; clusters past it are not tracked. */
static uint64_t unwritten_capacity(const struct ploop_delta *d, uint64_t file_size)
{
  uint64_t a = div_round_up(file_size, d->cluster_bytes);
  uint64_t b = delta_bat_clusters(d) + (uint64_t)d->h.bat_entries;
  return (a > b ? a : b) + 4096;
}

int delta_unwritten_grow(struct ploop_delta *d)
{
  uint64_t cap = unwritten_capacity(d, d->alloc_head * d->cluster_bytes);
  if (cap <= d->unwritten_bits)
    return 0;
  size_t words = (size_t)div_round_up(cap, 64), old = (size_t)div_round_up(d->unwritten_bits, 64);
  uint64_t *nb = realloc(d->unwritten, words * sizeof *nb);
  if (!nb)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  memset(nb + old, 0, (words - old) * sizeof *nb);
  d->unwritten = nb;
  d->unwritten_bits = words * 64;
  return 0;
}

void delta_unwritten_set(struct ploop_delta *d, uint64_t off, bool on)
{
  uint64_t c = off / d->cluster_bytes;
  if (c >= d->unwritten_bits)
    return;
  uint64_t bit = 1ull << (c % 64);
  if (on)
    __atomic_fetch_or(&d->unwritten[c / 64], bit, __ATOMIC_RELEASE);
  else
    __atomic_fetch_and(&d->unwritten[c / 64], ~bit, __ATOMIC_RELEASE);
}

bool delta_unwritten_get(const struct ploop_delta *d, uint64_t off)
{
  uint64_t c = off / d->cluster_bytes;
  if (c >= d->unwritten_bits)
    return false;
  return __atomic_load_n(&d->unwritten[c / 64], __ATOMIC_ACQUIRE) & (1ull << (c % 64));
}

int delta_extent_scan(struct ploop_delta *d, uint64_t file_size)
{
  size_t n = delta_bat_clusters(d);
  free(d->bat_unwritten);
  free(d->unwritten);
  d->unwritten = NULL;
  d->unwritten_bits = 0;
  d->bat_unwritten = calloc(n ? n : 1, 1);
  if (!d->bat_unwritten)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  d->n_bat_clusters = n;
  uint64_t cap = unwritten_capacity(d, file_size);
  d->unwritten = calloc(div_round_up(cap, 64), sizeof *d->unwritten);
  uint64_t *written = calloc(n ? n : 1, sizeof *written);
  enum { EXTENTS = 256 };
  struct fiemap *fm = calloc(1, sizeof *fm + EXTENTS * sizeof(struct fiemap_extent));
  if (!written || !fm || !d->unwritten) {
    free(written);
    free(fm);
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  }
  d->unwritten_bits = div_round_up(cap, 64) * 64;
  uint64_t cb = d->cluster_bytes, bat_end = d->bat_bytes, pos = 0;
  bool ok = true;
  while (pos < file_size) {
    memset(fm, 0, sizeof *fm);
    fm->fm_start = pos;
    fm->fm_length = file_size - pos;
    fm->fm_extent_count = EXTENTS;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    if (ioctl(d->so.fd, FS_IOC_FIEMAP, fm) < 0) {
      ok = false; /* no FIEMAP (tmpfs...): nothing OpenVZ checks either */
      break;
    }
    if (fm->fm_mapped_extents == 0)
      break;
    bool last = false;
    for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
      const struct fiemap_extent *e = &fm->fm_extents[i];
      last |= e->fe_flags & FIEMAP_EXTENT_LAST;
      uint64_t s = e->fe_logical, t = e->fe_logical + e->fe_length;
      pos = t > pos ? t : pos;
      bool unwritten = e->fe_flags & FIEMAP_EXTENT_UNWRITTEN;
      for (uint64_t c = s / cb; c * cb < t; c++) {
        if (c >= n) {
          /* A data cluster (partly) only allocated: its first partial
           * write must write it whole. */
          if (unwritten)
            delta_unwritten_set(d, c * cb, true);
          continue;
        }
        if (!unwritten) {
          uint64_t a = s > c * cb ? s : c * cb, b = min_u64(t, (c + 1) * cb);
          written[c] += b - a;
        }
      }
    }
    if (last)
      break;
  }
  for (size_t c = 0; ok && c < n; c++)
    d->bat_unwritten[c] = written[c] < min_u64(cb, bat_end - c * cb);
  free(written);
  free(fm);
  return 0;
}

size_t delta_bat_materialize(struct ploop_delta *d, uint32_t *taken, size_t max)
{
  size_t k = 0;
  size_t per = d->cluster_bytes / PLOOP_BAT_PAGE;
  for (size_t c = 0; c < d->n_bat_clusters && k < max; c++) {
    if (!d->bat_unwritten[c])
      continue;
    size_t a = c * per, b = min_u64(a + per, d->n_pages), i;
    for (i = a; i < b && !d->page_dirty[i]; i++)
      ;
    if (i == b)
      continue;
    /* Pages not dirty hold what the disk holds (or zeros never written):
     * writing them again is safe for rule 1. */
    memset(d->page_dirty + a, 1, b - a);
    d->bat_unwritten[c] = 0;
    taken[k++] = (uint32_t)c;
  }
  return k;
}

void delta_bat_unmaterialize(struct ploop_delta *d, const uint32_t *taken, size_t k)
{
  for (size_t i = 0; i < k; i++)
    d->bat_unwritten[taken[i]] = 1;
}

int ploop_delta_fill_holes(const char *path, uint64_t *filled)
{
  *filled = 0;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return ploop_error(PLOOP_ERR_NOTFOUND, errno, "%s: open: %s", path, strerror(errno));
  off_t size = lseek(fd, 0, SEEK_END), pos = 0;
  int rc = 0;
  /* Zeros written, as OpenVZ's check -S: an allocation alone could leave
   * part of a cluster unwritten, which it refuses just the same. */
  while (rc == 0 && pos < size) {
    off_t hole = lseek(fd, pos, SEEK_HOLE);
    if (hole < 0 || hole >= size)
      break;
    off_t data = lseek(fd, hole, SEEK_DATA);
    if (data < 0)
      data = size;
    rc = ploop_reserve_written(fd, path, (uint64_t)hole, (uint64_t)(data - hole));
    *filled += (uint64_t)(data - hole);
    pos = data;
  }
  if (rc == 0 && *filled && fdatasync(fd) < 0)
    rc = ploop_error_os(path, "fdatasync");
  close(fd);
  return rc;
}
