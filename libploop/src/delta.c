/* One delta file: create, open with validation at the door, allocation,
 * the BAT write-back that keeps rule 1 (data durable before its BAT entry),
 * the in-use mark, close. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "store-rbd-recv.h"

void ploop_chs(uint64_t size_sectors, uint32_t *cylinders, uint32_t *heads, uint32_t *sectors)
{
  /* Legacy CHS, by ploop's rule: 16 heads x 63 sectors inside the ATA
   * range, otherwise the first (sectors, heads) pair that divides evenly. */
  static const uint32_t spts[] = {63, 32, 16, 8}, hds[] = {16, 8, 4, 2};
  uint64_t cyl = size_sectors;
  *heads = 1;
  *sectors = 1;
  if (size_sectors > 1032192 && size_sectors < 16777216) {
    *heads = 16;
    *sectors = 63;
    cyl = size_sectors / (16 * 63);
  } else {
    for (unsigned i = 0; i < 4 && *heads == 1; i++)
      for (unsigned j = 0; j < 4; j++)
        if (size_sectors % ((uint64_t)spts[i] * hds[j]) == 0) {
          *heads = hds[j];
          *sectors = spts[i];
          cyl = size_sectors / ((uint64_t)spts[i] * hds[j]);
          break;
        }
  }
  *cylinders = cyl > UINT32_MAX ? UINT32_MAX : (uint32_t)cyl;
}

void delta_fill_geometry(struct ploop_header_host *h, uint64_t size_sectors)
{
  uint32_t spt; /* not stored: that header slot carries the cluster size */
  ploop_chs(size_sectors, &h->cylinders, &h->heads, &spt);
}

static int validate_create_params(const char *path, const struct ploop_delta_create_params *p,
                                  uint32_t *cs_out, uint64_t *sectors_out, int *version_out)
{
  uint32_t cs = p->cluster_sectors ? p->cluster_sectors : PLOOP_DEFAULT_CLUSTER_SECTORS;
  int version = p->version ? p->version : 2;
  if (version != 1 && version != 2)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: format version must be 1 or 2, not %d", path, version);
  if (!is_pow2(cs) || cs < PLOOP_MIN_CLUSTER_SECTORS || cs > PLOOP_MAX_CLUSTER_SECTORS)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "%s: cluster size %u sectors is not a power of two between %u and %u", path, cs,
                       PLOOP_MIN_CLUSTER_SECTORS, PLOOP_MAX_CLUSTER_SECTORS);
  if (p->size_bytes == 0)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: size must be greater than zero", path);
  if (p->size_bytes > PLOOP_MAX_VIRTUAL_BYTES)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: size %llu bytes exceeds the 50 TiB limit", path,
                       (unsigned long long)p->size_bytes);
  uint64_t sectors = round_up(div_round_up(p->size_bytes, 512), cs);
  if (version == 1 && sectors > UINT32_MAX)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: format v1 is limited to 2 TiB", path);
  if (sectors / cs > PLOOP_MAX_BAT_ENTRIES)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL,
                       "%s: %llu clusters of %u KiB exceed the %llu-entry BAT limit; use bigger clusters", path,
                       (unsigned long long)(sectors / cs), cs / 2, PLOOP_MAX_BAT_ENTRIES);
  *cs_out = cs;
  *sectors_out = sectors;
  *version_out = version;
  return 0;
}

int delta_create_file(const char *dir, const char *path, const struct ploop_delta_create_params *p,
                      bool in_use)
{
  struct store_obj so;
  if (delta_create_file_nosync(dir, path, p, in_use, &so) < 0)
    return -1;
  if (store_flush(&so) < 0) {
    store_close(&so);
    store_remove(dir, path);
    return -1;
  }
  store_close(&so);
  ploop_fault_point("delta-created");
  return 0;
}

