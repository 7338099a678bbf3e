/* Consistency check and repair of a delta and of a whole disk. Reads the
 * header and BAT itself (not through delta_open) so that it can describe
 * every problem instead of stopping at the first. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int header_problem(struct ploop_check_report *r, const char *fmt, unsigned long long a)
{
  r->header_bad = true;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  snprintf(r->header_problem, sizeof r->header_problem, fmt, a); /* literal formats only */
#pragma GCC diagnostic pop
  return 1;
}

static int check_header(const struct ploop_header_host *h, uint64_t file_size, struct ploop_check_report *r)
{
  if (h->version == 0)
    return header_problem(r, "not a ploop image: bad signature%.0llu", 0);
  if (h->type != PLOOP_IMAGE_TYPE)
    return header_problem(r, "unsupported image type %llu", h->type);
  if (!is_pow2(h->cluster_sectors) || h->cluster_sectors < PLOOP_MIN_CLUSTER_SECTORS ||
      h->cluster_sectors > PLOOP_MAX_CLUSTER_SECTORS)
    return header_problem(r, "invalid cluster size %llu sectors", h->cluster_sectors);
  if (h->bat_entries == 0)
    return header_problem(r, "BAT has no entries%.0llu", 0);
  if (h->bat_entries > PLOOP_MAX_BAT_ENTRIES)
    return header_problem(r, "BAT of %llu entries is over the limit of 2^28", h->bat_entries);
  if (h->size_sectors == 0)
    return header_problem(r, "virtual size is zero%.0llu", 0);
  if (h->version == 2 && h->first_block % h->cluster_sectors)
    return header_problem(r, "first data block (sector %llu) is not cluster-aligned", h->first_block);
  if (h->in_use != PLOOP_IN_USE && h->in_use != PLOOP_CLEAN_V20 && h->in_use != PLOOP_CLEAN_V21)
    return header_problem(r, "unknown in-use mark 0x%llx", h->in_use);
  if (h->flags & ~(PLOOP_CIF_EMPTY | PLOOP_CIF_FMT_CONVERT))
    return header_problem(r, "unknown header flags 0x%llx", h->flags);
  if (h->size_sectors > (uint64_t)h->bat_entries * h->cluster_sectors)
    return header_problem(r, "virtual size %llu sectors exceeds what the BAT maps", h->size_sectors);
  uint64_t bat_end = PLOOP_HEADER_SIZE + 4ull * h->bat_entries;
  if ((uint64_t)h->first_block * 512 < bat_end)
    return header_problem(r, "first data block (sector %llu) overlaps the BAT", h->first_block);
  if ((uint64_t)h->first_block * 512 > round_up(bat_end, (uint64_t)h->cluster_sectors * 512) &&
      (uint64_t)h->first_block * 512 > file_size)
    return header_problem(r, "first data block (sector %llu) lies past the end of the BAT area and of the file", h->first_block);
  if (file_size < bat_end)
    return header_problem(r, "file truncated: the BAT needs %llu bytes", bat_end);
  return 0;
}

int ploop_delta_check(const char *path, unsigned flags, struct ploop_check_report *r)
{
  return delta_check(NULL, path, flags, r);
}

