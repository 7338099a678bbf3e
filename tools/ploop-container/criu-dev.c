/* The container's /dev and /dev/shm tmpfs as external mounts of a
 * checkpoint. CRIU saves a tmpfs by running tar and gzip over it at dump
 * and again at restore (a third of a dump here); when they hold exactly
 * what the launcher put there (rootfs.c setup_dev) and nothing else,
 * restore makes them anew instead. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "criu-internal.h"
#include "error.h"
#include "util.h"

/* What rootfs.c setup_dev makes on a container without --userns. */
static const struct {
  const char *name;
  unsigned major, minor;  /* 0:0 with a link target: a symlink */
  const char *link;
} dev_entries[] = {
    {"null", 1, 3, NULL},    {"zero", 1, 5, NULL},   {"full", 1, 7, NULL},
    {"tty", 5, 0, NULL},     {"random", 1, 8, NULL}, {"urandom", 1, 9, NULL},
    {"fd", 0, 0, "/proc/self/fd"},         {"stdin", 0, 0, "/proc/self/fd/0"},
    {"stdout", 0, 0, "/proc/self/fd/1"},   {"stderr", 0, 0, "/proc/self/fd/2"},
    {"ptmx", 0, 0, "pts/ptmx"},
};
static const size_t ndev = sizeof dev_entries / sizeof dev_entries[0];

static bool entry_is_default(int dfd, const char *name)
{
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return false;
  if (strcmp(name, "pts") == 0 || strcmp(name, "shm") == 0)
    return S_ISDIR(st.st_mode);
  for (size_t i = 0; i < ndev; i++) {
    if (strcmp(name, dev_entries[i].name) != 0)
      continue;
    if (dev_entries[i].link) {
      char target[64];
      ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);
      if (!S_ISLNK(st.st_mode) || n < 0)
        return false;
      target[n] = 0;
      return strcmp(target, dev_entries[i].link) == 0;
    }
    return S_ISCHR(st.st_mode) && major(st.st_rdev) == dev_entries[i].major &&
           minor(st.st_rdev) == dev_entries[i].minor && (st.st_mode & 07777) == 0666;
  }
  return false;
}

/* Counts entries of DIR (in PID's root), each checked by OK when given. */
static int scan(pid_t pid, const char *dir, bool (*ok)(int, const char *), size_t *count)
{
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/root%s", (int)pid, dir);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  *count = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    (*count)++;
    if (ok && !ok(dirfd(d), e->d_name))
      rc = -1;
  }
  closedir(d);
  return rc;
}

bool criu_dev_is_default(pid_t pid)
{
  size_t n;
  return scan(pid, "/dev", entry_is_default, &n) == 0 && n == ndev + 2;
}

bool criu_shm_is_empty(pid_t pid)
{
  size_t n;
  return scan(pid, "/dev/shm", NULL, &n) == 0 && n == 0;
}

int criu_make_dev(const char *dir)
{
  if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_STRICTATIME | MS_NOEXEC, "mode=755,size=1m") < 0)
    return ct_fail(errno, "mount tmpfs on %s", dir);
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return ct_fail(errno, "open %s", dir);
  for (size_t i = 0; i < ndev; i++) {
    const char *name = dev_entries[i].name;
    int rc = dev_entries[i].link
                 ? symlinkat(dev_entries[i].link, dfd, name)
                 : mknodat(dfd, name, S_IFCHR | 0666, makedev(dev_entries[i].major, dev_entries[i].minor));
    if (rc < 0 || (!dev_entries[i].link && fchmodat(dfd, name, 0666, 0) < 0))
      return ct_fail(errno, "make %s/%s", dir, name);
  }
  if (mkdirat(dfd, "pts", 0755) < 0 || mkdirat(dfd, "shm", 01777) < 0 || fchmodat(dfd, "shm", 01777, 0) < 0)
    return ct_fail(errno, "mkdir in %s", dir);
  return 0;
}

int criu_make_shm(const char *dir)
{
  if (mount("shm", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k") < 0)
    return ct_fail(errno, "mount tmpfs on %s", dir);
  return 0;
}