int delta_create_file_nosync(const char *dir, const char *path, const struct ploop_delta_create_params *p,
                             bool in_use, struct store_obj *so)
{
  uint32_t cs = 0;
  uint64_t sectors = 0;
  int version = 0;
  if (validate_create_params(path, p, &cs, &sectors, &version) < 0)
    return -1;
  struct ploop_header_host h = {0};
  h.version = version;
  h.type = PLOOP_IMAGE_TYPE;
  h.cluster_sectors = cs;
  h.bat_entries = (uint32_t)(sectors / cs);
  h.size_sectors = sectors;
  h.flags = PLOOP_CIF_EMPTY;
  h.in_use = in_use ? PLOOP_IN_USE : PLOOP_CLEAN_V20;
  delta_fill_geometry(&h, sectors);
  uint64_t cluster = (uint64_t)cs * 512;
  uint64_t bat_area = round_up(PLOOP_HEADER_SIZE + 4ull * h.bat_entries, cluster);
  h.first_block = (uint32_t)(bat_area / 512);

  if (store_create(so, dir, path) < 0)
    return -1;
  /* Cluster 0 (the header and the first BAT slots) is written whole; the
   * rest of the BAT area is only allocated, reading as zeros (empty slots),
   * so creating a delta costs the same for any size: that is what keeps a
   * snapshot instant. No holes: OpenVZ refuses a sparse image (extent.c). */
  uint8_t *buf = ploop_aligned_alloc(cluster);
  if (!buf)
    goto fail;
  if (store_truncate(so, bat_area) < 0)
    goto fail;
  if (store_zero(so, cluster, bat_area - cluster, STORE_ZERO_RESERVE) < 0)
    goto fail;
  ploop_header_encode(&h, buf);
  if (store_pwrite(so, buf, cluster, 0) < 0)
    goto fail;
  free(buf);
  return 0;
fail:
  free(buf);
  store_close(so);
  store_remove(dir, path);
  return -1;
}

int ploop_delta_create(const char *path, const struct ploop_delta_create_params *p)
{
  if (delta_create_file(NULL, path, p, false) < 0)
    return -1;
  return store_sync_names(NULL, path);
}