int delta_check(const char *dir, const char *path, unsigned flags, struct ploop_check_report *r)
{
  memset(r, 0, sizeof *r);
  bool repair = (flags & PLOOP_CHECK_REPAIR) && !(flags & PLOOP_CHECK_READONLY);
  bool drop = ((repair && !(flags & PLOOP_CHECK_KEEP_INUSE)) || (flags & PLOOP_CHECK_DROP_INUSE)) &&
              !(flags & PLOOP_CHECK_READONLY);
  /* An interrupted version conversion is undone from its backup first. */
  bool is_file = store_is_file(store_for(dir ? dir : path));
  if (repair && is_file) {
    int restored = convert_restore_backup(dir, path);
    if (restored < 0)
      return -1;
    if (restored)
      r->repaired = true;
  }
  struct store_obj so;
  if (store_open(&so, dir, path, repair || drop) < 0)
    return -1;
  int rc = -1;
  uint8_t *bat = NULL;
  uint64_t *seen = NULL;
  uint64_t file_size;
  if (store_size(&so, &file_size) < 0)
    goto out;
  struct ploop_header_host h;
  if (file_size < PLOOP_HEADER_SIZE) {
    rc = header_problem(r, "file truncated: %llu bytes, shorter than the 64-byte header", file_size);
    goto out;
  }
  bat = ploop_aligned_alloc(PLOOP_ALIGN);
  if (!bat || store_pread(&so, bat, PLOOP_ALIGN, 0) < 0)
    goto out;
  ploop_header_decode(bat, &h);
  if (check_header(&h, file_size, r)) {
    rc = 1;
    goto out;
  }
  free(bat);
  uint64_t cb = (uint64_t)h.cluster_sectors * 512;
  size_t bat_bytes = round_up(round_up(PLOOP_HEADER_SIZE + 4ull * h.bat_entries, 512), PLOOP_ALIGN);
  bat = ploop_aligned_alloc(bat_bytes);
  if (!bat || store_pread(&so, bat, bat_bytes, 0) < 0)
    goto out;
  uint32_t *e = (uint32_t *)bat + PLOOP_BAT_FIRST_SLOT;
  uint64_t file_clusters = div_round_up(file_size, cb);
  uint64_t first = div_round_up((uint64_t)h.first_block * 512, cb);
  seen = calloc(div_round_up(file_clusters + 1, 64), 8);
  if (!seen) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    goto out;
  }
  bool bat_changed = false;
  for (uint64_t i = 0; i < h.bat_entries; i++) {
    uint32_t v = le32toh(e[i]);
    if (!v)
      continue;
    uint64_t c = h.version == 1 ? v / h.cluster_sectors : v;
    bool bad = true;
    if (h.version == 1 && v % h.cluster_sectors)
      r->clusters_misaligned++;
    else if (v == PLOOP_ZERO_INDEX || c < first)
      r->clusters_in_bat_area++;
    else if ((c + 1) * cb > file_size)
      r->clusters_beyond_eof++;
    else if (i * h.cluster_sectors >= h.size_sectors)
      r->clusters_beyond_size++;
    else if (seen[c / 64] & (1ull << (c % 64)))
      r->clusters_duplicate++;
    else
      bad = false;
    if (bad && repair) {
      e[i] = 0; /* the slot is unusable: the cluster reads as not in this delta */
      bat_changed = true;
    }
    if (!bad)
      seen[c / 64] |= 1ull << (c % 64);
  }
  /* A format extension (CBT) occupies a cluster that no BAT entry names. */
  if (h.ext_offset && h.ext_offset * 512 / cb < file_clusters) {
    uint64_t c = h.ext_offset * 512 / cb;
    seen[c / 64] |= 1ull << (c % 64);
  }
  /* An unreferenced cluster whose blocks were punched out (a discard) costs
   * no space: only one still holding data is lost space. (A store
   * without an fd cannot say cheaply: not counted there.) */
  for (uint64_t c = first; so.fd >= 0 && c < file_size / cb; c++) {
    if (seen[c / 64] & (1ull << (c % 64)))
      continue;
    off_t data = lseek(so.fd, (off_t)(c * cb), SEEK_DATA);
    if (data >= 0 && (uint64_t)data < (c + 1) * cb)
      r->clusters_lost++;
    else if (data < 0 && errno != ENXIO)
      r->clusters_lost++; /* cannot tell: count it */
  }
  r->file_size_unaligned = file_size % cb != 0;
  r->in_use = h.in_use == PLOOP_IN_USE;
  bool convert = h.flags & PLOOP_CIF_FMT_CONVERT;
  bool content = r->clusters_misaligned || r->clusters_in_bat_area || r->clusters_beyond_eof ||
                 r->clusters_beyond_size || r->clusters_duplicate || r->file_size_unaligned || convert;
  if (!content && !r->in_use) {
    rc = 0;
    goto out;
  }
  if (convert && !r->header_bad)
    snprintf(r->header_problem, sizeof r->header_problem, "a format conversion was interrupted");
  if (convert && repair) {
    /* A backup would have been restored above: without one the BAT may
     * be half in each unit, and clearing the mark would hide that. */
    r->header_bad = true;
    snprintf(r->header_problem, sizeof r->header_problem,
             "a format conversion was interrupted and its BAT backup (.convert-backup) is missing");
    rc = 1;
    goto out;
  }
  /* As OpenVZ: the mark alone may be dropped; never over damage left in place. */
  if (content && !repair) {
    rc = 1;
    goto out;
  }
  if (!content && !drop) {
    rc = 1;
    goto out;
  }
  /* Repair: the BAT first (data already on disk), then the size, then
   * the header last, so the image opens only once everything is fixed. */
  if (bat_changed) {
    if (store_pwrite(&so, bat, bat_bytes, 0) < 0 || store_flush(&so) < 0)
      goto out;
  }
  if (r->file_size_unaligned && store_truncate(&so, round_up(file_size, cb)) < 0)
    goto out;
  if (drop && r->in_use) {
    h.in_use = PLOOP_CLEAN_V20;
    h.ext_offset = 0;
    r->in_use_dropped = true;
  }
  if (repair)
    h.flags &= ~PLOOP_CIF_FMT_CONVERT;
  ploop_header_encode(&h, bat);
  if (store_pwrite(&so, bat, PLOOP_ALIGN, 0) < 0 || store_flush(&so) < 0)
    goto out;
  r->repaired = content || r->in_use_dropped;
  rc = r->in_use && !r->in_use_dropped ? 1 : 0;
