/* Disk backends of ploop-container (see disk.h). The product backend is a
 * ploop disk (DiskDescriptor.xml + root.hds) attached through
 * kmod-free-nbd/client/attach.h; the alternative ("raw") is an ext4 image on a
 * direct-I/O loop device, kept for hosts without FUSE and as a baseline. A
 * disk directory says which one it is by the files in it. */
#include "disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <mntent.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "error.h"
#include "fs-freeze.h"
#include "libploop.h"
#include "util.h"

#define IMAGE "image.raw"

static bool is_ploop(const char *dir)
{
  if (strncmp(dir, "rbd:", 4) == 0) /* a disk in Ceph (disk-rbd.c), by its name */
    return true;
  cleanup_free char *xml = xasprintf("%s/" PLOOP_DESCRIPTOR_NAME, dir);
  return access(xml, F_OK) == 0;
}

const char *disk_backend(const char *dir)
{
  return disk_rbd_name(dir, NULL, 0) ? "rbd" : is_ploop(dir) ? "ploop" : "raw";
}

static int ploop_failed(const char *what)
{
  return ct_fail(0, "%s: %s", what, ploop_get_error());
}

/* Runs ARGV, returns 0 on exit 0; else the first line of its stderr. */
static int run_tool(char *const argv[])
{
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  pid_t pid = fork();
  if (pid < 0)
    return ct_fail(errno, "fork");
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(pipefd[1], 2);
    execvp(argv[0], argv);
    dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  char err[512];
  size_t got = 0;
  ssize_t n;
  while ((n = read(pipefd[0], err + got, sizeof err - 1 - got)) > 0)
    got += (size_t)n;
  close(pipefd[0]);
  err[got] = 0;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return 0;
  char *nl = strchr(err, '\n');
  if (nl)
    *nl = 0;
  return ct_fail(0, "%s failed: %s", argv[0], err[0] ? err : "no message");
}