static int corrupt(const char *path, const char *fmt, unsigned long long a, unsigned long long b)
{
  char what[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  snprintf(what, sizeof what, fmt, a, b); /* fmt: always a literal of this file */
#pragma GCC diagnostic pop
  return ploop_error(PLOOP_ERR_CORRUPT, EUCLEAN, "%s: %s", path, what);
}

/* Header checks shared by open and check. Returns 0 or sets error. */
static int validate_header(const char *path, const struct ploop_header_host *h, uint64_t file_size)
{
  if (h->version == 0)
    return corrupt(path, "not a ploop image: bad signature", 0, 0);
  if (h->type != PLOOP_IMAGE_TYPE)
    return corrupt(path, "unsupported image type %llu (expected 2)", h->type, 0);
  uint32_t cs = h->cluster_sectors;
  if (!is_pow2(cs) || cs < PLOOP_MIN_CLUSTER_SECTORS || cs > PLOOP_MAX_CLUSTER_SECTORS)
    return corrupt(path, "invalid cluster size %llu sectors", cs, 0);
  if (h->bat_entries == 0)
    return corrupt(path, "BAT has no entries", 0, 0);
  if (h->bat_entries > PLOOP_MAX_BAT_ENTRIES)
    return corrupt(path, "BAT of %llu entries is over the limit of %llu", h->bat_entries, PLOOP_MAX_BAT_ENTRIES);
  if (h->size_sectors == 0)
    return corrupt(path, "virtual size is zero", 0, 0);
  if (h->version == 2 && h->first_block % cs)
    return corrupt(path, "first data block (sector %llu) is not cluster-aligned", h->first_block, 0);
  if (h->in_use != PLOOP_IN_USE && h->in_use != PLOOP_CLEAN_V20 && h->in_use != PLOOP_CLEAN_V21)
    return corrupt(path, "unknown in-use mark 0x%llx", h->in_use, 0);
  if (h->flags & ~(PLOOP_CIF_EMPTY | PLOOP_CIF_FMT_CONVERT))
    return corrupt(path, "unknown header flags 0x%llx", h->flags, 0);
  if (h->size_sectors > (uint64_t)h->bat_entries * cs)
    return corrupt(path, "virtual size %llu sectors exceeds what the BAT maps (%llu sectors)",
                   h->size_sectors, (unsigned long long)h->bat_entries * cs);
  if (h->size_sectors * 512 > PLOOP_MAX_VIRTUAL_BYTES * 4)
    return corrupt(path, "absurd virtual size %llu sectors", h->size_sectors, 0);
  uint64_t bat_end = PLOOP_HEADER_SIZE + 4ull * h->bat_entries;
  if ((uint64_t)h->first_block * 512 < bat_end)
    return corrupt(path, "first data block at sector %llu overlaps the BAT (ends at byte %llu)",
                   h->first_block, bat_end);
  /* Open reads the whole header area into memory. A data start past the
   * cluster the BAT ends in is legal (a shrink keeps it where it was, and
   * the file holds that area), but one the file does not hold would make a
   * 32 KiB file cost up to 2 TiB of memory. */
  uint64_t area_end = round_up(bat_end, (uint64_t)cs * 512);
  if ((uint64_t)h->first_block * 512 > area_end && (uint64_t)h->first_block * 512 > file_size)
    return corrupt(path, "first data block at sector %llu lies past the end of the BAT area (sector %llu) and of the file",
                   h->first_block, area_end / 512);
  if (file_size < (uint64_t)h->first_block * 512 && file_size < round_up(bat_end, 512))
    return corrupt(path, "file truncated: %llu bytes, the BAT needs %llu", file_size, bat_end);
  if (h->flags & PLOOP_CIF_FMT_CONVERT)
    return ploop_error(PLOOP_ERR_BUSY, EBUSY,
                       "%s: a format conversion was interrupted; run 'ploop check -F -d'", path);
  return 0;
}

static void delta_free(struct ploop_delta *d)
{
  if (!d)
    return;
  store_close(&d->so);
  pthread_mutex_destroy(&d->lock);
  pthread_mutex_destroy(&d->flush_lock);
  pthread_mutex_destroy(&d->fill_lock);
  pthread_cond_destroy(&d->cond);
  free(d->bat_raw);
  free(d->page_dirty);
  free(d->bat_unwritten);
  free(d->unwritten);
  free(d->path);
  free(d->dir);
  free(d);
}

static struct ploop_delta *delta_alloc(const char *dir, const char *path)
{
  struct ploop_delta *d = calloc(1, sizeof *d);
  if (!d) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    return NULL;
  }
  d->so.fd = -1;
  pthread_mutex_init(&d->lock, NULL);
  pthread_mutex_init(&d->flush_lock, NULL);
  pthread_mutex_init(&d->fill_lock, NULL);
  pthread_cond_init(&d->cond, NULL);
  d->path = ploop_strdup(path);
  d->dir = dir ? ploop_strdup(dir) : NULL;
  if (!d->path || (dir && !d->dir)) {
    delta_free(d);
    return NULL;
  }
  return d;
}

/* Walks the BAT: every entry must be aligned, past the BAT, inside the
 * file, and used once. Sets alloc_head past the last cluster in use. */
