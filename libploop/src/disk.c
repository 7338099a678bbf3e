/* The disk: a stack of deltas read top-down and written at the top, with
 * copy-up of partial clusters. This is the hot path: no allocation on it
 * except when a cluster is first allocated. */
#include <fcntl.h>
#include <libgen.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

unsigned disk_find(struct ploop_disk *disk, unsigned from, uint64_t vc, uint64_t *off)
{
  for (unsigned i = from; i < disk->n; i++) {
    uint64_t o = delta_lookup(disk->deltas[i], vc);
    if (o) {
      if (off)
        *off = DELTA_OFF(o);
      return i + 1;
    }
  }
  return 0;
}

int disk_read_cluster_range(struct ploop_disk *disk, unsigned from, uint64_t vc, uint64_t coff, void *buf,
                            size_t len)
{
  uint64_t off;
  unsigned depth = disk_find(disk, from, vc, &off);
  if (!depth) {
    memset(buf, 0, len);
    return 0;
  }
  struct ploop_delta *d = disk->deltas[depth - 1];
  return store_pread(&d->so, buf, len, off + coff);
}

struct ploop_delta *delta_open_image(const struct ploop_descriptor *desc, const struct ploop_image_desc *im,
                                     unsigned flags)
{
  char *path = ploop_descriptor_image_path(desc, im);
  if (!path)
    return NULL;
  struct ploop_delta *d =
      im->plain ? delta_open_raw(desc->dir, path, desc->cluster_sectors, flags & PLOOP_OPEN_RDWR)
                : delta_open(desc->dir, path, flags);
  free(path);
  return d;
}

struct ploop_delta *ploop_descriptor_open_image(const struct ploop_descriptor *d,
                                                const struct ploop_image_desc *img, unsigned flags)
{
  if (img->plain) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s/%s: a raw image has no ploop header", d->dir, img->file);
    return NULL;
  }
  return delta_open_image(d, img, flags & (PLOOP_OPEN_RDWR | PLOOP_OPEN_ALLOW_DIRTY));
}

void disk_close_deltas(struct ploop_disk *disk, bool clean)
{
  for (unsigned i = 0; i < disk->n; i++) {
    if (delta_close(disk->deltas[i], clean) < 0 && clean)
      clean = false; /* keep the first error; still release the rest */
    disk->deltas[i] = NULL;
  }
  disk->n = 0;
}

int disk_open_chain(struct ploop_disk *disk, const char *guid, unsigned flags)
{
  return disk_open_chain_top(disk, guid, flags, NULL);
}

int disk_open_chain_top(struct ploop_disk *disk, const char *guid, unsigned flags, struct ploop_delta *pre)
{
  struct ploop_descriptor *desc = disk->desc;
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(desc, guid, idx, PLOOP_MAX_DELTAS);
  if (n < 0)
    return -1;
  if (guid) {
    struct ploop_snapshot_desc *s = descriptor_find_shot(desc, guid);
    if (s && s->temporary)
      return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: snapshot %s is being merged", disk->dir, guid);
  }
  /* idx is base first; deltas[] is top first. */
  for (int k = n - 1, i = 0; k >= 0; k--, i++) {
    /* Only the top opens read-write. */
    unsigned f = i == 0 ? flags : (flags & PLOOP_OPEN_ALLOW_DIRTY);
    struct ploop_delta *d = NULL;
    if (i == 0 && pre)
      d = delta_open_preopened(pre, f) == 0 ? pre : NULL;
    else
      d = delta_open_image(desc, &desc->images[idx[k]], f);
    if (!d)
      goto fail;
    disk->deltas[disk->n++] = d;
    if (d->h.cluster_sectors != desc->cluster_sectors) {
      ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: cluster size %u sectors differs from the disk's %u",
                  d->path, d->h.cluster_sectors, desc->cluster_sectors);
      goto fail;
    }
  }
  struct ploop_delta *top = disk->deltas[0];
  /* The descriptor and the top's header must agree on the size (OpenVZ
   * refuses too). A resize killed between the two leaves the top marked in
   * use: opened anyway (ALLOW_DIRTY, crash recovery), the header wins, and
   * check -F repairs the descriptor. */
  if (!guid && !top->raw && top->h.size_sectors != desc->size_sectors && !(flags & PLOOP_OPEN_ALLOW_DIRTY)) {
    ploop_error(PLOOP_ERR_CORRUPT, EINVAL,
                "%s: Disk_size %llu sectors in %s disagrees with %s (%llu sectors); 'ploop check -F' repairs it",
                disk->dir, (unsigned long long)desc->size_sectors, PLOOP_DESCRIPTOR_NAME, top->path,
                (unsigned long long)top->h.size_sectors);
    goto fail;
  }
  disk->cluster_bytes = (uint64_t)desc->cluster_sectors * 512;
  disk->size_bytes = top->raw ? desc->size_sectors * 512 : top->h.size_sectors * 512;
  if (top->raw && disk->size_bytes > top->raw_bytes)
    disk->size_bytes = top->raw_bytes;
  return 0;
