/* create, destroy, mount/umount: the container's directory and disk. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "container.h"
#include "disk.h"
#include "error.h"
#include "fill.h"
#include "util.h"

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
  (void)st;
  (void)ftw;
  if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
    return -1;
  return 0;
}

/* FTW_MOUNT: if a mount is still there, never descend into it. */
static int remove_tree(const char *dir)
{
  if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
    return ct_fail(errno, "remove %s", dir);
  return 0;
}

static int fill(const char *root, const char *from)
{
  if (strcmp(from, "busybox") == 0)
    return fill_busybox(root);
  return fill_tar(root, from);
}

/* Create and destroy run to the end once started: an interrupt would leave
 * a half-made container or a mounted disk. A pending signal takes effect
 * when they return. */
static void hold_signals(sigset_t *old)
{
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGQUIT);
  sigprocmask(SIG_BLOCK, &set, old);
}

static int create(const char *name, uint64_t disk_bytes, const char *from, bool raw_disk, const char *rbd);

int container_create(const char *name, uint64_t disk_bytes, const char *from, bool raw_disk, const char *rbd)
{
  sigset_t old;
  hold_signals(&old);
  int rc = create(name, disk_bytes, from, raw_disk, rbd);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
}

/* An rbd disk taken as it was holds files already: they stay as they are. */
static bool has_files(const char *mnt)
{
  DIR *d = opendir(mnt);
  if (!d)
    return false;
  struct dirent *e;
  bool found = false;
  while (!found && (e = readdir(d)))
    found = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "lost+found");
  closedir(d);
  return found;
}

static int create(const char *name, uint64_t disk_bytes, const char *from, bool raw_disk, const char *rbd)
{
  if (ct_check_name(name) < 0)
    return -1;
  if (rbd && (raw_disk || disk_rbd_check_name(rbd) < 0))
    return raw_disk ? ct_usage("--disk is raw or an rbd: name, not both") : -1;
  if (disk_bytes < (16u << 20))
    return ct_usage("--size must be at least 16M");
  if (strcmp(from, "busybox") != 0 && access(from, R_OK) < 0)
    return ct_fail(errno, "--from %s", from);
  if (mkdir_p(ct_root, 0700) < 0)
    return -1;
  cleanup_free char *dir = ct_path(name, NULL);
  if (mkdir(dir, 0700) < 0) {
    if (errno == EEXIST)
      return ct_state_fail(CT_EXIT_BUSY, "container '%s' already exists", name);
    return ct_fail(errno, "mkdir %s", dir);
  }
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  cleanup_close int lock = ct_lock(name);
  bool mounted = false, rbd_made = false;
  if (lock < 0 || mkdir(diskdir, 0700) < 0 || mkdir(mnt, 0755) < 0) {
    if (lock >= 0)
      ct_fail(errno, "mkdir in %s", dir);
    goto fail;
  }
  if ((rbd ? disk_rbd_create(diskdir, rbd, disk_bytes, &rbd_made) : disk_create(diskdir, disk_bytes, raw_disk)) < 0 ||
      disk_mount(diskdir, mnt) < 0)
    goto fail;
  mounted = true;
  if ((rbd_made || !rbd || !has_files(mnt)) && fill(mnt, from) < 0)
    goto fail;
  chmod(mnt, 0755);
  mounted = false;
  if (disk_umount(diskdir, mnt) < 0)
    goto fail;
  struct ct_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", name);
  c.disk_bytes = disk_bytes;
  snprintf(c.source, sizeof c.source, "%s", from);
  if (ct_config_save(&c) < 0)
    goto fail;
  if (rbd) {
    /* destroy removes the rbd disk only when create made it */
    cleanup_free char *k1 = xasprintf("disk=%s", rbd);
    const char *kv[] = {k1, rbd_made ? "disk_created=1" : "disk_created=0"};
    if (ct_kv_set(name, "config", kv, 2, true) < 0)
      goto fail;
  }
  return 0;
fail:
  if (mounted)
    disk_umount(diskdir, mnt);
  if (rbd_made && !disk_is_mounted(mnt))
    disk_rbd_remove(rbd);
  if (!disk_is_mounted(mnt))
    remove_tree(dir);
  return ct_wrap("create %s", name);
}

static int destroy(const char *name);

int container_destroy(const char *name)
{
  sigset_t old;
  hold_signals(&old);
  int rc = destroy(name);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
}

static int destroy(const char *name)
{
  if (ct_require(name) < 0)
    return -1;
  cleanup_close int lock = ct_lock(name);
  if (lock < 0)
    return -1;
  if (container_recover(name) < 0)
    return -1;
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  if (disk_is_mounted(mnt) && disk_umount(diskdir, mnt) < 0)
    return ct_wrap("destroy %s", name);
  cleanup_free char *dir = ct_path(name, NULL);
  char rbd[1024], made[8] = "";
  if (disk_rbd_name(diskdir, rbd, sizeof rbd) && ct_kv_get(name, "config", "disk_created", made, sizeof made) > 0 &&
      strcmp(made, "1") == 0 && disk_rbd_remove(rbd) < 0)
    return ct_wrap("destroy %s", name);
  /* The config goes first: a destroy cut short leaves no half-container
   * that `list` would show as valid. */
  cleanup_free char *cfg = ct_path(name, "config");
  unlink(cfg);
  return remove_tree(dir);
}

int container_mount(const char *name, const char *snapshot, const char *dir)
{
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *diskdir = ct_path(name, "disk");
  if (snapshot) {
    if (!dir)
      return ct_usage("mount --snapshot needs a target directory");
    return disk_mount_snapshot(diskdir, snapshot, dir);
  }
  cleanup_close int lock = ct_lock(name);
  if (lock < 0)
    return -1;
  cleanup_free char *mnt = ct_path(name, "rootfs");
  if (disk_is_mounted(mnt))
    return ct_state_fail(CT_EXIT_BUSY, "container %s: disk already mounted", name);
  return disk_mount(diskdir, mnt);
}

int container_umount(const char *name, const char *dir)
{
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *diskdir = ct_path(name, "disk");
  if (dir)
    return disk_umount(diskdir, dir);
  cleanup_close int lock = ct_lock(name);
  if (lock < 0)
    return -1;
  cleanup_free char *mnt = ct_path(name, "rootfs");
  if (!disk_is_mounted(mnt)) {
    int r = disk_detach_unmounted(diskdir);
    if (r != 0)
      return r < 0 ? -1 : 0;
    return ct_state_fail(CT_EXIT_STOPPED, "container %s: disk is not mounted", name);
  }
  return disk_umount(diskdir, mnt);
}
