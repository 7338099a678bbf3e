/* Filesystem helpers of the local attach: mkfs, libblkid probe, online grow
 * (EXT4_IOC_RESIZE_FS, xfs_growfs) and offline ext4 resize, plus running the
 * e2fsprogs/xfsprogs tools with their last message kept for errors. */
#include <blkid/blkid.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attach-internal.h"

#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

static void last_line(char *buf, size_t n, char *msg, size_t msglen)
{
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r'))
    buf[--n] = 0;
  char *start = memrchr(buf, '\n', n);
  start = start ? start + 1 : buf;
  snprintf(msg, msglen, "%s", start);
}

int attach_run(char *const argv[], char *msg, size_t msglen)
{
  int pfd[2];
  if (msg && msglen)
    msg[0] = 0;
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return ploop_set_error(PLOOP_ERR_GENERIC, errno, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pfd[0]);
    close(pfd[1]);
    return ploop_set_error(PLOOP_ERR_GENERIC, e, "fork: %s", strerror(e));
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    /* Tools live in sbin, which a non-login root shell may lack in PATH. */
    const char *path = getenv("PATH");
    char newpath[4096];
    snprintf(newpath, sizeof(newpath), "%s:/usr/sbin:/sbin", path ? path : "/usr/bin:/bin");
    setenv("PATH", newpath, 1);
    execvp(argv[0], argv);
    dprintf(2, "%s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  /* Keep only the tail: the last line is what explains a failure. */
  char buf[8192];
  size_t n = 0;
  for (;;) {
    if (n == sizeof(buf) - 1) {
      memmove(buf, buf + sizeof(buf) / 2, n - sizeof(buf) / 2);
      n -= sizeof(buf) / 2;
    }
    ssize_t r = read(pfd[0], buf + n, sizeof(buf) - 1 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  buf[n] = 0;
  close(pfd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return ploop_set_error(PLOOP_ERR_GENERIC, errno, "wait for %s: %s", argv[0], strerror(errno));
  }
  if (msg && msglen)
    last_line(buf, n, msg, msglen);
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 127)
      return ploop_set_error(PLOOP_ERR_GENERIC, ENOENT, "%s: cannot run it (not installed?)", argv[0]);
    return WEXITSTATUS(status);
  }
  return ploop_set_error(PLOOP_ERR_GENERIC, EINTR, "%s killed by signal %d", argv[0],
                     WTERMSIG(status));
}

/* A tool that must succeed: non-zero exit becomes an error with its last line. */
static int run_checked(char *const argv[], int ok_max)
{
  char msg[512];
  int rc = attach_run(argv, msg, sizeof(msg));
  if (rc < 0)
    return -1;
  if (rc > ok_max)
    return ploop_set_error(PLOOP_ERR_GENERIC, EIO, "%s failed (exit %d): %s", argv[0], rc,
                       msg[0] ? msg : "no message");
  return rc;
}

int ploop_fs_make(const char *device, const char *fstype)
{
  return ploop_fs_make_opts(device, fstype, NULL);
}

int ploop_fs_make_opts(const char *device, const char *fstype, const struct ploop_fs_opts *o)
{
  if (!device || !fstype)
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "mkfs: device and filesystem type are needed");
  unsigned bs = o ? o->block_size : 0;
  if (bs && (bs < 1024 || bs > 65536 || (bs & (bs - 1))))
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL,
                           "mkfs: block size %u is not a power of two from 1024 to 65536", bs);
  char bsarg[32];
  /* No discard pass: a fresh ploop disk reads as zeros already, and a
   * whole-device discard through FUSE only costs time. */
  if (strcmp(fstype, "ext4") == 0 || strcmp(fstype, "ext3") == 0) {
    char mkfs[16];
    snprintf(mkfs, sizeof(mkfs), "mkfs.%s", fstype);
    /* Not lazy (OpenVZ's -n): inode tables and journal written now, not by
     * a kernel thread after the first mount. */
    const char *ext = o && o->nolazy ? "nodiscard,lazy_itable_init=0,lazy_journal_init=0" : "nodiscard";
    /* A new disk reads as zeros: mke2fs >= 1.47 then writes neither the
     * inode tables nor the journal and marks them zeroed, so no clusters
     * are allocated for them and no lazy init runs after the first mount
     * (an 8 GiB disk: 26 clusters instead of 89). An older mke2fs rejects
     * the option: it is run once more without it. */
    char ext_zero[128];
    snprintf(ext_zero, sizeof ext_zero, "%s,assume_storage_prezeroed=1", ext);
    char *argv[10] = {mkfs, "-q", "-F", "-E", o && o->prezeroed ? ext_zero : (char *)ext};
    int n = 5;
    if (bs) {
      snprintf(bsarg, sizeof bsarg, "%u", bs);
      argv[n++] = "-b";
      argv[n++] = bsarg;
    }
    argv[n++] = (char *)device;
    argv[n] = NULL;
    if (o && o->prezeroed) {
      char msg[512];
      int rc = attach_run(argv, msg, sizeof(msg));
      if (rc == 0)
        return 0;
      if (rc < 0)
        return -1;
      argv[4] = (char *)ext;  /* an mke2fs older than 1.47, or another failure seen again below */
    }
    return run_checked(argv, 0) < 0 ? -1 : 0;
  }
  if (strcmp(fstype, "xfs") == 0) {
    char *argv[10] = {"mkfs.xfs", "-q", "-f", "-K"};
    int n = 4;
    if (bs) {
      snprintf(bsarg, sizeof bsarg, "size=%u", bs);
      argv[n++] = "-b";
      argv[n++] = bsarg;
    }
    argv[n++] = (char *)device;
    argv[n] = NULL;
    return run_checked(argv, 0) < 0 ? -1 : 0;
  }
  return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "mkfs: unsupported filesystem '%s' (ext4, ext3 or xfs)",
                     fstype);
}

