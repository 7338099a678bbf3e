/* Mount setup and pivot_root for the container (see rootfs.h); follows the
 * order crun and bubblewrap use: private propagation, bind the root on
 * itself, mounts below it while host paths are still reachable, pivot. */
#include "rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "error.h"
#include "util.h"

static int do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                    const char *data)
{
  if (mount(src, dst, type, flags, data) < 0)
    return ct_fail(errno, "mount %s on /%s", type ? type : src ? src : "(remount)", dst);
  return 0;
}

static int ensure_dir(const char *path, mode_t mode)
{
  if (mkdir(path, mode) < 0 && errno != EEXIST)
    return ct_fail(errno, "mkdir /%s in the rootfs", path);
  return 0;
}

/* crun's needed_devs: the nodes every program may expect. */
static const struct {
  const char *name;
  unsigned major, minor;
} devices[] = {
    {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"tty", 5, 0}, {"random", 1, 8}, {"urandom", 1, 9},
};

static int setup_dev(bool userns)
{
  if (do_mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_STRICTATIME | MS_NOEXEC,
               "mode=755,size=1m") < 0)
    return -1;
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
    char dst[64], src[64];
    snprintf(dst, sizeof dst, "dev/%s", devices[i].name);
    if (!userns) {
      /* One syscall instead of a file + a bind mount. */
      if (mknod(dst, S_IFCHR | 0666, makedev(devices[i].major, devices[i].minor)) < 0)
        return ct_fail(errno, "mknod /%s", dst);
      chmod(dst, 0666);  /* umask */
      continue;
    }
    int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0)
      return ct_fail(errno, "create /%s", dst);
    close(fd);
    snprintf(src, sizeof src, "/dev/%s", devices[i].name);
    if (do_mount(src, dst, NULL, MS_BIND, NULL) < 0)
      return -1;
  }
  static const char *links[][2] = {
      {"/proc/self/fd", "dev/fd"},     {"/proc/self/fd/0", "dev/stdin"},
      {"/proc/self/fd/1", "dev/stdout"}, {"/proc/self/fd/2", "dev/stderr"},
      {"pts/ptmx", "dev/ptmx"},
  };
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
    if (symlink(links[i][0], links[i][1]) < 0)
      return ct_fail(errno, "symlink /%s", links[i][1]);
  if (ensure_dir("dev/pts", 0755) < 0 || ensure_dir("dev/shm", 01777) < 0)
    return -1;
  /* gid 5 (tty) may be unmapped in a user namespace. */
  if (do_mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
               userns ? "newinstance,ptmxmode=0666,mode=620" : "newinstance,ptmxmode=0666,mode=620,gid=5") < 0)
    return -1;
  return do_mount("shm", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k");
}

/* What runc/crun mask by default: kernel internals a container must not read or poke. */
static int mask_proc(void)
{
  static const char *masked[] = {"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug"};
  static const char *readonly[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"};
  for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++)
    if (access(masked[i], F_OK) == 0 && do_mount("dev/null", masked[i], NULL, MS_BIND, NULL) < 0)
      return -1;
  for (size_t i = 0; i < sizeof readonly / sizeof readonly[0]; i++) {
    if (access(readonly[i], F_OK) < 0)
      continue;
    if (do_mount(readonly[i], readonly[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
        do_mount(NULL, readonly[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
      return -1;
  }
  return 0;
}

static int pivot(void)
{
  cleanup_close int oldroot = open("/", O_DIRECTORY | O_PATH | O_CLOEXEC);
  if (oldroot < 0)
    return ct_fail(errno, "open /");
  /* pivot_root(".", "."): the old root ends up stacked on the new one and is
   * detached right away (runc, crun, bwrap). */
  if (syscall(SYS_pivot_root, ".", ".") < 0)
    return ct_fail(errno, "pivot_root");
  if (fchdir(oldroot) < 0)
    return ct_fail(errno, "fchdir old root");
  if (mount(NULL, ".", NULL, MS_SLAVE | MS_REC, NULL) < 0)
    return ct_fail(errno, "make old root slave");
  if (umount2(".", MNT_DETACH) < 0)
    return ct_fail(errno, "detach old root");
  if (chdir("/") < 0)
    return ct_fail(errno, "chdir /");
  return 0;
}

int rootfs_enter(const char *rootfs, int rootfd, bool userns, bool own_netns)
{
  if (rootfd >= 0) {
    if (fchdir(rootfd) < 0)
      return ct_fail(errno, "enter the id-mapped rootfs");
    close(rootfd);
  } else {
    /* pivot_root needs the new root to be a mount point of its own. */
    if (mount(rootfs, rootfs, NULL, MS_BIND | MS_REC, NULL) < 0)
      return ct_fail(errno, "bind %s", rootfs);
    if (chdir(rootfs) < 0)
      return ct_fail(errno, "chdir %s", rootfs);
  }
  if (ensure_dir("proc", 0555) < 0 || ensure_dir("sys", 0555) < 0 || ensure_dir("dev", 0755) < 0 ||
      ensure_dir("tmp", 01777) < 0)
    return -1;
  if (do_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    return -1;
  const unsigned long sysflags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (own_netns || !userns) {
    if (do_mount("sysfs", "sys", "sysfs", sysflags, NULL) < 0)
      return -1;
  } else if (do_mount("/sys", "sys", NULL, MS_BIND | MS_REC, NULL) < 0 ||
             do_mount(NULL, "sys", NULL, MS_BIND | MS_REMOUNT | sysflags, NULL) < 0) {
    return -1;  /* sysfs of a netns we do not own can only be bound */
  }
  if (setup_dev(userns) < 0 || mask_proc() < 0)
    return -1;
  return pivot();
}
