/* Online operations on an attached disk, through the daemon's control
 * socket: a snapshot consistent with the mounted filesystem (FIFREEZE),
 * resize with loop capacity refresh and filesystem grow, and compaction
 * (FITRIM, then the daemon moves tail clusters into the holes). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach-internal.h"
#include "control.h"
#include "fs-freeze.h"

/* The attachment WHAT names, which must be the live read-write top. */
static int find_writable(const char *what, const char *verb, struct ploop_attach_info *i)
{
  if (attach_state_find(what, i) < 0)
    return -1;
  if (!i->daemon_alive)
    return ploop_set_error(PLOOP_ERR_IO, ESRCH,
                       "%s: %s: the serving daemon is gone; run `ploop umount` and `ploop check -F -d`",
                       i->disk_dir, verb);
  if (i->readonly || i->snapshot_guid[0])
    return ploop_set_error(PLOOP_ERR_PARAM, EROFS, "%s: %s: attached read-only", i->disk_dir, verb);
  return 0;
}

static int ctl_failed(const struct ploop_attach_info *i, const char *verb)
{
  int e = errno ? errno : EIO;
  const char *msg = ploop_ctl_error();
  /* The daemon sends errno and text only: the class comes back from the
   * errno the library chose for it (as offline: same exit code). */
  int status = e == EBUSY || e == EAGAIN                 ? PLOOP_ERR_BUSY
               : e == EINVAL || e == ERANGE || e == EEXIST ? PLOOP_ERR_PARAM
               : e == ENOENT && strstr(msg, "no snapshot") ? PLOOP_ERR_NOSNAP
               : e == ENOENT                              ? PLOOP_ERR_NOTFOUND
               : e == EIO || e == ENOSPC || e == EDQUOT   ? PLOOP_ERR_IO
                                                          : PLOOP_ERR_GENERIC;
  /* The library's message names the disk already: name it once. */
  size_t dl = strlen(i->disk_dir);
  if (strncmp(msg, i->disk_dir, dl) == 0 && (msg[dl] == ':' || msg[dl] == ' '))
    return ploop_set_error(status, e, "%s", msg);
  return ploop_set_error(status, e, "%s: %s: %s", i->disk_dir, verb, msg);
}

int ploop_attach_snapshot(const char *what, const char *guid, char *guid_out)
{
  struct ploop_attach_info i;
  if (find_writable(what, "snapshot", &i) < 0)
    return -1;
  int mfd = -1;
  if (i.mount_point[0]) {
    mfd = ploop_fs_open_mount(i.mount_point);
    if (mfd < 0)
      return -1;
    /* Freezing flushes the filesystem and leaves its journal clean, so the
     * snapshot mounts read-only without a replay. */
    if (ploop_fs_freeze_fd(mfd, i.mount_point) < 0) {
      close(mfd);
      return -1;
    }
  }
  int rc = ploop_ctl_snapshot(i.disk_dir, guid, guid_out);
  if (rc < 0)
    ctl_failed(&i, "snapshot");
  if (mfd >= 0) {
    if (ploop_fs_thaw_fd(mfd, i.mount_point) < 0 && rc == 0)
      rc = -1;
    close(mfd);
  }
  return rc;
}

static int device_bytes(const char *dev, uint64_t *out)
{
  int fd = open(dev, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ioctl(fd, BLKGETSIZE64, out) < 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return ploop_set_error(PLOOP_ERR_IO, e, "%s: size: %s", dev, strerror(e));
  }
  close(fd);
  return 0;
}

/* The loop device reads its backing file's size only when told; make the
 * kernel fetch the FUSE file's new attributes first. */