int ploop_fs_probe(const char *device, char *type, size_t len)
{
  blkid_probe pr = blkid_new_probe_from_filename(device);
  if (!pr)
    return ploop_set_error(PLOOP_ERR_IO, errno ? errno : EIO, "probe %s: %s", device,
                       strerror(errno ? errno : EIO));
  blkid_probe_enable_superblocks(pr, 1);
  blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
  int rc = blkid_do_safeprobe(pr);
  const char *t = NULL;
  if (rc == 0 && blkid_probe_lookup_value(pr, "TYPE", &t, NULL) == 0 && t) {
    snprintf(type, len, "%s", t);
    blkid_free_probe(pr);
    return 0;
  }
  blkid_free_probe(pr);
  if (rc == -2)
    return ploop_set_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: ambiguous filesystem signatures", device);
  return ploop_set_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: no filesystem found on the disk", device);
}

int ploop_fs_grow_online(const char *mount_point, const char *device, const char *fstype)
{
  if (strcmp(fstype, "ext4") == 0) {
    int fd = open(mount_point, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", mount_point, strerror(errno));
    struct statvfs sv;
    uint64_t dev_bytes = 0;
    int dfd = open(device, O_RDONLY | O_CLOEXEC);
    int rc = -1;
    if (dfd < 0 || ioctl(dfd, BLKGETSIZE64, &dev_bytes) < 0) {
      ploop_set_error(PLOOP_ERR_IO, errno, "%s: size: %s", device, strerror(errno));
    } else if (fstatvfs(fd, &sv) < 0) {
      ploop_set_error(PLOOP_ERR_IO, errno, "%s: statfs: %s", mount_point, strerror(errno));
    } else {
      uint64_t blocks = dev_bytes / sv.f_bsize;
      if (ioctl(fd, EXT4_IOC_RESIZE_FS, &blocks) < 0) {
        /* ext4 wants CAP_SYS_RESOURCE for online resize; containers and
         * sandboxes often drop it while allowing everything else. */
        if (errno == EPERM)
          ploop_set_error(PLOOP_ERR_GENERIC, EPERM,
                          "%s: the disk grew but the kernel refused to grow ext4 online (needs "
                          "CAP_SYS_RESOURCE); umount and resize again to grow it offline",
                          mount_point);
        else
          ploop_set_error(PLOOP_ERR_IO, errno, "%s: grow ext4 to %" PRIu64 " blocks: %s",
                          mount_point, blocks, strerror(errno));
      } else
        rc = 0;
    }
    if (dfd >= 0)
      close(dfd);
    close(fd);
    return rc;
  }
  if (strcmp(fstype, "xfs") == 0) {
    char *argv[] = {"xfs_growfs", (char *)mount_point, NULL};
    return run_checked(argv, 0) < 0 ? -1 : 0;
  }
  if (strcmp(fstype, "ext3") == 0 || strcmp(fstype, "ext2") == 0) {
    char *argv[] = {"resize2fs", (char *)device, NULL};
    return run_checked(argv, 0) < 0 ? -1 : 0;
  }
  return ploop_set_error(PLOOP_ERR_PARAM, EOPNOTSUPP, "%s: cannot grow a %s filesystem", mount_point,
                     fstype);
}

int ploop_fs_resize_offline(const char *device, const char *fstype, uint64_t new_bytes)
{
  if (strcmp(fstype, "ext4") != 0 && strcmp(fstype, "ext3") != 0 && strcmp(fstype, "ext2") != 0)
    return ploop_set_error(PLOOP_ERR_PARAM, EOPNOTSUPP,
                       "%s: offline resize of %s is not possible (xfs only grows, mounted)", device,
                       fstype);
  /* resize2fs insists on a freshly checked filesystem; exit 1 means fixed. */
  char *fsck[] = {"e2fsck", "-f", "-p", (char *)device, NULL};
  if (run_checked(fsck, 1) < 0)
    return -1;
  char size[32];
  snprintf(size, sizeof(size), "%" PRIu64 "K", new_bytes / 1024);
  char *resize[] = {"resize2fs", (char *)device, size, NULL};
  if (run_checked(resize, 0) < 0)
    return -1;
  return 0;
}

int ploop_fs_check(const char *device, const char *fstype)
{
  /* ext2/3/4: e2fsck -p fixes what is safe to fix unattended (exit 1: fixed);
   * xfs: xfs_repair -n reports (a dirty log is replayed by the mount). */
  if (strncmp(fstype, "ext", 3) == 0) {
    char *fsck[] = {"e2fsck", "-p", (char *)device, NULL};
    return run_checked(fsck, 1) < 0 ? -1 : 0;
  }
  if (strcmp(fstype, "xfs") == 0) {
    char *fsck[] = {"xfs_repair", "-n", (char *)device, NULL};
    return run_checked(fsck, 0) < 0 ? -1 : 0;
  }
  return ploop_set_error(PLOOP_ERR_PARAM, EOPNOTSUPP, "%s: no check for a %s filesystem", device, fstype);
}

void attach_mounted_fstype(const char *mount_point, char *type, size_t len)
{
  type[0] = 0;
  FILE *f = setmntent("/proc/self/mounts", "r");
  if (!f)
    return;
  struct mntent *m;
  while ((m = getmntent(f)))
    if (strcmp(m->mnt_dir, mount_point) == 0)
      snprintf(type, len, "%s", m->mnt_type); /* the last one is on top */
  endmntent(f);
}
