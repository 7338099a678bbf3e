/* Format conversions: v1 <-> v2 in place (BAT entries in sectors vs in
 * clusters), and ploop1 <-> raw for a single-image disk. The in-place
 * conversion keeps a backup of the BAT and sets CIF_FmtVersionConvert
 * while the BAT is rewritten; `ploop check -F` restores from the backup. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static void backup_path(const char *path, char *out, size_t len)
{
  snprintf(out, len, "%s.convert-backup", path);
}

/* Is PATH's conversion mark set? 1 yes, 0 no, -1 error. */
static int convert_marked(const char *dir, const char *path)
{
  int fd = ploop_open_file(dir, path, O_RDONLY | O_DIRECT, 0);
  if (fd < 0)
    return -1;
  uint8_t *page = ploop_aligned_alloc(PLOOP_ALIGN);
  int rc = page && ploop_pread_full(fd, page, PLOOP_ALIGN, 0, path) == 0 ? 0 : -1;
  if (rc == 0) {
    struct ploop_header_host h;
    ploop_header_decode(page, &h);
    rc = h.version && (h.flags & PLOOP_CIF_FMT_CONVERT) ? 1 : 0;
  }
  free(page);
  close(fd);
  return rc;
}

int convert_restore_backup(const char *dir, const char *path)
{
  char bp[4096];
  backup_path(path, bp, sizeof bp);
  int bfd = ploop_open_file(dir, bp, O_RDONLY, 0);
  if (bfd < 0)
    return ploop_get_errno() == ENOENT ? 0 : -1;
  /* The backup is durable before the image is marked, and the mark is
   * cleared before the backup goes. So without the mark the image is
   * whole (never touched, or converted to the end) and the backup is
   * stale, possibly cut short by a crash before its fsync: remove it,
   * never copy it back. */
  int marked = convert_marked(dir, path);
  if (marked <= 0) {
    close(bfd);
    if (marked < 0)
      return -1;
    if (ploop_unlink_file(dir, bp) < 0 && errno != ENOENT)
      return ploop_error_os(bp, "remove stale conversion backup");
    return ploop_fsync_parent(path) < 0 ? -1 : 1;
  }
  off_t len = lseek(bfd, 0, SEEK_END);
  int rc = -1, fd = -1;
  uint8_t *buf = len > 0 ? ploop_aligned_alloc((size_t)len) : NULL;
  if (len <= 0 || len % PLOOP_ALIGN) {
    ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: unusable conversion backup (%lld bytes)", bp, (long long)len);
    goto out;
  }
  if (!buf || ploop_pread_full(bfd, buf, (size_t)len, 0, bp) < 0)
    goto out;
  struct ploop_header_host h;
  ploop_header_decode(buf, &h);
  h.in_use = PLOOP_CLEAN_V20;
  h.flags &= ~PLOOP_CIF_FMT_CONVERT;
  ploop_header_encode(&h, buf);
  fd = ploop_open_file(dir, path, O_WRONLY | O_DIRECT, 0);
  if (fd < 0)
    goto out;
  if (ploop_pwrite_full(fd, buf, (size_t)len, 0, path) < 0)
    goto out;
  if (fdatasync(fd) < 0) {
    ploop_error_os(path, "fdatasync");
    goto out;
  }
  if ((ploop_unlink_file(dir, bp) < 0 && ploop_error_os(bp, "remove") < 0) || ploop_fsync_parent(path) < 0)
    goto out;
  rc = 1;
out:
  free(buf);
  if (fd >= 0)
    close(fd);
  close(bfd);
  return rc;
}

/* Can PATH convert to VERSION? 1 yes, 0 nothing to do, -1 refused. Read-only:
 * a refused conversion must leave the file exactly as it was. */
static int convert_feasible(const char *dir, const char *path, int version)
{
  struct ploop_delta *d = delta_open(dir, path, PLOOP_OPEN_RDONLY);
  if (!d)
    return -1;
  int rc = 1;
  uint32_t cs = d->h.cluster_sectors;
  if (d->h.version == version) {
    rc = 0;
  } else if (version == 1 && d->h.size_sectors > UINT32_MAX) {
    rc = ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: format v1 is limited to 2 TiB", path);
  } else if (version == 1) {
    for (uint64_t i = 0; i < d->h.bat_entries && rc == 1; i++)
      if ((uint64_t)le32toh(delta_bat(d)[i]) * cs > UINT32_MAX)
        rc = ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: the image file is too large for format v1", path);
  }
  delta_close(d, false);
  return rc;
}

