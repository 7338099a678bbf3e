/* Resize of a delta and of a disk, and compaction. Growing past what the
 * BAT area holds relocates the data clusters that sit where the BAT must
 * grow (copy, durable, repoint), zeroes the freed space, and writes the
 * header last: a crash at any point leaves the old or the new size, whole. */
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static int relocate_for_bat(struct ploop_delta *d, uint64_t new_first)
{
  uint64_t cb = d->cluster_bytes;
  uint64_t old_first = div_round_up((uint64_t)d->h.first_block * 512, cb);
  if (d->alloc_head < new_first)
    d->alloc_head = new_first;
  uint8_t *buf = ploop_aligned_alloc(cb);
  if (!buf)
    return -1;
  uint64_t moved = 0;
  int rc = 0;
  uint64_t *vcs = calloc(new_first - old_first, sizeof *vcs),
           *offs = calloc(new_first - old_first, sizeof *offs);
  if (!vcs || !offs)
    rc = ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  for (uint64_t vc = 0; rc == 0 && vc < d->h.bat_entries; vc++) {
    uint64_t off = delta_lookup(d, vc);
    if (!off || off / cb >= new_first)
      continue;
    uint64_t to = d->alloc_head++ * cb;
    rc = store_pread(&d->so, buf, cb, off);
    if (rc == 0)
      rc = store_pwrite(&d->so, buf, cb, to);
    vcs[moved] = vc;
    offs[moved++] = to;
  }
  if (rc == 0 && moved)
    rc = store_flush(&d->so);
  if (rc == 0)
    ploop_fault_point("resize-clusters-copied");
  for (uint64_t i = 0; rc == 0 && i < moved; i++)
    delta_set_entry(d, vcs[i], offs[i]);
  if (rc == 0)
    rc = delta_flush(d);
  /* The freed clusters become BAT: they must read as empty slots. They are
   * zeroed by allocation, not by writing (extent.c: the first BAT page
   * written into one writes it whole). */
  if (rc == 0)
    rc = store_zero(&d->so, old_first * cb, (new_first - old_first) * cb, STORE_ZERO_RESERVE);
  if (rc == 0)
    rc = store_flush(&d->so);
  if (rc == 0)
    ploop_fault_point("resize-bat-area-zeroed");
  free(vcs);
  free(offs);
  free(buf);
  return rc;
}

static int grow_bat_buffer(struct ploop_delta *d, size_t bytes)
{
  uint8_t *nb = ploop_aligned_alloc(bytes);
  uint8_t *np = calloc(bytes / PLOOP_BAT_PAGE, 1);
  if (!nb || !np) {
    free(nb);
    free(np);
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  }
  size_t nc = (size_t)div_round_up(bytes, d->cluster_bytes);
  if (d->bat_unwritten && nc > d->n_bat_clusters) {
    uint8_t *nu = realloc(d->bat_unwritten, nc);
    if (!nu) {
      free(nb);
      free(np);
      return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    }
    memset(nu + d->n_bat_clusters, 1, nc - d->n_bat_clusters); /* zeroed by allocation */
    d->bat_unwritten = nu;
    d->n_bat_clusters = nc;
  }
  memcpy(nb, d->bat_raw, d->bat_bytes);
  memcpy(np, d->page_dirty, d->n_pages);
  free(d->bat_raw);
  free(d->page_dirty);
  d->bat_raw = nb;
  d->page_dirty = np;
  d->bat_bytes = bytes;
  d->n_pages = bytes / PLOOP_BAT_PAGE;
  return 0;
}