fail:
  /* a top opened ahead goes clean: its opener falls back to a full open */
  disk_close_deltas(disk, pre != NULL);
  return -1;
}

struct ploop_disk *ploop_disk_open(const char *dir_or_xml, const char *snapshot_guid, unsigned flags)
{
  char guid[PLOOP_UUID_LEN + 1];
  if (snapshot_guid) {
    if (ploop_uuid_normalize(snapshot_guid, guid) < 0)
      return NULL;
    if ((flags & PLOOP_OPEN_RDWR)) {
      ploop_error(PLOOP_ERR_PARAM, EINVAL, "a snapshot opens read-only");
      return NULL;
    }
  }
  struct ploop_disk *disk = calloc(1, sizeof *disk);
  if (!disk) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    return NULL;
  }
  disk->lock_fd = -1;
  pthread_rwlock_init(&disk->rw, NULL);
  pthread_mutex_init(&disk->pin_lock, NULL);
  pthread_cond_init(&disk->pin_cond, NULL);
  disk->rdwr = flags & PLOOP_OPEN_RDWR;
  disk->open_flags = flags;
  disk->desc = ploop_descriptor_load(dir_or_xml);
  if (!disk->desc)
    goto fail;
  disk->dir = ploop_strdup(disk->desc->dir);
  if (!disk->dir)
    goto fail;
  if ((flags & PLOOP_OPEN_STANDBY)) { /* released from the start: no lock, no delta open */
    if (!disk->rdwr || snapshot_guid) {
      ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: a standby open is of the top, read-write", disk->dir);
      goto fail;
    }
    disk->cluster_bytes = (uint64_t)disk->desc->cluster_sectors * 512;
    disk->size_bytes = disk->desc->size_sectors * 512;
    disk_preopen_top(disk);
    return disk;
  }
  if (!(flags & PLOOP_OPEN_NO_LOCK)) {
    disk->lock_fd = ploop_lock_disk(disk->dir, disk->rdwr ? PLOOP_LOCK_WRITER : PLOOP_LOCK_READER);
    if (disk->lock_fd == -1)
      goto fail;
  }
  if (snapshot_guid) {
    if (!strcmp(guid, disk->desc->top_guid)) {
      snapshot_guid = NULL; /* the top itself */
    } else {
      disk->snapshot_guid = ploop_strdup(guid);
      if (!disk->snapshot_guid)
        goto fail;
    }
  }
  if (disk_open_chain(disk, snapshot_guid ? guid : NULL, flags) < 0)
    goto fail;
  return disk;
fail:
  ploop_disk_close(disk);
  return NULL;
}

int ploop_disk_close(struct ploop_disk *disk)
{
  if (!disk)
    return 0;
  int rc = 0;
  for (unsigned i = 0; i < disk->n; i++)
    if (delta_close(disk->deltas[i], true) < 0 && rc == 0)
      rc = -1;
  disk->n = 0;
  delta_discard_preopened(disk->pre);
  ploop_unlock_disk(disk->lock_fd);
  ploop_descriptor_free(disk->desc);
  pthread_rwlock_destroy(&disk->rw);
  pthread_mutex_destroy(&disk->pin_lock);
  pthread_cond_destroy(&disk->pin_cond);
  free(disk->dirty);
  free(disk->snapshot_guid);
  free(disk->dir);
  free(disk);
  return rc;
}

uint64_t ploop_disk_size(const struct ploop_disk *disk)
{
  return disk->size_bytes;
}
uint64_t ploop_disk_cluster_size(const struct ploop_disk *disk)
{
  return disk->cluster_bytes;
}
bool ploop_disk_readonly(const struct ploop_disk *disk)
{
  return !disk->rdwr;
}
unsigned ploop_disk_depth(const struct ploop_disk *disk)
{
  return disk->n;
}
const char *ploop_disk_dir(const struct ploop_disk *disk)
{
  return disk->dir;
}