static int convert_delta_version(const char *dir, const char *path, int version)
{
  int feasible = convert_feasible(dir, path, version);
  if (feasible <= 0)
    return feasible;
  struct ploop_delta *d = delta_open(dir, path, PLOOP_OPEN_RDWR);
  if (!d)
    return -1;
  int rc = -1;
  char bp[4096];
  backup_path(path, bp, sizeof bp);
  uint32_t cs = d->h.cluster_sectors;
  uint32_t *bat = delta_bat(d);
  /* 1: backup of header + BAT, durable. */
  int bfd = ploop_open_file(dir, bp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (bfd < 0)
    goto out;
  if (ploop_pwrite_full(bfd, d->bat_raw, d->bat_bytes, 0, bp) < 0 ||
      (fsync(bfd) < 0 && ploop_error_os(bp, "fsync") < 0)) {
    close(bfd);
    goto out;
  }
  close(bfd);
  if (ploop_fsync_parent(path) < 0)
    goto out;
  ploop_fault_point("convert-backup-durable");
  /* 2: mark the conversion, 3: rewrite the BAT, 4: clear the mark. */
  d->h.flags |= PLOOP_CIF_FMT_CONVERT;
  if (delta_write_header(d) < 0)
    goto out;
  for (uint64_t i = 0; i < d->h.bat_entries; i++) {
    uint32_t e = le32toh(bat[i]);
    if (e)
      bat[i] = htole32(version == 1 ? e * cs : e / cs);
  }
  d->h.version = version;
  ploop_header_encode(&d->h, d->bat_raw);
  if (ploop_pwrite_full(d->fd, d->bat_raw, d->bat_bytes, 0, path) < 0 ||
      (fdatasync(d->fd) < 0 && ploop_error_os(path, "fdatasync") < 0))
    goto out;
  ploop_fault_point("convert-bat-rewritten");
  d->h.flags &= ~PLOOP_CIF_FMT_CONVERT;
  if (delta_write_header(d) < 0)
    goto out;
  if ((ploop_unlink_file(dir, bp) < 0 && ploop_error_os(bp, "remove") < 0) || ploop_fsync_parent(path) < 0)
    goto out;
  ploop_fault_point("convert-backup-removed");
  rc = 0;
out:
  if (delta_close(d, rc == 0) < 0)
    rc = -1;
  return rc;
}

int ploop_convert_version(const char *dir_or_xml, int version)
{
  if (version != 1 && version != 2)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "format version must be 1 or 2, not %d", version);
  int lock;
  struct ploop_descriptor *d =
      descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS);
  if (!d)
    return -1;
  int rc = 0;
  for (int pass = 0; pass < 2 && rc == 0; pass++) /* all deltas checked before any changes */
    for (size_t i = 0; i < d->n_images && rc == 0; i++) {
      if (d->images[i].plain)
        continue;
      char *path = ploop_descriptor_image_path(d, &d->images[i]);
      rc = !path       ? -1
           : pass == 0 ? (convert_feasible(d->dir, path, version) < 0 ? -1 : 0)
                       : convert_delta_version(d->dir, path, version);
      free(path);
    }
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}

/* A new file name beside OLD with extension EXT that does not exist yet. */
static void sibling_name(const char *old, const char *ext, char *out, size_t len)
{
  const char *dot = strrchr(old, '.');
  int stem = dot && dot != old ? (int)(dot - old) : (int)strlen(old);
  snprintf(out, len, "%.*s.%s", stem, old, ext);
}

int ploop_convert_format(const char *dir_or_xml, bool to_raw)
{
  int lock;
  struct ploop_descriptor *d =
      descriptor_load_locked(dir_or_xml, &lock, PLOOP_LOCK_WRITER | PLOOP_LOCK_DELTAS);
  if (!d)
    return -1;
  int rc = -1;
  char newfile[1024], newpath[4096];
  char *oldpath = NULL;
  struct ploop_delta *src = NULL, *dst = NULL;
  if (d->n_images != 1) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: the disk has %zu images; merge its snapshots first", d->dir,
                d->n_images);
    goto out;
  }
  struct ploop_image_desc *im = &d->images[0];
  if (im->plain == to_raw) {
    rc = 0; /* already in that format */
    goto out;
  }
  oldpath = ploop_descriptor_image_path(d, im);
  if (!oldpath)
    goto out;
  sibling_name(im->file, to_raw ? "raw" : "hds", newfile, sizeof newfile);
  snprintf(newpath, sizeof newpath, "%s/%s", d->dir, newfile);
  if (faccessat(AT_FDCWD, newpath, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
    ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: already exists", newpath);
    goto out;
  }
  if (to_raw) {
    /* We hold the disk lock: the export must not take it again. */
    unsigned f = PLOOP_OPEN_RDONLY | PLOOP_OPEN_NO_LOCK | EXPORT_NEW_IN_DIR;
    if (export_raw(d->dir, NULL, newpath, f, NULL, NULL, NULL) < 0) {
      /* A failed (or interrupted) copy leaves no half raw file behind. */
      if (faccessat(AT_FDCWD, newpath, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        ploop_unlink_file(d->dir, newpath);
      goto out;
    }
  } else {
    src = delta_open_raw(d->dir, oldpath, d->cluster_sectors, false);
    struct ploop_delta_create_params p = {.size_bytes = d->size_sectors * 512,
                                          .cluster_sectors = d->cluster_sectors};
    if (!src || delta_create_file(d->dir, newpath, &p, false) < 0)
      goto out;
    dst = delta_open(d->dir, newpath, PLOOP_OPEN_RDWR);
    if (!dst || merge_delta_into(src, dst, true, NULL, NULL, 0, 0) < 0 || delta_close(dst, true) < 0) {
      dst = NULL;
      ploop_unlink_file(d->dir, newpath);
      goto out;
    }
    dst = NULL;
  }
  free(im->file);
  im->file = ploop_strdup(newfile);
  im->plain = to_raw;
  if (!im->file || ploop_descriptor_save(d) < 0) {
    ploop_unlink_file(d->dir, newpath);
    goto out;
  }
  if (ploop_unlink_file(d->dir, oldpath) < 0)
    ploop_error_os(oldpath, "remove");
  rc = 0;
out:
  delta_close(src, false);
  delta_close(dst, false);
  free(oldpath);
  ploop_unlock_disk(lock);
  ploop_descriptor_free(d);
  return rc;
}