static int raw_create(const char *dir, uint64_t bytes)
{
  cleanup_free char *img = xasprintf("%s/" IMAGE, dir);
  int fd = open(img, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return ct_fail(errno, "create %s", img);
  if (ftruncate(fd, (off_t)bytes) < 0) {
    int saved = errno;
    close(fd);
    unlink(img);
    return ct_fail(saved, "size %s", img);
  }
  close(fd);
  char *argv[] = {"mkfs.ext4", "-q", "-F", "-E", "nodiscard", "-L", "ct-root", img, NULL};
  if (run_tool(argv) < 0) {
    unlink(img);
    return -1;
  }
  return 0;
}

/* Attaches IMG to a free loop device with autoclear, so the device goes away
 * as soon as the filesystem on it is unmounted (or the mount fails). */
static int loop_attach(const char *img, bool readonly, char *dev, size_t devlen)
{
  cleanup_close int backing = open(img, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (backing < 0)
    return ct_fail(errno, "open %s", img);
  cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0)
    return ct_fail(errno, "open /dev/loop-control");
  for (int attempt = 0; attempt < 16; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0)
      return ct_fail(errno, "get a free loop device");
    snprintf(dev, devlen, "/dev/loop%d", n);
    int lfd = open(dev, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
      return ct_fail(errno, "open %s", dev);
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (uint32_t)backing;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO | (readonly ? LO_FLAGS_READ_ONLY : 0);
    int rc = ioctl(lfd, LOOP_CONFIGURE, &cfg);
    if (rc < 0 && errno == EINVAL) {  /* backing fs without O_DIRECT */
      cfg.info.lo_flags &= ~(uint32_t)LO_FLAGS_DIRECT_IO;
      rc = ioctl(lfd, LOOP_CONFIGURE, &cfg);
    }
    if (rc == 0)
      return lfd;
    int saved = errno;
    close(lfd);
    if (saved != EBUSY)  /* EBUSY: someone took it between GET_FREE and us */
      return ct_fail(saved, "configure %s", dev);
  }
  return ct_fail(EBUSY, "no free loop device");
}

static int mount_image(const char *img, const char *mnt, bool readonly)
{
  char dev[32];
  int lfd = loop_attach(img, readonly, dev, sizeof dev);
  if (lfd < 0)
    return -1;
  /* noload: a snapshot taken of a frozen fs is clean, never replay into it. */
  int rc = mount(dev, mnt, "ext4", MS_NODEV | (readonly ? MS_RDONLY : 0), readonly ? "noload" : NULL);
  int saved = errno;
  close(lfd);  /* the mount holds the device now; autoclear does the rest */
  if (rc < 0)
    return ct_fail(saved, "mount %s (%s) on %s", img, dev, mnt);
  return 0;
}

static int raw_mount(const char *dir, const char *mnt)
{
  cleanup_free char *img = xasprintf("%s/" IMAGE, dir);
  return mount_image(img, mnt, false);
}

static int raw_mount_snapshot(const char *dir, const char *id, const char *mnt)
{
  for (const char *p = id; *p; p++)
    if (*p == '/' || *p == '.')
      return ct_usage("bad snapshot id '%s'", id);
  cleanup_free char *img = xasprintf("%s/snap-%s.raw", dir, id);
  if (access(img, F_OK) < 0)
    return ct_fail(0, "no snapshot '%s'", id);
  return mount_image(img, mnt, true);
}

bool disk_is_mounted(const char *mnt)
{
  FILE *f = setmntent("/proc/self/mounts", "r");
  if (!f)
    return false;
  bool found = false;
  struct mntent *m;
  while (!found && (m = getmntent(f)))
    found = strcmp(m->mnt_dir, mnt) == 0;
  endmntent(f);
  return found;
}

static int raw_umount(const char *mnt)
{
  for (int i = 0; i < 100; i++) {
    if (umount2(mnt, UMOUNT_NOFOLLOW) == 0)
      return 0;
    if (errno == EINVAL && !disk_is_mounted(mnt))
      return 0;
    if (errno != EBUSY)
      return ct_fail(errno, "unmount %s", mnt);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return ct_fail(EBUSY, "unmount %s", mnt);
}

/* Copies only the data extents: the image is sparse and must stay so. */
static int copy_sparse(const char *src, const char *dst)
{
  cleanup_close int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return ct_fail(errno, "open %s", src);
  cleanup_close int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0)
    return ct_fail(errno, "create %s", dst);
  struct stat st;
  if (fstat(in, &st) < 0 || ftruncate(out, st.st_size) < 0)
    goto fail;
  off_t pos = 0;
  for (;;) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO)
      break;
    if (data < 0)
      goto fail;
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0)
      goto fail;
    off_t off_in = data, off_out = data;
    while (off_in < hole) {
      ssize_t n = copy_file_range(in, &off_in, out, &off_out, (size_t)(hole - off_in), 0);
      if (n <= 0)
        goto fail;
    }
    pos = hole;
  }
  if (fsync(out) < 0)
    goto fail;
  return 0;
fail:
  ct_fail(errno, "copy %s to %s", src, dst);
  unlink(dst);
  return -1;
}