struct ploop_descriptor *ploop_disk_descriptor(struct ploop_disk *disk)
{
  pthread_rwlock_rdlock(&disk->rw);
  struct ploop_descriptor *d = descriptor_dup(disk->desc);
  pthread_rwlock_unlock(&disk->rw);
  return d;
}

static int check_range(struct ploop_disk *disk, uint64_t off, uint64_t len)
{
  if (disk->n == 0)
    return disk_released_error(disk);
  if (off > disk->size_bytes || len > disk->size_bytes - off)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: range %llu+%llu is past the disk end (%llu)", disk->dir,
                       (unsigned long long)off, (unsigned long long)len,
                       (unsigned long long)disk->size_bytes);
  return 0;
}

static inline bool aligned(const void *buf, uint64_t off, uint64_t len)
{
  return (((uintptr_t)buf | off | len) & 511) == 0;
}

void disk_mark_dirty(struct ploop_disk *disk, uint64_t off, uint64_t len)
{
  if (!__atomic_load_n(&disk->dirty_on, __ATOMIC_RELAXED) || len == 0)
    return;
  for (uint64_t vc = off / disk->cluster_bytes; vc <= (off + len - 1) / disk->cluster_bytes; vc++)
    __atomic_fetch_or(&disk->dirty[vc / 8], (uint8_t)(1u << (vc % 8)), __ATOMIC_RELAXED);
}

int ploop_disk_pread(struct ploop_disk *disk, void *buf, size_t len, uint64_t off)
{
  if (check_range(disk, off, len) < 0)
    return -1;
  if (!aligned(buf, off, len)) {
    uint64_t start = off & ~511ull, end = round_up(off + len, 512);
    uint8_t *tmp = ploop_aligned_alloc(end - start);
    if (!tmp)
      return -1;
    int rc = ploop_disk_pread(disk, tmp, end - start, start);
    if (rc == 0)
      memcpy(buf, tmp + (off - start), len);
    free(tmp);
    return rc;
  }
  uint64_t cb = disk->cluster_bytes;
  uint8_t *p = buf;
  int rc = 0;
  pthread_rwlock_rdlock(&disk->rw);
  if (disk->n == 0) /* released (ploop_disk_release) meanwhile */
    rc = disk_released_error(disk);
  while (len > 0 && rc == 0) {
    uint64_t vc = off / cb, coff = off % cb;
    size_t n = (size_t)min_u64(len, cb - coff);
    rc = disk_read_cluster_range(disk, 0, vc, coff, p, n);
    p += n;
    off += n;
    len -= n;
  }
  pthread_rwlock_unlock(&disk->rw);
  return rc;
}

/* Writes N bytes at COFF of the cluster at file offset OFF of the top. A
 * cluster only allocated (zeroed by fallocate) is written whole the first
 * time, with zeros around the data: part written, part unwritten is what
 * OpenVZ refuses (extent.c). */
static int write_in_place(struct ploop_delta *top, uint64_t off, uint64_t coff, const void *p, size_t n)
{
  uint64_t cb = top->cluster_bytes;
  if (n < cb && delta_unwritten_get(top, off)) {
    pthread_mutex_lock(&top->fill_lock);
    int rc = 0;
    if (delta_unwritten_get(top, off)) {
      uint8_t *buf = ploop_aligned_alloc(cb);
      rc = buf ? store_pread(&top->so, buf, cb, off) : -1;
      if (rc == 0) {
        memcpy(buf + coff, p, n);
        rc = store_pwrite(&top->so, buf, cb, off);
      }
      if (rc == 0)
        delta_unwritten_set(top, off, false);
      free(buf);
      pthread_mutex_unlock(&top->fill_lock);
      return rc;
    }
    pthread_mutex_unlock(&top->fill_lock);
  }
  int rc = store_pwrite(&top->so, p, n, off + coff);
  if (rc == 0 && n == cb)
    delta_unwritten_set(top, off, false);
  return rc;
}

/* Allocates VC in the top delta and writes N bytes at COFF from P into it
 * (P NULL: zeros), copying up the rest of the cluster from below. */