out:
  free(seen);
  free(bat);
  store_close(&so);
  return rc;
}

static void add_line(char *buf, size_t len, size_t *pos, const char *fmt, unsigned long long v)
{
  if (*pos >= len)
    return;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  int n = snprintf(buf + *pos, len - *pos, fmt, v); /* literal formats only */
#pragma GCC diagnostic pop
  if (n > 0)
    *pos += (size_t)n;
}

void ploop_check_report_format(const struct ploop_check_report *r, char *buf, size_t len)
{
  size_t pos = 0;
  if (len)
    buf[0] = 0;
  if (r->header_bad) {
    snprintf(buf, len, "header: %s\n", r->header_problem);
    return;
  }
  const char *fix = r->repaired ? " (repaired: slots cleared)" : "";
  char fmt[160];
#define LINE(field, text)                                                                                    \
  if (r->field) {                                                                                            \
    snprintf(fmt, sizeof fmt, "%%llu %s%s\n", text, fix);                                                    \
    add_line(buf, len, &pos, fmt, (unsigned long long)r->field);                                             \
  }
  LINE(clusters_beyond_eof, "BAT entries point past the end of the file");
  LINE(clusters_beyond_size, "BAT entries map clusters past the virtual size");
  LINE(clusters_misaligned, "BAT entries are not cluster-aligned");
  LINE(clusters_duplicate, "data clusters are referenced twice");
  LINE(clusters_in_bat_area, "BAT entries point into the header/BAT area");
#undef LINE
  if (r->file_size_unaligned)
    add_line(buf, len, &pos,
             r->repaired ? "file size was not a whole number of clusters (extended)%.0llu\n"
                         : "file size is not a whole number of clusters%.0llu\n",
             0);
  if (r->in_use)
    add_line(buf, len, &pos,
             r->in_use_dropped ? "in-use mark was set (cleared)%.0llu\n"
                               : "image is marked in use (not closed cleanly)%.0llu\n",
             0);
  if (r->clusters_lost)
    add_line(buf, len, &pos, "%llu unreferenced clusters (lost space after a crash, not corruption)\n",
             r->clusters_lost);
}

/* The top image's header is what resize writes first (the descriptor
 * follows): after a crash between the two, the header says what the disk
 * is. Returns 0 when repaired, 1 when repair was not asked, -1 on error. */
