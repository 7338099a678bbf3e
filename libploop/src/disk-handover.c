/* Release and acquire of an open disk (libploop.h): a disk in shared
 * storage moves to another host while this process keeps its handle, so
 * that the mount above it (FUSE file, loop device, filesystem) stays and a
 * failed hand-over resumes where it stopped. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int disk_released_error(struct ploop_disk *disk)
{
  return ploop_error(PLOOP_ERR_BUSY, ESHUTDOWN, "%s: released to another holder (not acquired back)",
                     disk->dir);
}

bool ploop_disk_released(const struct ploop_disk *disk)
{
  return disk->rdwr && disk->n == 0;
}

int ploop_disk_release(struct ploop_disk *disk)
{
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: only a read-write top can be released", disk->dir);
  disk_lock_exclusive(disk);
  int rc = 0;
  if (disk->n) {
    rc = delta_flush(disk->deltas[0]);
    /* Closed even when the flush failed: another host may be about to
     * take the disk over, and this side must not write after the answer. */
    for (unsigned i = 0; i < disk->n; i++) {
      if (delta_close(disk->deltas[i], rc == 0) < 0 && rc == 0)
        rc = -1;
      disk->deltas[i] = NULL;
    }
    disk->n = 0;
    ploop_unlock_disk(disk->lock_fd);
    disk->lock_fd = -1;
  }
  disk_unlock_exclusive(disk);
  return rc;
}

void disk_preopen_top(struct ploop_disk *disk)
{
  /* PLOOP_PREOPEN=0: no open ahead (ACQUIRE opens in full, as before) */
  const char *env = getenv("PLOOP_PREOPEN");
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(disk->desc, NULL, idx, PLOOP_MAX_DELTAS);
  if (n <= 0 || !store_for(disk->dir)->open_unlocked || (env && strcmp(env, "0") == 0))
    return;
  const struct ploop_image_desc *im = &disk->desc->images[idx[n - 1]]; /* idx is base first */
  char *path = im->plain ? NULL : ploop_descriptor_image_path(disk->desc, im);
  if (path)
    disk->pre = delta_preopen(disk->dir, path);
  free(path);
}

int disk_open_preopened(struct ploop_disk *disk, unsigned flags)
{
  struct ploop_delta *pre = disk->pre;
  disk->pre = NULL;
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(disk->desc, NULL, idx, PLOOP_MAX_DELTAS);
  const struct ploop_image_desc *im = n > 0 ? &disk->desc->images[idx[n - 1]] : NULL;
  char *path = im && !im->plain ? ploop_descriptor_image_path(disk->desc, im) : NULL;
  bool same = path && pre && strcmp(path, pre->path) == 0;
  free(path);
  if (!same) {
    delta_discard_preopened(pre);
    return ploop_error(PLOOP_ERR_BUSY, ESTALE, "%s: the top changed since it was opened ahead", disk->dir);
  }
  return disk_open_chain_top(disk, NULL, flags, pre);
}

bool ploop_disk_acquired_ahead(const struct ploop_disk *disk)
{
  return disk->acquired_ahead;
}

int ploop_disk_acquire(struct ploop_disk *disk, unsigned acquire_flags)
{
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: only a read-write top can be acquired", disk->dir);
  disk_lock_exclusive(disk);
  int rc = 0;
  if (disk->n)
    goto out;
  struct ploop_descriptor *d = ploop_descriptor_load(disk->dir);
  if (!d) {
    rc = -1;
    goto out;
  }
  int lock = -2;
  if (!(disk->open_flags & PLOOP_OPEN_NO_LOCK)) {
    lock = ploop_lock_disk(disk->dir, PLOOP_LOCK_WRITER);
    if (lock == -1) {
      ploop_descriptor_free(d);
      rc = -1;
      goto out;
    }
  }
  struct ploop_descriptor *old = disk->desc;
  uint64_t size = disk->size_bytes, cluster = disk->cluster_bytes;
  disk->desc = d;
  unsigned flags =
      (disk->open_flags & ~(unsigned)PLOOP_OPEN_STANDBY) | (acquire_flags & PLOOP_OPEN_ALLOW_DIRTY);
  /* The top opened ahead saves the image's open; whatever goes wrong with
   * it (stale, changed, refused), the full open decides. */
  disk->acquired_ahead = disk->pre && disk_open_preopened(disk, flags) == 0;
  if (!disk->acquired_ahead && disk_open_chain(disk, NULL, flags) < 0) {
    rc = -1;
  } else if (disk->size_bytes != size || disk->cluster_bytes != cluster) {
    disk_close_deltas(disk, true);
    rc = ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: its size changed while it was released (%llu, was %llu)",
                     disk->dir, (unsigned long long)disk->size_bytes, (unsigned long long)size);
  }
  if (rc < 0) {
    disk->desc = old;
    disk->size_bytes = size;
    disk->cluster_bytes = cluster;
    ploop_descriptor_free(d);
    ploop_unlock_disk(lock);
    goto out;
  }
  ploop_descriptor_free(old);
  disk->lock_fd = lock;
out:
  disk_unlock_exclusive(disk);
  return rc;
}