static int alloc_and_write(struct ploop_disk *disk, uint64_t vc, uint64_t coff, const void *p, size_t n)
{
  struct ploop_delta *top = disk->deltas[0];
  uint64_t cb = disk->cluster_bytes, off;
  int r = delta_alloc_begin(top, vc, &off);
  if (r < 0)
    return -1;
  if (r == 1) { /* someone else allocated it meanwhile */
    if (p)
      return write_in_place(top, DELTA_OFF(off), coff, p, n);
    if (store_zero(&top->so, DELTA_OFF(off) + coff, n, STORE_ZERO_KEEP) < 0)
      return ploop_error_os(top->path, "fallocate");
    if (n == cb)
      delta_unwritten_set(top, DELTA_OFF(off), true);
    return 0;
  }
  uint64_t lower_off;
  unsigned lower = disk_find(disk, 1, vc, &lower_off);
  int rc = 0;
  if (n == cb && p) {
    rc = store_pwrite(&top->so, p, n, off);
  } else if (lower) {
    uint8_t *buf = ploop_aligned_alloc(cb);
    if (!buf) {
      rc = -1;
    } else {
      struct ploop_delta *ld = disk->deltas[lower - 1];
      rc = store_pread(&ld->so, buf, cb, lower_off);
      if (rc == 0) {
        if (p)
          memcpy(buf + coff, p, n);
        else
          memset(buf + coff, 0, n);
        rc = store_pwrite(&top->so, buf, cb, off);
      }
      free(buf);
    }
  } else if (!p) {
    /* Nothing below, zeros asked for: the whole cluster allocated as zeros
     * (metadata only on ext4/xfs, not sparse). */
    if (store_zero(&top->so, off, cb, STORE_ZERO_ALLOCATE) < 0)
      rc = ploop_error_os(top->path, "fallocate");
    else
      delta_unwritten_set(top, off, true);
  } else {
    /* Nothing below, part of the cluster written: the rest as written
     * zeros, in one write. A cluster half written, half only allocated is
     * what OpenVZ refuses (extent.c). */
    uint8_t *buf = ploop_aligned_alloc(cb);
    if (!buf) {
      rc = -1;
    } else {
      memcpy(buf + coff, p, n);
      rc = store_pwrite(&top->so, buf, cb, off);
      free(buf);
    }
  }
  if (rc == 0 && p)
    delta_unwritten_set(top, off, false); /* a reused file cluster, now written */
  if (rc == 0)
    delta_alloc_finish(top, vc, off);
  else
    delta_alloc_abandon(top, vc, off);
  return rc;
}

static int write_piece(struct ploop_disk *disk, uint64_t vc, uint64_t coff, const void *p, size_t n)
{
  struct ploop_delta *top = disk->deltas[0];
  uint64_t off = delta_lookup(top, vc);
  if (off)
    return write_in_place(top, DELTA_OFF(off), coff, p, n);
  return alloc_and_write(disk, vc, coff, p, n);
}

static int check_writable(struct ploop_disk *disk)
{
  if (!disk->rdwr)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: disk is open read-only", disk->dir);
  return 0;
}

int ploop_disk_pwrite(struct ploop_disk *disk, const void *buf, size_t len, uint64_t off, unsigned flags)
{
  if (check_writable(disk) < 0 || check_range(disk, off, len) < 0)
    return -1;
  if (!aligned(buf, off, len)) {
    /* Read-modify-write of the covering sectors through a bounce buffer. */
    uint64_t start = off & ~511ull, end = round_up(off + len, 512);
    uint8_t *tmp = ploop_aligned_alloc(end - start);
    if (!tmp)
      return -1;
    int rc = 0;
    if (start != off || end - start != len) {
      rc = ploop_disk_pread(disk, tmp, 512, start);
      if (rc == 0 && end - start > 512)
        rc = ploop_disk_pread(disk, tmp + (end - start - 512), 512, end - 512);
    }
    if (rc == 0) {
      memcpy(tmp + (off - start), buf, len);
      rc = ploop_disk_pwrite(disk, tmp, end - start, start, flags);
    }
    free(tmp);
    return rc;
  }
  uint64_t cb = disk->cluster_bytes;
  const uint8_t *p = buf;
  uint64_t o = off;
  size_t l = len;
  int rc = 0;
  pthread_rwlock_rdlock(&disk->rw);
  if (disk->n == 0)
    rc = disk_released_error(disk);
  while (l > 0 && rc == 0) {
    uint64_t vc = o / cb, coff = o % cb;
    size_t n = (size_t)min_u64(l, cb - coff);
    rc = write_piece(disk, vc, coff, p, n);
    p += n;
    o += n;
    l -= n;
  }
  disk_mark_dirty(disk, off, len);
  pthread_rwlock_unlock(&disk->rw);
  if (rc == 0 && (flags & PLOOP_WRITE_FUA))
    rc = ploop_disk_flush(disk);
  return rc;
}