static int size_fix(struct ploop_descriptor *d, uint64_t sectors, unsigned flags)
{
  if (!(flags & PLOOP_CHECK_REPAIR) || (flags & PLOOP_CHECK_READONLY))
    return 1;
  uint64_t keep = d->size_sectors;
  d->size_sectors = sectors;
  int rc = ploop_descriptor_save(d);
  d->size_sectors = keep;
  return rc < 0 ? -1 : 0;
}

int ploop_disk_check(const char *dir_or_xml, unsigned flags, char *msg, size_t msglen)
{
  size_t pos = 0;
  if (msglen)
    msg[0] = 0;
  struct ploop_descriptor *d = ploop_descriptor_load(dir_or_xml);
  if (!d)
    return -1;
  int lock = -1;
  if ((flags & (PLOOP_CHECK_REPAIR | PLOOP_CHECK_DROP_INUSE)) && !(flags & PLOOP_CHECK_READONLY) &&
      (lock = ploop_lock_disk(d->dir, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS)) < 0) {
    ploop_descriptor_free(d);
    return -1;
  }
  int result = 0;
  for (size_t i = 0; i < d->n_images; i++) {
    char *path = ploop_descriptor_image_path(d, &d->images[i]);
    if (!path) {
      result = -1;
      break;
    }
    /* The path resolved inside the directory (ploop_descriptor_image_path). */
    struct stat st;
    if (store_is_file(store_for(d->dir)) && stat(path, &st) < 0) {
      pos += (size_t)snprintf(msg + pos, pos < msglen ? msglen - pos : 0, "%s: missing image file\n", path);
      result = 1;
    } else if (!d->images[i].plain) {
      struct ploop_check_report r;
      int rc = delta_check(d->dir, path, flags, &r);
      if (rc < 0) {
        free(path);
        result = -1;
        break;
      }
      char lines[2048];
      ploop_check_report_format(&r, lines, sizeof lines);
      for (char *l = strtok(lines, "\n"); l && pos < msglen; l = strtok(NULL, "\n"))
        pos += (size_t)snprintf(msg + pos, msglen - pos, "%s: %s\n", path, l);
      bool content = r.clusters_misaligned || r.clusters_in_bat_area || r.clusters_beyond_eof ||
                     r.clusters_beyond_size || r.clusters_duplicate || r.file_size_unaligned ||
                     r.header_problem[0];
      bool only_mark = rc == 1 && !r.header_bad && r.in_use && !r.in_use_dropped && (r.repaired || !content);
      if (rc == 1 && !only_mark)
        result = 1;
      else if (rc == 1 && result == 0)
        result = 2;
      bool top = strcmp(d->images[i].guid, d->top_guid) == 0;
      if ((rc == 0 || top) && !r.header_bad) {
        struct ploop_delta *dl = delta_open(d->dir, path, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
        if (rc == 0 && dl && dl->h.cluster_sectors != d->cluster_sectors) {
          pos += (size_t)snprintf(msg + pos, pos < msglen ? msglen - pos : 0,
                                  "%s: cluster size %u sectors differs from the disk's %u\n", path,
                                  dl->h.cluster_sectors, d->cluster_sectors);
          result = 1;
        }
        if (top && dl && dl->h.size_sectors != d->size_sectors) {
          int fixed = size_fix(d, dl->h.size_sectors, flags);
          pos += (size_t)snprintf(msg + pos, pos < msglen ? msglen - pos : 0,
                                  "%s: Disk_size %llu sectors disagrees with the top image (%llu sectors)%s\n",
                                  d->dir, (unsigned long long)d->size_sectors,
                                  (unsigned long long)dl->h.size_sectors, fixed == 0 ? ": repaired" : "");
          if (fixed == 0)
            d->size_sectors = dl->h.size_sectors;
          else
            result = fixed < 0 ? -1 : 1;
        }
        delta_close(dl, false);
        if (result < 0)
          break;
      }
    }
    free(path);
  }
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return result;
}