static int validate_bat(struct ploop_delta *d, uint64_t file_size)
{
  uint64_t cb = d->cluster_bytes;
  uint64_t file_clusters = div_round_up(file_size, cb);
  uint64_t first = div_round_up((uint64_t)d->h.first_block * 512, cb);
  uint64_t nbits = file_clusters + 1;
  uint64_t *seen = calloc(div_round_up(nbits, 64), 8);
  if (!seen)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  uint64_t max_used = 0;
  int rc = 0;
  const uint32_t *bat = delta_bat(d);
  for (uint64_t i = 0; i < d->h.bat_entries; i++) {
    uint32_t e = le32toh(bat[i]);
    if (e == 0)
      continue;
    uint64_t c;
    if (d->h.version == 1) {
      if (e % d->h.cluster_sectors) {
        rc = corrupt(d->path, "BAT entry %llu (sector %llu) is not cluster-aligned", i, e);
        break;
      }
      c = e / d->h.cluster_sectors;
    } else {
      c = e;
    }
    if (e == PLOOP_ZERO_INDEX || c < first) {
      rc = corrupt(d->path, "BAT entry %llu points into the header/BAT area (cluster %llu)", i, c);
      break;
    }
    if ((c + 1) * cb > file_size) {
      rc = corrupt(d->path, "BAT entry %llu points past the end of the file (cluster %llu)", i, c);
      break;
    }
    if (i * d->h.cluster_sectors >= d->h.size_sectors) {
      rc = corrupt(d->path, "BAT entry %llu maps a cluster past the virtual size (cluster %llu)", i, c);
      break;
    }
    if (seen[c / 64] & (1ull << (c % 64))) {
      rc = corrupt(d->path, "data cluster %llu is referenced twice (BAT entry %llu)", c, i);
      break;
    }
    seen[c / 64] |= 1ull << (c % 64);
    if (c + 1 > max_used)
      max_used = c + 1;
  }
  free(seen);
  /* A store that grows ahead of the delta (RBD) holds zeros past the data
   * after a kill: a writer cuts them off where the BAT says data ends. */
  uint64_t end = (first > max_used ? first : max_used) * cb;
  if (rc == 0 && d->rdwr && !store_is_file(d->so.ops) && file_size > end && store_truncate(&d->so, end) == 0)
    file_size = end;
  uint64_t head = file_size / cb; /* a partial tail is a failed extension: reuse it */
  if (head < first)
    head = first;
  if (head < max_used)
    head = max_used;
  d->alloc_head = head;
  return rc;
}

/* Everything of an open after the store's open: size, header, BAT, their
 * validation, the in-use mark. On failure the caller frees D. */
static int delta_load(struct ploop_delta *d, unsigned flags)
{
  const char *path = d->path;
  uint64_t file_size;
  if (store_size(&d->so, &file_size) < 0)
    return -1;
  if (file_size < PLOOP_HEADER_SIZE)
    return corrupt(path, "file truncated: %llu bytes, shorter than the 64-byte header", file_size, 0);
  uint8_t *first = ploop_aligned_alloc(PLOOP_ALIGN);
  if (!first)
    return -1;
  if (store_pread(&d->so, first, PLOOP_ALIGN, 0) < 0) {
    free(first);
    return -1;
  }
  ploop_header_decode(first, &d->h);
  if (validate_header(path, &d->h, file_size) < 0) {
    free(first);
    return -1;
  }
  d->cluster_bytes = (uint64_t)d->h.cluster_sectors * 512;
  d->bat_bytes = round_up((uint64_t)d->h.first_block * 512, PLOOP_BAT_PAGE);
  d->bat_raw = ploop_aligned_alloc(d->bat_bytes);
  if (!d->bat_raw) {
    free(first);
    return -1;
  }
  /* The area is a whole cluster (1 MiB) however few entries it holds. A
   * file reads it from the page cache; a store across the network reads
   * only the pages with the header and the entries (as check does): one
   * 4 KiB read instead of 1 MiB for a disk up to 1 GiB, on the path of a
   * shared disk's hand-over. The pages past the entries are never written
   * (only a page with a changed entry is) and read as zeros here. */
  size_t need = d->bat_bytes;
  if (!store_is_file(d->so.ops))
    need = (size_t)min_u64(need, round_up(PLOOP_HEADER_SIZE + 4ull * d->h.bat_entries, PLOOP_BAT_PAGE));
  size_t have = (size_t)min_u64(need, PLOOP_ALIGN);
  memcpy(d->bat_raw, first, have);
  free(first);
  memset(d->bat_raw + need, 0, d->bat_bytes - need);
  if (need > have && store_pread(&d->so, d->bat_raw + have, need - have, have) < 0)
    return -1;
  if (validate_bat(d, file_size) < 0)
    return -1;
  if (d->h.in_use == PLOOP_IN_USE && !(flags & (PLOOP_OPEN_ALLOW_DIRTY | DELTA_OPEN_FRESH)))
    return ploop_error(PLOOP_ERR_BUSY, EBUSY,
                       "%s: image is marked in use (open elsewhere, or not closed cleanly); run 'ploop check -F -d'",
                       path);
  d->n_pages = d->bat_bytes / PLOOP_BAT_PAGE;
  d->page_dirty = calloc(d->n_pages, 1);
  if (!d->page_dirty)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  if (d->rdwr && store_is_file(d->so.ops) && delta_extent_scan(d, file_size) < 0)
    return -1;
  /* A delta this process just created already carries the mark. */
  if (d->rdwr && !(flags & DELTA_OPEN_FRESH) && delta_set_in_use(d, true) < 0)
    return -1;
  return 0;
}