/* The pins are waited for with the rwlock released: a pin holder may need
 * the read side (a blocking call) before its mapped I/O completes. While
 * DRAINING is set no new pin is handed out, so the wait ends; a pin taken
 * just before is seen under the write side, which map's read side excludes. */
void disk_lock_exclusive(struct ploop_disk *disk)
{
  __atomic_add_fetch(&disk->draining, 1, __ATOMIC_SEQ_CST);
  pthread_rwlock_wrlock(&disk->rw);
  while (__atomic_load_n(&disk->pins, __ATOMIC_SEQ_CST)) {
    pthread_rwlock_unlock(&disk->rw);
    pthread_mutex_lock(&disk->pin_lock);
    while (__atomic_load_n(&disk->pins, __ATOMIC_SEQ_CST))
      pthread_cond_wait(&disk->pin_cond, &disk->pin_lock);
    pthread_mutex_unlock(&disk->pin_lock);
    pthread_rwlock_wrlock(&disk->rw);
  }
  disk->exclusive_gen++;
}

void disk_unlock_exclusive(struct ploop_disk *disk)
{
  __atomic_sub_fetch(&disk->draining, 1, __ATOMIC_SEQ_CST);
  pthread_rwlock_unlock(&disk->rw);
}

int ploop_disk_map(struct ploop_disk *disk, uint64_t off, size_t len, unsigned flags,
                   struct ploop_mapping *map)
{
  bool write = flags & PLOOP_MAP_WRITE;
  if ((write && check_writable(disk) < 0) || check_range(disk, off, len) < 0)
    return -1;
  uint64_t cb = disk->cluster_bytes, vc = off / cb, coff = off % cb;
  if (len == 0 || coff + len > cb)
    return PLOOP_MAP_NONE;
  int rc = PLOOP_MAP_NONE;
  pthread_rwlock_rdlock(&disk->rw);
  if (disk->n == 0)
    rc = disk_released_error(disk);
  else if (!__atomic_load_n(&disk->draining, __ATOMIC_SEQ_CST)) {
    uint64_t at = 0;
    unsigned depth;
    if (write) {
      uint64_t o = delta_lookup(disk->deltas[0], vc); /* only the top is written */
      /* A cluster only allocated takes its first write whole (write_in_place). */
      depth = o != 0 && (len == cb || !delta_unwritten_get(disk->deltas[0], DELTA_OFF(o)));
      at = DELTA_OFF(o);
    } else {
      depth = disk_find(disk, 0, vc, &at);
    }
    /* A store without an fd says so: the caller takes the general path. */
    if (depth && disk->deltas[depth - 1]->so.fd < 0) {
      rc = PLOOP_MAP_NONE;
    } else if (depth) {
      map->fd = disk->deltas[depth - 1]->so.fd;
      map->file_offset = at + coff;
      __atomic_add_fetch(&disk->pins, 1, __ATOMIC_SEQ_CST);
      if (write)
        disk_mark_dirty(disk, off, len);
      rc = PLOOP_MAP_FILE;
    } else if (!write) {
      rc = PLOOP_MAP_ZERO;
    }
  }
  pthread_rwlock_unlock(&disk->rw);
  return rc;
}

void ploop_disk_unmap(struct ploop_disk *disk)
{
  if (__atomic_sub_fetch(&disk->pins, 1, __ATOMIC_SEQ_CST) == 0 &&
      __atomic_load_n(&disk->draining, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&disk->pin_lock);
    pthread_cond_broadcast(&disk->pin_cond);
    pthread_mutex_unlock(&disk->pin_lock);
  }
}

int ploop_disk_flush(struct ploop_disk *disk)
{
  if (!disk->rdwr)
    return 0;
  pthread_rwlock_rdlock(&disk->rw);
  int rc = disk->n ? delta_flush(disk->deltas[0]) : disk_released_error(disk);
  pthread_rwlock_unlock(&disk->rw);
  return rc;
}