int delta_set_size(struct ploop_delta *d, uint64_t size_sectors, bool force)
{
  uint32_t cs = d->h.cluster_sectors;
  uint64_t cb = d->cluster_bytes;
  uint64_t sectors = round_up(size_sectors, cs);
  uint64_t entries = sectors / cs;
  if (sectors == 0 || sectors * 512 > PLOOP_MAX_VIRTUAL_BYTES)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: size %llu bytes is out of range (1 cluster to 50 TiB)",
                       d->path, (unsigned long long)sectors * 512);
  if (d->h.version == 1 && sectors > UINT32_MAX)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: format v1 is limited to 2 TiB", d->path);
  if (entries > PLOOP_MAX_BAT_ENTRIES)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "%s: %llu clusters exceed the %llu-entry BAT limit; use bigger clusters", d->path,
                       (unsigned long long)entries, PLOOP_MAX_BAT_ENTRIES);
  uint64_t old_entries = d->h.bat_entries;
  if (entries < old_entries) {
    uint64_t lost = 0;
    for (uint64_t vc = entries; vc < old_entries; vc++)
      lost += delta_lookup(d, vc) != 0;
    if (lost && !force)
      return ploop_error(
          PLOOP_ERR_PARAM, EINVAL,
          "%s: %llu allocated clusters lie past the new end; shrink the filesystem first or use --force",
          d->path, (unsigned long long)lost);
  } else {
    uint64_t need = round_up(PLOOP_HEADER_SIZE + 4 * entries, cb);
    if (need > (uint64_t)d->h.first_block * 512) {
      if (relocate_for_bat(d, need / cb) < 0)
        return -1;
      if (grow_bat_buffer(d, round_up(need, PLOOP_BAT_PAGE)) < 0)
        return -1;
      d->h.first_block = (uint32_t)(need / 512);
    }
    /* Slots between the old and new end must be empty. */
    for (uint64_t vc = old_entries; vc < entries; vc++)
      if (delta_bat(d)[vc])
        delta_set_entry(d, vc, 0);
  }
  /* Growing: the new slots are empty on disk first, then the header says
   * they exist. Shrinking: the header first, so from then on the delta reads
   * as the new size, whole; the slots past its end are cleared after (a
   * crash in between leaves slots no one reads, and a later grow clears
   * them). Clearing first would let a crash show the old size with the
   * tail falling through to older snapshots' data. */
  bool shrink = entries < old_entries;
  uint32_t keep_entries = d->h.bat_entries;
  uint64_t keep_sectors = d->h.size_sectors;
  if (!shrink && delta_flush(d) < 0)
    return -1;
  d->h.bat_entries = (uint32_t)entries;
  d->h.size_sectors = sectors;
  delta_fill_geometry(&d->h, sectors);
  if (delta_write_header(d) < 0) {
    d->h.bat_entries = keep_entries;
    d->h.size_sectors = keep_sectors;
    return -1;
  }
  if (d->unwritten && delta_unwritten_grow(d) < 0)
    return -1;
  if (shrink) {
    for (uint64_t vc = entries; vc < old_entries; vc++)
      if (delta_bat(d)[vc])
        delta_set_entry(d, vc, 0);
    if (delta_flush(d) < 0)
      return -1;
  }
  return 0;
}

int ploop_disk_resize(struct ploop_disk *disk, uint64_t new_bytes, unsigned flags)
{
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: resize needs the disk open read-write", disk->dir);
  if (new_bytes == 0)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: size must be greater than zero", disk->dir);
  /* Before any rounding: a size near 2^64 would wrap to a tiny one. */
  if (new_bytes > PLOOP_MAX_VIRTUAL_BYTES)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: bad size %llu bytes: exceeds the 50 TiB limit", disk->dir,
                       (unsigned long long)new_bytes);
  disk_lock_exclusive(disk);
  int rc = -1;
  struct ploop_delta *top = disk->deltas[0];
  uint64_t cb = disk->cluster_bytes;
  uint64_t sectors = round_up(div_round_up(new_bytes, 512), disk->desc->cluster_sectors);
  uint64_t old_clusters = div_round_up(disk->size_bytes, cb), new_clusters = sectors * 512 / cb;
  struct ploop_descriptor *nd = NULL;
  if (top->raw) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: the top image is raw; convert it to ploop1 to resize",
                disk->dir);
    goto out;
  }
  if (new_clusters < old_clusters) {
    uint64_t lost = 0;
    for (uint64_t vc = new_clusters; vc < old_clusters; vc++)
      lost += disk_find(disk, 0, vc, NULL) != 0;
    if (lost && !(flags & PLOOP_RESIZE_FORCE)) {
      ploop_error(
          PLOOP_ERR_PARAM, EINVAL,
          "%s: %llu allocated clusters lie past the new end; shrink the filesystem first or use --force",
          disk->dir, (unsigned long long)lost);
      goto out;
    }
  }
  uint64_t allocated = delta_count_allocated(top);
  if (delta_set_size(top, sectors, flags & PLOOP_RESIZE_FORCE) < 0)
    goto out;
  /* Clusters dropped past the new end: their space goes back and no
   * unreferenced tail stays behind (OpenVZ's check calls that an error). */
  if (delta_count_allocated(top) < allocated && delta_compact(top, NULL) < 0)
    goto out;
  /* A lower delta may hold data past an earlier shrink: the top hides it. */
  for (uint64_t vc = old_clusters; vc < new_clusters; vc++)
    if (disk_find(disk, 1, vc, NULL) && disk_zero_cluster(disk, vc, true) < 0)
      goto out;
  if (delta_flush(top) < 0)
    goto out;
  nd = descriptor_dup(disk->desc);
  if (!nd)
    goto out;
  nd->size_sectors = sectors;
  ploop_chs(sectors, &nd->cylinders, &nd->heads, &nd->sectors);
  if (ploop_descriptor_save(nd) < 0)
    goto out;
  ploop_descriptor_free(disk->desc);
  disk->desc = nd;
  nd = NULL;
  disk->size_bytes = sectors * 512;
  if (disk->dirty && disk->dirty_bytes < div_round_up(new_clusters, 8)) {
    uint8_t *b = calloc(div_round_up(new_clusters, 8), 1);
    if (b) {
      memcpy(b, disk->dirty, disk->dirty_bytes);
      free(disk->dirty);
      disk->dirty = b;
      disk->dirty_bytes = div_round_up(new_clusters, 8);
    } else {
      disk->dirty_on = false; /* cannot track any more: say so to the next reader */
    }
  }
  rc = 0;