static int raw_snapshot(const char *dir, const char *mnt, char *id, size_t idlen)
{
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  snprintf(id, idlen, "%04d%02d%02d-%02d%02d%02d-%03ld", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
  cleanup_free char *img = xasprintf("%s/" IMAGE, dir);
  cleanup_free char *snap = xasprintf("%s/snap-%s.raw", dir, id);
  if (!mnt)
    return copy_sparse(img, snap);
  cleanup_close int mfd = ploop_fs_open_mount(mnt);
  if (mfd < 0 || ploop_fs_freeze_fd(mfd, mnt) < 0)
    return ct_fail(0, "%s", ploop_get_error());
  int rc = copy_sparse(img, snap);
  if (ploop_fs_thaw_fd(mfd, mnt) < 0 && rc == 0)
    rc = ct_fail(0, "%s", ploop_get_error());
  return rc;
}

/* ---- ploop backend: the disk attached through ploop-nbd ---- */

static int ploop_create(const char *dir, uint64_t bytes)
{
  cleanup_free char *delta = xasprintf("%s/" PLOOP_DEFAULT_IMAGE_NAME, dir);
  struct ploop_delta_create_params p = {.size_bytes = bytes};
  if (ploop_disk_create(delta, &p) < 0)
    return ploop_failed("create ploop disk");
  if (ploop_attach_format(dir, "ext4") < 0)
    return ploop_failed("make ext4 on the ploop disk");
  return 0;
}

static int ploop_mount(const char *dir, const char *snapshot, const char *mnt)
{
  struct ploop_attach_opts o = {.readonly = snapshot != NULL, .snapshot_guid = snapshot,
                                .mount_point = mnt, .fstype = "ext4",
                                .mount_flags = MS_NODEV};
  struct ploop_attach_info info;
  if (ploop_attach_mount(dir, &o, &info) < 0)
    return ploop_failed(snapshot ? "mount snapshot" : "attach ploop disk");
  return 0;
}

/* ---- the interface: pick the backend ---- */

int disk_create(const char *dir, uint64_t bytes, bool raw)
{
  return raw ? raw_create(dir, bytes) : ploop_create(dir, bytes);
}

int disk_mount(const char *dir, const char *mnt)
{
  if (disk_rbd_name(dir, NULL, 0))
    return disk_rbd_mount(dir, NULL, mnt);
  return is_ploop(dir) ? ploop_mount(dir, NULL, mnt) : raw_mount(dir, mnt);
}

int disk_mount_snapshot(const char *dir, const char *id, const char *mnt)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  return is_ploop(dir) ? ploop_mount(dir, id, mnt) : raw_mount_snapshot(dir, id, mnt);
}

int disk_umount(const char *dir, const char *mnt)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  if (!is_ploop(dir))
    return raw_umount(mnt);
  if (ploop_attach_umount(mnt) < 0) {
    if (ploop_get_status() == PLOOP_ERR_NOTFOUND && !disk_is_mounted(mnt))
      return 0;
    return ploop_failed("detach ploop disk");
  }
  return 0;
}

int disk_detach_unmounted(const char *dir)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  struct ploop_attach_info ai;
  if (!is_ploop(dir) || ploop_attach_find(dir, &ai) < 0 || ai.mount_point[0])
    return 0;
  if (ploop_attach_umount(dir) < 0)
    return ploop_failed("detach ploop disk");
  return 1;
}

int disk_snapshot(const char *dir, const char *mnt, char *id, size_t idlen)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  if (!is_ploop(dir))
    return raw_snapshot(dir, mnt, id, idlen);
  char guid[PLOOP_UUID_LEN + 1];
  /* Attached: the daemon snapshots online, under FIFREEZE of the mount. */
  int rc = mnt ? ploop_attach_snapshot(mnt, NULL, guid) : ploop_snapshot_create(dir, NULL, guid);
  if (rc < 0)
    return ploop_failed("snapshot");
  snprintf(id, idlen, "%s", guid);
  return 0;
}

int disk_usage(const char *dir, uint64_t *bytes)
{
  DIR *d = opendir(dir);
  if (!d)
    return ct_fail(errno, "open %s", dir);
  *bytes = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      *bytes += (uint64_t)st.st_blocks * 512;
  }
  closedir(d);
  return 0;
}

/* ---- snapshots and size of a disk at rest ---- */

static int check_id(const char *id)
{
  if (!id[0] || strlen(id) >= DISK_SNAPSHOT_ID_MAX || strchr(id, '/') || strchr(id, '.'))
    return ct_usage("bad snapshot id '%s'", id);
  return 0;
}