/* Makes whole cluster VC read as zeros. KEEP: keep it allocated in the top. */
int disk_zero_cluster(struct ploop_disk *disk, uint64_t vc, bool keep)
{
  struct ploop_delta *top = disk->deltas[0];
  uint64_t cb = disk->cluster_bytes;
  uint64_t off = delta_lookup(top, vc);
  if (top->raw) {
    if (store_zero(&top->so, vc * cb, cb, STORE_ZERO_KEEP) < 0)
      return ploop_error_os(top->path, "fallocate");
    return 0;
  }
  bool lower = disk_find(disk, 1, vc, NULL) != 0;
  if (!off) {
    if (!lower && !keep)
      return 0; /* already a hole everywhere */
    return alloc_and_write(disk, vc, 0, NULL, cb);
  }
  off = DELTA_OFF(off);
  if (keep || lower) {
    if (store_zero(&top->so, off, cb, STORE_ZERO_KEEP) < 0)
      return ploop_error_os(top->path, "fallocate");
    delta_unwritten_set(top, off, true);
    return 0;
  }
  /* Drop the cluster from the top. Punching before the cleared entry is
   * durable is safe: a crash leaves the entry pointing at zeros, which is
   * what the range reads as now. The cluster is never reused in place;
   * compaction moves tail clusters into such holes. */
  delta_set_entry(top, vc, 0);
  if (store_zero(&top->so, off, cb, STORE_ZERO_PUNCH) < 0 && errno != EOPNOTSUPP)
    return ploop_error_os(top->path, "punch hole");
  return 0;
}

static int zero_range(struct ploop_disk *disk, uint64_t off, uint64_t len, bool keep)
{
  uint64_t cb = disk->cluster_bytes;
  int rc = 0;
  uint8_t *zeros = NULL;
  pthread_rwlock_rdlock(&disk->rw);
  if (disk->n == 0)
    rc = disk_released_error(disk);
  uint64_t o = off, l = len;
  while (l > 0 && rc == 0) {
    uint64_t vc = o / cb, coff = o % cb;
    uint64_t n = min_u64(l, cb - coff);
    if (n == cb) {
      rc = disk_zero_cluster(disk, vc, keep);
    } else if (disk_find(disk, 0, vc, NULL) || keep) {
      /* Partial cluster: zeros through the ordinary write path. */
      if (!zeros && !(zeros = ploop_aligned_alloc(cb)))
        rc = -1;
      else
        rc = write_piece(disk, vc, coff, zeros, (size_t)n);
    }
    o += n;
    l -= n;
  }
  disk_mark_dirty(disk, off, len);
  pthread_rwlock_unlock(&disk->rw);
  free(zeros);
  return rc;
}

static int zero_common(struct ploop_disk *disk, uint64_t off, uint64_t len, bool keep, unsigned flags)
{
  if (check_writable(disk) < 0 || check_range(disk, off, len) < 0)
    return -1;
  if ((off | len) & 511) {
    /* Unaligned edges go through pwrite with a zero buffer. */
    uint64_t start = round_up(off, 512), end = (off + len) & ~511ull;
    static const uint8_t z[512];
    if (start > end) /* inside one sector */
      return ploop_disk_pwrite(disk, z, len, off, flags);
    if (start > off && ploop_disk_pwrite(disk, z, start - off, off, 0) < 0)
      return -1;
    if (off + len > end && ploop_disk_pwrite(disk, z, off + len - end, end, 0) < 0)
      return -1;
    off = start;
    len = end - start;
  }
  int rc = zero_range(disk, off, len, keep);
  if (rc == 0 && (flags & PLOOP_WRITE_FUA))
    rc = ploop_disk_flush(disk);
  return rc;
}

int ploop_disk_discard(struct ploop_disk *disk, uint64_t off, uint64_t len)
{
  return zero_common(disk, off, len, false, 0);
}

int ploop_disk_write_zeroes(struct ploop_disk *disk, uint64_t off, uint64_t len, unsigned flags)
{
  return zero_common(disk, off, len, flags & PLOOP_ZERO_NO_HOLE, flags);
}