struct ploop_delta *delta_open(const char *dir, const char *path, unsigned flags)
{
  struct ploop_delta *d = delta_alloc(dir, path);
  if (!d)
    return NULL;
  d->rdwr = flags & PLOOP_OPEN_RDWR;
  if (store_open(&d->so, dir, d->path, d->rdwr) < 0 || delta_load(d, flags) < 0) {
    delta_free(d);
    return NULL;
  }
  return d;
}

struct ploop_delta *delta_preopen(const char *dir, const char *path)
{
  struct ploop_delta *d = delta_alloc(dir, path);
  if (!d)
    return NULL;
  d->rdwr = true;
  if (store_open_unlocked(&d->so, dir, d->path) < 0) {
    delta_free(d);
    return NULL;
  }
  return d;
}

int delta_open_preopened(struct ploop_delta *d, unsigned flags)
{
  /* Nothing read before the lock counts: the previous holder wrote until
   * it let go. Size, header and BAT are all read again under the lock. */
  if (store_take_lock(&d->so) < 0 || delta_load(d, flags) < 0) {
    delta_free(d);
    return -1;
  }
  return 0;
}

void delta_discard_preopened(struct ploop_delta *d)
{
  delta_free(d);
}

struct ploop_delta *delta_open_raw(const char *dir, const char *path, uint32_t cluster_sectors, bool rdwr)
{
  struct ploop_delta *d = delta_alloc(dir, path);
  if (!d)
    return NULL;
  d->raw = true;
  d->rdwr = rdwr;
  d->h.cluster_sectors = cluster_sectors;
  d->cluster_bytes = (uint64_t)cluster_sectors * 512;
  uint64_t size;
  if (store_open(&d->so, dir, d->path, rdwr) < 0 || store_size(&d->so, &size) < 0) {
    delta_free(d);
    return NULL;
  }
  d->raw_bytes = round_up(size, d->cluster_bytes);
  d->h.size_sectors = d->raw_bytes / 512;
  return d;
}

/* SYNCED: the caller's flush just made every completed write durable and
 * no write can start before this one (a close): no sync before it. */
static int write_header(struct ploop_delta *d, bool synced)
{
  /* Page 0 also holds BAT slots: take the flush lock so a half-flushed page
   * never goes out with entries whose data is not yet durable. A cluster 0
   * not yet written whole (an image from elsewhere) goes out whole. */
  pthread_mutex_lock(&d->flush_lock);
  bool whole = d->bat_unwritten && d->n_bat_clusters && d->bat_unwritten[0];
  size_t len = whole ? (size_t)min_u64(d->cluster_bytes, d->bat_bytes) : PLOOP_BAT_PAGE;
  uint8_t *copy = ploop_aligned_alloc(len);
  int rc = copy ? 0 : -1;
  if (rc == 0) {
    /* The copy is taken before the sync: every entry in it points at data
     * whose write completed, and is durable once the sync returns. */
    pthread_mutex_lock(&d->lock);
    ploop_header_encode(&d->h, d->bat_raw);
    memcpy(copy, d->bat_raw, len);
    pthread_mutex_unlock(&d->lock);
  }
  if (rc == 0 && !synced)
    rc = store_flush(&d->so);
  if (rc == 0)
    rc = store_pwrite(&d->so, copy, len, 0);
  if (rc == 0)
    rc = store_flush(&d->so);
  if (rc == 0 && whole)
    d->bat_unwritten[0] = 0;
  free(copy);
  pthread_mutex_unlock(&d->flush_lock);
  if (rc == 0)
    ploop_fault_point("header-written");
  return rc;
}