static uint64_t file_bytes(const char *dir, const char *file)
{
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  struct stat st;
  return stat(p, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

static int by_id(const void *a, const void *b)
{
  return strcmp(((const struct disk_snapshot_info *)a)->id, ((const struct disk_snapshot_info *)b)->id);
}

int disk_snapshot_list(const char *dir, struct disk_snapshot_info **out, size_t *n)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  *out = NULL;
  *n = 0;
  if (is_ploop(dir)) {
    struct ploop_descriptor *d = ploop_descriptor_load(dir);
    if (!d)
      return ploop_failed("read the disk descriptor");
    struct disk_snapshot_info *v = calloc(d->n_snapshots + 1, sizeof *v);
    if (!v)
      abort();
    for (size_t i = 0; i < d->n_snapshots; i++) {
      const struct ploop_snapshot_desc *s = &d->snapshots[i];
      if (strcmp(s->guid, d->top_guid) == 0)
        continue;  /* the live top is not a snapshot */
      struct disk_snapshot_info *e = &v[(*n)++];
      snprintf(e->id, sizeof e->id, "%s", s->guid);
      /* The base's parent is the all-zero GUID. */
      snprintf(e->parent, sizeof e->parent, "%s", strspn(s->parent, "{}0-") == strlen(s->parent) ? "" : s->parent);
      const struct ploop_image_desc *im = ploop_descriptor_find_image(d, s->guid);
      if (im) {
        snprintf(e->file, sizeof e->file, "%s", im->file);
        e->bytes = file_bytes(dir, im->file);
      }
    }
    ploop_descriptor_free(d);
    *out = v;
    return 0;
  }
  DIR *dd = opendir(dir);
  if (!dd)
    return ct_fail(errno, "open %s", dir);
  size_t cap = 0;
  struct disk_snapshot_info *v = NULL;
  struct dirent *e;
  while ((e = readdir(dd))) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, "snap-", 5) != 0 || len < 10 || strcmp(e->d_name + len - 4, ".raw") != 0 ||
        len - 9 >= DISK_SNAPSHOT_ID_MAX)
      continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      v = realloc(v, cap * sizeof *v);
      if (!v)
        abort();
    }
    struct disk_snapshot_info *s = &v[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%.*s", (int)(len - 9), e->d_name + 5);
    snprintf(s->file, sizeof s->file, "%s", e->d_name);
    s->bytes = file_bytes(dir, e->d_name);
  }
  closedir(dd);
  if (*n)
    qsort(v, *n, sizeof *v, by_id);  /* ids are timestamps: oldest first */
  *out = v;
  return 0;
}

int disk_snapshot_delete(const char *dir, const char *id)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  if (check_id(id) < 0)
    return -1;
  if (is_ploop(dir))
    return ploop_snapshot_delete(dir, id) < 0 ? ploop_failed("delete snapshot") : 0;
  cleanup_free char *img = xasprintf("%s/snap-%s.raw", dir, id);
  if (unlink(img) < 0)
    return errno == ENOENT ? ct_fail(0, "no snapshot '%s'", id) : ct_fail(errno, "remove %s", img);
  return 0;
}

int disk_rollback(const char *dir, const char *id)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  if (check_id(id) < 0)
    return -1;
  if (is_ploop(dir))
    return ploop_snapshot_switch(dir, id) < 0 ? ploop_failed("roll back") : 0;
  cleanup_free char *snap = xasprintf("%s/snap-%s.raw", dir, id);
  if (access(snap, F_OK) < 0)
    return ct_fail(0, "no snapshot '%s'", id);
  cleanup_free char *img = xasprintf("%s/" IMAGE, dir);
  cleanup_free char *tmp = xasprintf("%s/" IMAGE ".tmp", dir);
  unlink(tmp);
  if (copy_sparse(snap, tmp) < 0)
    return -1;
  if (rename(tmp, img) < 0) {
    int saved = errno;
    unlink(tmp);
    return ct_fail(saved, "replace %s", img);
  }
  return 0;
}

int disk_resize(const char *dir, const char *mnt, uint64_t bytes)
{
  char rbd[1024];
  dir = disk_rbd_where(dir, rbd, sizeof rbd);
  if (!is_ploop(dir))
    return ct_fail(0, "resize: only ploop disks can be resized (this one is raw)");
  if (mnt)
    return ploop_attach_resize(mnt, bytes) < 0 ? ploop_failed("resize") : 0;
  /* Attached without a mount: the shrink path runs e2fsck and resize2fs. */
  struct ploop_attach_opts o = {.fstype = "ext4"};
  struct ploop_attach_info info;
  if (ploop_attach_mount(dir, &o, &info) < 0)
    return ploop_failed("attach ploop disk");
  int rc = ploop_attach_resize(info.device, bytes) < 0 ? ploop_failed("resize") : 0;
  if (ploop_attach_umount(info.device) < 0 && rc == 0)
    rc = ploop_failed("detach ploop disk");
  return rc;
}