int ploop_disk_block_status(struct ploop_disk *disk, uint64_t off, uint64_t len, struct ploop_extent *out,
                            size_t max)
{
  if (check_range(disk, off, len) < 0)
    return -1;
  if (max == 0 || len == 0)
    return 0;
  uint64_t cb = disk->cluster_bytes, end = off + len;
  size_t n = 0;
  pthread_rwlock_rdlock(&disk->rw);
  if (disk->n == 0) {
    pthread_rwlock_unlock(&disk->rw);
    return disk_released_error(disk);
  }
  for (uint64_t o = off; o < end;) {
    uint64_t vc = o / cb;
    uint64_t next = min_u64((vc + 1) * cb, end);
    unsigned depth = disk_find(disk, 0, vc, NULL);
    if (n > 0 && out[n - 1].depth == depth) {
      out[n - 1].length += next - o;
    } else {
      if (n == max)
        break;
      out[n].offset = o;
      out[n].length = next - o;
      out[n].depth = depth;
      n++;
    }
    o = next;
  }
  pthread_rwlock_unlock(&disk->rw);
  return (int)n;
}

/* A disk in a store without directories (rbd:POOL/NAME): LOC names the
 * disk, its top is PLOOP_DEFAULT_IMAGE_NAME. */
static int disk_create_in_store(const char *loc, const struct ploop_delta_create_params *p)
{
  char *dir = NULL, *xml = NULL;
  if (store_for(loc)->resolve(loc, &dir, &xml) < 0)
    return -1;
  free(xml);
  int rc = -1;
  struct ploop_descriptor *old = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DEFAULT_IMAGE_NAME);
  int lock = ploop_lock_disk(dir, PLOOP_LOCK_WRITER);
  if (lock < 0)
    goto out;
  if ((old = ploop_descriptor_load(dir)) != NULL) {
    rc = ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: a disk already exists here", dir);
    goto out;
  }
  if (ploop_get_status() != PLOOP_ERR_NOTFOUND)
    goto out;
  if (delta_create_file(dir, path, p, false) < 0)
    goto out;
  struct ploop_delta *d = delta_open(dir, path, PLOOP_OPEN_RDONLY);
  struct ploop_descriptor *desc = d ? descriptor_new(dir, d->h.size_sectors, d->h.cluster_sectors) : NULL;
  delta_close(d, false);
  if (!desc || descriptor_add_image(desc, PLOOP_TOP_GUID, PLOOP_DEFAULT_IMAGE_NAME, NULL) < 0 ||
      ploop_descriptor_save(desc) < 0) {
    ploop_descriptor_free(desc);
    store_remove(dir, path);
    goto out;
  }
  ploop_descriptor_free(desc);
  rc = 0;
out:
  ploop_descriptor_free(old);
  ploop_unlock_disk(lock);
  free(dir);
  return rc;
}

int ploop_disk_create(const char *delta_path, const struct ploop_delta_create_params *p)
{
  if (!store_is_file(store_for(delta_path)))
    return disk_create_in_store(delta_path, p);
  char *copy1 = ploop_strdup(delta_path), *copy2 = ploop_strdup(delta_path);
  int rc = -1;
  if (!copy1 || !copy2)
    goto out;
  const char *dir = dirname(copy1), *file = basename(copy2);
  char xml[4096];
  snprintf(xml, sizeof xml, "%s/%s", dir, PLOOP_DESCRIPTOR_NAME);
  if (access(xml, F_OK) == 0) {
    rc = ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: a disk already exists here", xml);
    goto out;
  }
  if (!strcmp(file, PLOOP_DESCRIPTOR_NAME) || file[0] == '.') {
    rc = ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: not a valid image file name", delta_path);
    goto out;
  }
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    rc = ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: no such directory", dir);
    goto out;
  }
  if (delta_create_file(NULL, delta_path, p, false) < 0)
    goto out;
  char real[4096];
  if (!realpath(dir, real)) {
    rc = ploop_error_os(dir, "realpath");
    unlink(delta_path);
    goto out;
  }
  struct ploop_delta *d = delta_open(NULL, delta_path, PLOOP_OPEN_RDONLY);
  if (!d) {
    unlink(delta_path);
    goto out;
  }
  struct ploop_descriptor *desc = descriptor_new(real, d->h.size_sectors, d->h.cluster_sectors);
  delta_close(d, false);
  if (!desc || descriptor_add_image(desc, PLOOP_TOP_GUID, file, NULL) < 0 ||
      ploop_descriptor_save(desc) < 0) {
    ploop_descriptor_free(desc);
    unlink(delta_path);
    goto out;
  }
  ploop_descriptor_free(desc);
  rc = 0;
out:
  free(copy1);
  free(copy2);
  return rc;
}
