/* Freeze, thaw, sync and journal checkpoint of a mounted filesystem
 * (fs-freeze.h). */
#include "fs-freeze.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "libploop.h"

#ifndef EXT4_IOC_CHECKPOINT
#define EXT4_IOC_CHECKPOINT _IOW('f', 43, uint32_t)
#endif

#define RCU_EXPEDITED "/sys/kernel/rcu_expedited"

static int fs_error(int e, const char *what, const char *mnt)
{
  return ploop_set_error(PLOOP_ERR_IO, e, "%s %s: %s", what, mnt, strerror(e));
}

int ploop_fs_open_mount(const char *mnt)
{
  int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return fs_error(errno, "open", mnt);
  return fd;
}

/* Runs OP on MNT's fd, opened for the call. */
static int on_mount(const char *mnt, int (*op)(int, const char *))
{
  int fd = ploop_fs_open_mount(mnt);
  if (fd < 0)
    return -1;
  int rc = op(fd, mnt);
  close(fd);
  return rc;
}

/* The previous value of rcu_expedited ('0' or '1'), or 0 when it was not
 * changed (off by the environment, already 1, not writable). */
static char rcu_expedite_on(void)
{
  const char *env = getenv("PLOOP_CONTAINER_RCU_EXPEDITE");
  if (env && strcmp(env, "0") == 0)
    return 0;
  int fd = open(RCU_EXPEDITED, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return 0;
  char old = 0;
  if (pread(fd, &old, 1, 0) != 1 || old != '0' || pwrite(fd, "1", 1, 0) != 1)
    old = 0;
  close(fd);
  return old;
}

static void rcu_expedite_restore(char old)
{
  if (!old)
    return;
  int fd = open(RCU_EXPEDITED, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  if (pwrite(fd, &old, 1, 0) != 1) {
    /* nothing to do: the setting is a speed-up, not a correctness matter */
  }
  close(fd);
}

int ploop_fs_freeze_fd(int fd, const char *mnt)
{
  char old = rcu_expedite_on();
  int rc = ioctl(fd, FIFREEZE, 0);
  int e = errno;
  rcu_expedite_restore(old);
  return rc < 0 ? fs_error(e, "freeze", mnt) : 0;
}

int ploop_fs_thaw_fd(int fd, const char *mnt)
{
  if (ioctl(fd, FITHAW, 0) < 0 && errno != EINVAL)
    return fs_error(errno, "thaw", mnt);
  return 0;
}

int ploop_fs_sync_fd(int fd, const char *mnt)
{
  return syncfs(fd) < 0 ? fs_error(errno, "sync", mnt) : 0;
}

int ploop_fs_checkpoint_fd(int fd, const char *mnt)
{
  uint32_t flags = 0; /* write the journal back, no discard or zeroing of it */
  if (ioctl(fd, EXT4_IOC_CHECKPOINT, &flags) < 0 && errno != ENOTTY && errno != EOPNOTSUPP)
    return fs_error(errno, "checkpoint the journal of", mnt);
  return 0;
}

int ploop_fs_freeze(const char *mnt)
{
  return on_mount(mnt, ploop_fs_freeze_fd);
}
int ploop_fs_thaw(const char *mnt)
{
  return on_mount(mnt, ploop_fs_thaw_fd);
}
int ploop_fs_sync(const char *mnt)
{
  return on_mount(mnt, ploop_fs_sync_fd);
}
int ploop_fs_checkpoint(const char *mnt)
{
  return on_mount(mnt, ploop_fs_checkpoint_fd);
}
