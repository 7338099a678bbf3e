/* Dirty tracking of a disk (libploop.h: ploop_disk_dirty_*): a bitmap of
 * the clusters written since it was started or last read with CLEAR; the
 * write path sets bits in disk_mark_dirty (disk.c). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int ploop_disk_dirty_start(struct ploop_disk *disk)
{
  uint64_t clusters = div_round_up(disk->size_bytes, disk->cluster_bytes);
  /* Room for the largest size the BAT can address, so resize needs no realloc. */
  uint64_t cap = disk->deltas[0]->raw ? clusters : disk->deltas[0]->h.bat_entries;
  if (cap < clusters)
    cap = clusters;
  disk_lock_exclusive(disk);
  if (!disk->dirty || disk->dirty_bytes < div_round_up(cap, 8)) {
    uint8_t *b = calloc(div_round_up(cap, 8), 1);
    if (!b) {
      disk_unlock_exclusive(disk);
      return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    }
    free(disk->dirty);
    disk->dirty = b;
    disk->dirty_bytes = div_round_up(cap, 8);
  } else {
    memset(disk->dirty, 0, disk->dirty_bytes);
  }
  disk->dirty_on = true;
  disk_unlock_exclusive(disk);
  return 0;
}

int ploop_disk_dirty_stop(struct ploop_disk *disk)
{
  disk_lock_exclusive(disk);
  disk->dirty_on = false;
  disk_unlock_exclusive(disk);
  return 0;
}

int ploop_disk_dirty_get(struct ploop_disk *disk, uint8_t *bitmap, size_t bytes, bool clear)
{
  disk_lock_exclusive(disk); /* no write in flight: copy and clear are atomic */
  if (!disk->dirty_on) {
    disk_unlock_exclusive(disk);
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: dirty tracking is not started", disk->dir);
  }
  size_t need = (size_t)div_round_up(div_round_up(disk->size_bytes, disk->cluster_bytes), 8);
  if (bytes < need) {
    disk_unlock_exclusive(disk);
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: dirty bitmap needs %zu bytes, got %zu", disk->dir, need,
                       bytes);
  }
  memcpy(bitmap, disk->dirty, need);
  memset(bitmap + need, 0, bytes - need);
  if (clear)
    memset(disk->dirty, 0, disk->dirty_bytes);
  disk_unlock_exclusive(disk);
  return 0;
}