out:
  ploop_descriptor_free(nd);
  disk_unlock_exclusive(disk);
  return rc;
}

int ploop_resize(const char *dir_or_xml, uint64_t new_bytes, unsigned flags)
{
  struct ploop_disk *disk = ploop_disk_open(dir_or_xml, NULL, PLOOP_OPEN_RDWR);
  if (!disk)
    return -1;
  int rc = ploop_disk_resize(disk, new_bytes, flags);
  if (ploop_disk_close(disk) < 0)
    rc = -1;
  return rc;
}

int ploop_disk_compact(struct ploop_disk *disk, uint64_t *bytes_reclaimed)
{
  if (bytes_reclaimed)
    *bytes_reclaimed = 0;
  if (!disk->rdwr || disk->snapshot_guid)
    return ploop_error(PLOOP_ERR_PARAM, EROFS, "%s: compaction needs the disk open read-write", disk->dir);
  disk_lock_exclusive(disk);
  int rc = delta_compact(disk->deltas[0], bytes_reclaimed);
  disk_unlock_exclusive(disk);
  return rc;
}

int delta_compact(struct ploop_delta *d, uint64_t *bytes_reclaimed)
{
  int rc = 0;
  uint64_t *owner = NULL; /* physical cluster -> virtual cluster + 1 */
  uint8_t *buf = NULL;
  if (d->raw)
    goto out;
  uint64_t cb = d->cluster_bytes, first = div_round_up((uint64_t)d->h.first_block * 512, cb);
  uint64_t head = d->alloc_head;
  owner = calloc(head + 1, sizeof *owner);
  buf = ploop_aligned_alloc(cb);
  if (!owner || !buf) {
    rc = ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    goto out;
  }
  for (uint64_t vc = 0; vc < d->h.bat_entries; vc++) {
    uint64_t off = delta_lookup(d, vc);
    if (off && off / cb < head)
      owner[off / cb] = vc + 1;
  }
  if ((rc = delta_flush(d)) < 0)
    goto out;
  uint64_t hole = first, tail = head;
  uint64_t moves = 0;
  bool cancelled = false;
  for (;;) {
    /* Asked to stop (ploop_cancel): between two moves every entry points
     * at durable data, so the flush and truncation below leave a smaller,
     * consistent image; compacting again finishes the work. */
    if (ploop_cancelled()) {
      cancelled = true;
      break;
    }
    while (hole < head && owner[hole])
      hole++;
    while (tail > first && !owner[tail - 1])
      tail--;
    if (hole >= tail - 1 || tail == first)
      break;
    uint64_t from = tail - 1, vc = owner[from] - 1;
    if ((rc = store_pread(&d->so, buf, cb, from * cb)) < 0 ||
        (rc = store_pwrite(&d->so, buf, cb, hole * cb)) < 0)
      goto out;
    owner[hole] = vc + 1;
    owner[from] = 0;
    /* Rule 1: the copy is durable before the entry moves; batched per 256 moves. */
    delta_set_entry(d, vc, hole * cb);
    if (++moves % 256 == 0 && (rc = delta_flush(d)) < 0)
      goto out;
  }
  if ((rc = delta_flush(d)) < 0)
    goto out;
  while (tail > first && !owner[tail - 1])
    tail--;
  uint64_t old_size = 0;
  if ((rc = store_size(&d->so, &old_size)) < 0)
    goto out;
  if (tail < first)
    tail = first;
  if ((rc = store_truncate(&d->so, tail * cb)) < 0 || (rc = store_flush(&d->so)) < 0)
    goto out;
  d->alloc_head = tail;
  if (bytes_reclaimed && old_size > tail * cb)
    *bytes_reclaimed = old_size - tail * cb;
  if (cancelled) {
    /* Holes the discards punched below the tail stay; allocate them (whole
     * clusters, reading as zeros) so the file is not sparse: OpenVZ's
     * kernel maps a delta's extents directly and its check refuses holes. */
    for (uint64_t h = first; h < tail;) {
      uint64_t n = 0;
      while (h + n < tail && !owner[h + n])
        n++;
      if (n && store_zero(&d->so, h * cb, n * cb, STORE_ZERO_ALLOCATE) < 0 && errno != EOPNOTSUPP) {
        rc = ploop_error_os(d->path, "fallocate");
        goto out;
      }
      h += n ? n : 1;
    }
    rc = ploop_cancel_check();
  }
out:
  free(owner);
  free(buf);
  return rc;
}