static int loop_refresh(const struct ploop_attach_info *i)
{
  char file[PATH_MAX + 16];
  struct stat st;
  snprintf(file, sizeof(file), "%s/%s", i->fuse_dir, PLOOP_ATTACH_FUSE_FILE);
  if (stat(file, &st) < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", file, strerror(errno));
  uint64_t want = (uint64_t)st.st_size;
  int fd = open(i->device, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", i->device, strerror(errno));
  int rc = ioctl(fd, LOOP_SET_CAPACITY, 0);
  int e = errno;
  close(fd);
  if (rc < 0)
    return ploop_set_error(PLOOP_ERR_IO, e, "%s: set capacity: %s", i->device, strerror(e));
  uint64_t now;
  if (device_bytes(i->device, &now) < 0)
    return -1;
  if (now != want)
    return ploop_set_error(PLOOP_ERR_IO, EIO, "%s: %" PRIu64 " bytes after resize, expected %" PRIu64,
                       i->device, now, want);
  return 0;
}

static int discard_tail(const char *dev, uint64_t from, uint64_t to)
{
  int fd = open(dev, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", dev, strerror(errno));
  uint64_t range[2] = {from, to - from};
  int rc = ioctl(fd, BLKDISCARD, range);
  int e = errno;
  close(fd);
  if (rc < 0)
    return ploop_set_error(PLOOP_ERR_IO, e, "%s: discard past %" PRIu64 ": %s", dev, from,
                           strerror(e));
  return 0;
}

static int disk_resize(const struct ploop_attach_info *i, uint64_t new_bytes)
{
  if (ploop_ctl_resize(i->disk_dir, new_bytes) < 0)
    return ctl_failed(i, "resize");
  /* The disk rounds up to whole clusters: the FUSE file tells the size. */
  return loop_refresh(i);
}

int ploop_attach_resize(const char *what, uint64_t new_bytes)
{
  struct ploop_attach_info i;
  if (find_writable(what, "resize", &i) < 0)
    return -1;
  uint64_t cur;
  if (device_bytes(i.device, &cur) < 0)
    return -1;
  char fstype[32];
  if (i.fstype[0])
    snprintf(fstype, sizeof(fstype), "%s", i.fstype);
  else if (ploop_fs_probe(i.device, fstype, sizeof(fstype)) < 0)
    fstype[0] = 0; /* a bare device: just the disk */

  if (new_bytes < cur) {
    if (i.mount_point[0])
      return ploop_set_error(PLOOP_ERR_BUSY, EBUSY,
                             "%s: cannot shrink a mounted %s filesystem; umount it and resize offline",
                             i.disk_dir, fstype[0] ? fstype : "");
    /* The filesystem first, so nothing lives past the new end; then the
     * blocks it gave up are discarded, so no cluster stays allocated there
     * (the disk refuses to cut off allocated clusters). */
    if (fstype[0] && ploop_fs_resize_offline(i.device, fstype, new_bytes) < 0)
      return -1;
    if (discard_tail(i.device, new_bytes, cur) < 0)
      return -1;
    return disk_resize(&i, new_bytes);
  }
  if (new_bytes > cur && disk_resize(&i, new_bytes) < 0)
    return -1;
  /* Also when the disk already has the size: a filesystem left smaller by
   * an earlier refused online grow catches up. */
  if (!fstype[0])
    return 0;
  if (i.mount_point[0])
    return ploop_fs_grow_online(i.mount_point, i.device, fstype);
  return ploop_fs_resize_offline(i.device, fstype, new_bytes);
}

int ploop_attach_compact(const char *what, uint64_t *trimmed, uint64_t *reclaimed)
{
  struct ploop_attach_info i;
  if (find_writable(what, "compact", &i) < 0)
    return -1;
  if (trimmed)
    *trimmed = 0;
  if (reclaimed)
    *reclaimed = 0;
  if (i.mount_point[0]) {
    int fd = ploop_fs_open_mount(i.mount_point);
    if (fd < 0)
      return -1;
    /* Blocks freed by a delete are free for FITRIM only once the
     * filesystem has committed the delete: sync it first (OpenVZ does). */
    if (ploop_fs_sync_fd(fd, i.mount_point) < 0) {
      close(fd);
      return -1;
    }
    struct fstrim_range r = {.start = 0, .len = UINT64_MAX, .minlen = 0};
    int rc = ioctl(fd, FITRIM, &r);
    int e = errno;
    close(fd);
    if (rc < 0)
      return ploop_set_error(PLOOP_ERR_IO, e, "trim %s: %s", i.mount_point, strerror(e));
    if (trimmed)
      *trimmed = r.len;
  }
  uint64_t bytes = 0;
  if (ploop_ctl_compact(i.disk_dir, &bytes) < 0)
    return ctl_failed(&i, "compact");
  if (reclaimed)
    *reclaimed = bytes;
  return 0;
}