int delta_write_header(struct ploop_delta *d) { return write_header(d, false); }

static int set_in_use(struct ploop_delta *d, bool in_use, bool synced)
{
  if (d->raw)
    return 0;
  d->h.in_use = in_use ? PLOOP_IN_USE : PLOOP_CLEAN_V20;
  if (in_use)
    d->h.flags &= ~PLOOP_CIF_EMPTY;
  else if (delta_count_allocated(d) == 0)
    d->h.flags |= PLOOP_CIF_EMPTY; /* OpenVZ's check wants it on a delta with no clusters */
  /* The format extension (CBT) is dropped, as ploop does on mount. */
  d->h.ext_offset = 0;
  return write_header(d, synced);
}

int delta_set_in_use(struct ploop_delta *d, bool in_use) { return set_in_use(d, in_use, false); }

int delta_seal_begin(struct ploop_delta *d)
{
  if (d->raw)
    return 0;
  if (store_rbd_trim(&d->so) < 0) /* sealed at its real end (grown ahead while written) */
    return -1;
  d->h.in_use = PLOOP_CLEAN_V20;
  d->h.ext_offset = 0;
  /* As a clean close: OpenVZ's check wants the flag on a delta with no
   * clusters (an empty top merged into an empty parent). */
  if (delta_count_allocated(d) == 0)
    d->h.flags |= PLOOP_CIF_EMPTY;
  pthread_mutex_lock(&d->lock);
  /* Any dirty page, page 0 included, holds entries whose data may not be
   * durable yet: decide before the header marks page 0 dirty itself. */
  bool bat_dirty = d->any_dirty;
  ploop_header_encode(&d->h, d->bat_raw);
  d->page_dirty[0] = 1; /* the clean mark goes out with the BAT pages */
  d->any_dirty = true;
  if (d->bat_unwritten) {
    uint32_t taken[64];
    while (delta_bat_materialize(d, taken, 64) == 64)
      ;
  }
  pthread_mutex_unlock(&d->lock);
  /* BAT entries may point at data written since the last flush: that data
   * is made durable before any page is written (rule 1). When only the
   * header changes, every entry on disk is already backed by durable data. */
  if (bat_dirty && store_flush(&d->so) < 0)
    return -1;
  int rc = 0;
  pthread_mutex_lock(&d->lock);
  /* A run of adjacent dirty pages goes out as one write. */
  for (size_t i = 0, j; i < d->n_pages && rc == 0; i = j) {
    for (j = i; j < d->n_pages && d->page_dirty[j]; j++)
      ;
    if (j == i) {
      j++;
      continue;
    }
    rc = store_pwrite(&d->so, d->bat_raw + i * PLOOP_BAT_PAGE, (j - i) * PLOOP_BAT_PAGE,
                      (uint64_t)i * PLOOP_BAT_PAGE);
    if (rc == 0)
      memset(d->page_dirty + i, 0, j - i);
  }
  if (rc == 0)
    d->any_dirty = false;
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int delta_alloc_begin(struct ploop_delta *d, uint64_t vc, uint64_t *off)
{
  pthread_mutex_lock(&d->lock);
  for (;;) {
    uint64_t cur = delta_lookup(d, vc);
    if (cur) {
      pthread_mutex_unlock(&d->lock);
      *off = cur;
      return 1;
    }
    bool busy = false;
    for (unsigned i = 0; i < d->n_inflight; i++)
      if (d->inflight[i] == vc)
        busy = true;
    if (!busy && d->n_inflight < PLOOP_MAX_INFLIGHT_ALLOC)
      break;
    pthread_cond_wait(&d->cond, &d->lock);
  }
  uint64_t limit = d->h.version == 1 ? UINT32_MAX / d->h.cluster_sectors : UINT32_MAX - 1;
  if (d->alloc_head >= limit) {
    pthread_mutex_unlock(&d->lock);
    return ploop_error(PLOOP_ERR_IO, EFBIG, "%s: image file reached the format's size limit", d->path);
  }
  d->inflight[d->n_inflight++] = (uint32_t)vc;
  *off = d->alloc_head++ * d->cluster_bytes;
  pthread_mutex_unlock(&d->lock);
  return 0;
}

static void set_entry_locked(struct ploop_delta *d, uint64_t vc, uint64_t off)
{
  uint32_t e = 0;
  if (off)
    e = (uint32_t)(d->h.version == 1 ? off / 512 : off / d->cluster_bytes);
  __atomic_store_n(&delta_bat(d)[vc], htole32(e), __ATOMIC_RELEASE);
  size_t page = (PLOOP_HEADER_SIZE + 4 * vc) / PLOOP_BAT_PAGE;
  d->page_dirty[page] = 1;
  d->any_dirty = true;
}

void delta_alloc_finish(struct ploop_delta *d, uint64_t vc, uint64_t off)
{
  pthread_mutex_lock(&d->lock);
  if (off)
    set_entry_locked(d, vc, off);
  for (unsigned i = 0; i < d->n_inflight; i++)
    if (d->inflight[i] == vc) {
      d->inflight[i] = d->inflight[--d->n_inflight];
      break;
    }
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
}

void delta_alloc_abandon(struct ploop_delta *d, uint64_t vc, uint64_t off)
{
  pthread_mutex_lock(&d->lock);
  /* The last cluster handed out goes back to the append point, so a write
   * that failed (ENOSPC) leaves no hole; a partial extension is cut. */
  uint64_t c = off / d->cluster_bytes;
  if (off && c + 1 == d->alloc_head) {
    d->alloc_head = c;
    uint64_t size;
    if (d->so.ops->size(&d->so, &size, NULL) == 0 && size > off && d->so.ops->truncate(&d->so, off) < 0) {
      /* Keeps the old size: the next allocation reuses the cluster anyway. */
    }
  }
  pthread_mutex_unlock(&d->lock);
  delta_alloc_finish(d, vc, 0);
}

void delta_set_entry(struct ploop_delta *d, uint64_t vc, uint64_t off)
{
  pthread_mutex_lock(&d->lock);
  set_entry_locked(d, vc, off);
  pthread_mutex_unlock(&d->lock);
}

int delta_flush(struct ploop_delta *d)
{
  if (!d->rdwr)
    return 0;
  /* Group commit: a flush that starts after this call covers every write
   * that completed before it, so waiting for one is as good as doing one. */
  pthread_mutex_lock(&d->lock);
  uint64_t seen = d->flush_started;
  pthread_mutex_unlock(&d->lock);
  pthread_mutex_lock(&d->flush_lock);
  pthread_mutex_lock(&d->lock);
  if (d->flush_done > seen) {
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_unlock(&d->flush_lock);
    return 0;
  }
  uint64_t mine = ++d->flush_started;
  pthread_mutex_unlock(&d->lock);
  /* Take a copy of the dirty pages first: every entry in it points to data
   * whose write has completed, so the fdatasync below makes it durable
   * before the page is written (rule 1). */
  size_t n = 0, n_taken = 0;
  uint32_t *pages = NULL;
  uint8_t *copy = NULL;
  uint32_t *taken = d->bat_unwritten ? malloc((d->n_bat_clusters + 1) * sizeof *taken) : NULL;
  pthread_mutex_lock(&d->lock);
  if (d->any_dirty) {
    if (taken)
      n_taken = delta_bat_materialize(d, taken, d->n_bat_clusters);
    for (size_t i = 0; i < d->n_pages; i++)
      n += d->page_dirty[i];
    pages = malloc(n * sizeof *pages);
    copy = pages ? ploop_aligned_alloc(n * PLOOP_BAT_PAGE) : NULL;
    if (copy) {
      size_t k = 0;
      for (size_t i = 0; i < d->n_pages; i++)
        if (d->page_dirty[i]) {
          pages[k] = (uint32_t)i;
          memcpy(copy + k * PLOOP_BAT_PAGE, d->bat_raw + i * PLOOP_BAT_PAGE, PLOOP_BAT_PAGE);
          d->page_dirty[i] = 0;
          k++;
        }
      d->any_dirty = false;
    } else {
      delta_bat_unmaterialize(d, taken, n_taken);
    }
  }
  pthread_mutex_unlock(&d->lock);
  int rc = 0;
  if (d->any_dirty && !copy) /* allocation failed above; nothing was cleared */
    rc = ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  if (rc == 0)
    rc = store_flush(&d->so);
  if (rc == 0 && n)
    ploop_fault_point("flush-data-synced");
  for (size_t k = 0, m; rc == 0 && k < n && copy; k = m) {
    /* The header lives in page 0: the copy may hold a stale header only
     * if someone changed it without delta_write_header, which no one does.
     * Adjacent pages sit side by side in the copy: one write per run. */
    for (m = k + 1; m < n && pages[m] == pages[m - 1] + 1; m++)
      ;
    rc = store_pwrite(&d->so, copy + k * PLOOP_BAT_PAGE, (m - k) * PLOOP_BAT_PAGE,
                      (uint64_t)pages[k] * PLOOP_BAT_PAGE);
  }
  if (rc == 0 && n)
    rc = store_flush(&d->so);
  if (rc == 0 && n)
    ploop_fault_point("flush-bat-written");
  if (rc < 0 && copy) {
    /* Put the pages back so a later flush retries them. */
    pthread_mutex_lock(&d->lock);
    for (size_t k = 0; k < n; k++)
      d->page_dirty[pages[k]] = 1;
    d->any_dirty = true;
    delta_bat_unmaterialize(d, taken, n_taken);
    pthread_mutex_unlock(&d->lock);
  }
  free(taken);
  free(pages);
  free(copy);
  if (rc == 0) {
    pthread_mutex_lock(&d->lock);
    d->flush_done = mine;
    pthread_mutex_unlock(&d->lock);
  }
  pthread_mutex_unlock(&d->flush_lock);
  return rc;
}

int delta_close(struct ploop_delta *d, bool clean)
{
  if (!d)
    return 0;
  int rc = 0;
  if (d->rdwr && !d->raw) {
    /* Nothing writes to a delta being closed: the flush covers all. */
    rc = delta_flush(d);
    if (rc == 0 && clean)
      rc = set_in_use(d, false, true);
  } else if (d->rdwr) {
    rc = store_flush(&d->so);
  }
  delta_free(d);
  return rc;
}

uint64_t delta_count_allocated(const struct ploop_delta *d)
{
  if (d->raw)
    return delta_clusters(d);
  uint64_t n = 0;
  const uint32_t *bat = delta_bat(d);
  for (uint64_t i = 0; i < d->h.bat_entries; i++)
    n += bat[i] != 0;
  return n;
}

struct ploop_delta *ploop_delta_open(const char *path, unsigned flags)
{
  return delta_open(NULL, path, flags);
}

int ploop_delta_close(struct ploop_delta *d)
{
  return delta_close(d, true);
}

const char *ploop_delta_path(const struct ploop_delta *d)
{
  return d->path;
}

int ploop_delta_get_info(struct ploop_delta *d, struct ploop_delta_info *out)
{
  uint64_t size, stored;
  if (d->so.ops->size(&d->so, &size, &stored) < 0)
    return -1;
  memset(out, 0, sizeof *out);
  out->version = d->raw ? 0 : d->h.version;
  out->cluster_sectors = d->h.cluster_sectors;
  out->cluster_bytes = d->cluster_bytes;
  out->virtual_bytes = d->h.size_sectors * 512;
  out->bat_entries = d->h.bat_entries;
  out->first_block_sectors = d->h.first_block;
  out->allocated_clusters = delta_count_allocated(d);
  out->file_bytes = size;
  out->disk_bytes = stored;
  out->in_use = d->h.in_use == PLOOP_IN_USE;
  out->flags = d->h.flags;
  return 0;
}
