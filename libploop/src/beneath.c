/* Opening the files a descriptor names without leaving the disk's directory:
 * every path from a DiskDescriptor.xml resolves beneath a directory fd
 * (openat2 RESOLVE_BENEATH), so a symlink, or a symlinked directory on the
 * way, that points outside is refused; only regular files open as deltas. */
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define RESOLVE_RETRIES 16 /* openat2 says EAGAIN when a rename raced the walk */

/* openat(O_NOFOLLOW) that says ELOOP for a symlink even with O_PATH
 * (which would open the link itself) or O_DIRECTORY (ENOTDIR). */
static int open_nofollow(int dirfd, const char *name, int flags, mode_t mode)
{
  int fd = openat(dirfd, name, (flags & ~O_DIRECTORY) | O_NOFOLLOW, mode);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return fd;
  if (S_ISLNK(st.st_mode) || ((flags & O_DIRECTORY) && !S_ISDIR(st.st_mode))) {
    close(fd);
    errno = S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;
    return -1;
  }
  return fd;
}

/* Without openat2 (old kernel, or a seccomp filter that hides it) the walk
 * is done by hand and follows no symlink at all: stricter, never looser. */
static int walk_nofollow(int dirfd, const char *name, int flags, mode_t mode)
{
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", name) >= (int)sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  if (buf[0] == '/') {
    errno = EXDEV;
    return -1;
  }
  int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  char *p = buf;
  for (char *slash; cur >= 0 && (slash = strchr(p, '/')); p = slash + 1) {
    *slash = 0;
    if (!strcmp(p, "..")) {
      close(cur);
      errno = EXDEV;
      return -1;
    }
    if (!p[0] || !strcmp(p, "."))
      continue;
    int next = open_nofollow(cur, p, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    int e = errno;
    close(cur);
    errno = e;
    cur = next;
  }
  if (cur < 0)
    return -1;
  if (!strcmp(p, "..")) {
    close(cur);
    errno = EXDEV;
    return -1;
  }
  int fd = open_nofollow(cur, p[0] ? p : ".", flags, mode);
  int e = errno;
  close(cur);
  errno = e;
  return fd;
}

int openat_beneath(int dirfd, const char *name, int flags, mode_t mode)
{
  struct open_how how = {
      .flags = (uint64_t)(flags | O_CLOEXEC),
      .mode = (flags & O_CREAT) ? mode : 0,
      .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
  };
  for (int i = 0; i < RESOLVE_RETRIES; i++) {
    long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd >= 0)
      return (int)fd;
    if (errno == ENOSYS || errno == EPERM)
      return walk_nofollow(dirfd, name, flags | O_CLOEXEC, mode);
    if (errno != EAGAIN)
      return -1;
  }
  return -1;
}

/* NAME of PATH relative to DIR, or NULL when PATH is not DIR/NAME. */
static const char *name_in(const char *dir, const char *path)
{
  size_t n = strlen(dir);
  while (n > 0 && dir[n - 1] == '/')
    n--;
  if (strncmp(path, dir, n) || path[n] != '/')
    return NULL;
  path += n;
  while (*path == '/')
    path++;
  return *path ? path : NULL;
}

static const char *kind(mode_t m)
{
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISDIR(m)  ? "a directory"
                       : "not a regular file";
}

static int not_regular(const char *path, mode_t m)
{
  return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: is %s, not a regular image file", path, kind(m));
}

static int open_failed(const char *dir, const char *path, const char *what)
{
  if (dir && errno == EXDEV)
    return ploop_error(PLOOP_ERR_PARAM, EXDEV, "%s: resolves outside the disk directory %s (symlink?)", path,
                       dir);
  if (dir && errno == ELOOP)
    return ploop_error(PLOOP_ERR_PARAM, ELOOP, "%s: a symlink that cannot be followed inside %s", path, dir);
  return ploop_error(errno == ENOENT ? PLOOP_ERR_NOTFOUND : PLOOP_ERR_IO, errno, "%s: %s: %s", path, what,
                     strerror(errno));
}

/* The fd of DIR (O_PATH) and NAME inside it; *DIRFD = -1 for a bare PATH. */
static int split(const char *dir, const char *path, int *dirfd, const char **name)
{
  *dirfd = -1;
  *name = path;
  if (!dir)
    return 0;
  *name = name_in(dir, path);
  if (!*name)
    return ploop_error(PLOOP_ERR_PARAM, EXDEV, "%s: not inside the disk directory %s", path, dir);
  *dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*dirfd < 0)
    return ploop_error_os(dir, "open directory");
  return 0;
}

static int open_one(int dirfd, const char *name, int flags, mode_t mode)
{
  return dirfd >= 0 ? openat_beneath(dirfd, name, flags, mode) : open(name, flags | O_CLOEXEC, mode);
}

int ploop_open_file(const char *dir, const char *path, int flags, mode_t mode)
{
  int dirfd;
  const char *name;
  if (split(dir, path, &dirfd, &name) < 0)
    return -1;
  struct stat st;
  int fd = -1;
  /* Look first through an O_PATH fd: opening a FIFO blocks until a peer
   * shows up, and opening a device may act on it. */
  if (!(flags & O_CREAT)) {
    int probe = open_one(dirfd, name, O_PATH, 0);
    if (probe < 0) {
      open_failed(dir, path, "open");
      goto out;
    }
    int rc = fstat(probe, &st);
    close(probe);
    if (rc < 0) {
      ploop_error_os(path, "stat");
      goto out;
    }
    if (!S_ISREG(st.st_mode)) {
      not_regular(path, st.st_mode);
      goto out;
    }
  }
  /* O_NONBLOCK in case the file was swapped for a FIFO since the look. */
  fd = open_one(dirfd, name, flags | O_NONBLOCK, mode);
  if (fd < 0) {
    open_failed(dir, path, (flags & O_CREAT) ? "create" : "open");
    goto out;
  }
  int bad = fstat(fd, &st) < 0     ? ploop_error_os(path, "stat")
            : !S_ISREG(st.st_mode) ? not_regular(path, st.st_mode)
                                   : 0;
  if (bad < 0) {
    close(fd);
    fd = -1;
    goto out;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    ploop_error_os(path, "fcntl");
    close(fd);
    fd = -1;
  }
out:
  if (dirfd >= 0)
    close(dirfd);
  return fd;
}

/* The directory that holds NAME (beneath DIRFD) and NAME's last component. */
static int parent_of(int dirfd, const char *name, const char **base)
{
  const char *slash = strrchr(name, '/');
  if (!slash) {
    *base = name;
    return fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  }
  char sub[PATH_MAX];
  if ((size_t)(slash - name) >= sizeof sub) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(sub, name, (size_t)(slash - name));
  sub[slash - name] = 0;
  *base = slash + 1;
  return openat_beneath(dirfd, sub, O_PATH | O_DIRECTORY, 0);
}

int ploop_unlink_file(const char *dir, const char *path)
{
  const char *name = dir ? name_in(dir, path) : NULL;
  if (!dir)
    return unlink(path);
  if (!name) {
    errno = EXDEV;
    return -1;
  }
  int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return -1;
  const char *base;
  int pfd = parent_of(dirfd, name, &base);
  int rc = pfd < 0 ? -1 : unlinkat(pfd, base, 0);
  int e = errno;
  if (pfd >= 0)
    close(pfd);
  close(dirfd);
  errno = e;
  return rc;
}

int ploop_link_file(const char *dir, const char *from, const char *to)
{
  if (!dir)
    return link(from, to);
  const char *nf = name_in(dir, from), *nt = name_in(dir, to);
  if (!nf || !nt) {
    errno = EXDEV;
    return -1;
  }
  int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return -1;
  const char *bf, *bt;
  int pf = parent_of(dirfd, nf, &bf);
  int pt = pf < 0 ? -1 : parent_of(dirfd, nt, &bt);
  int rc = pt < 0 ? -1 : linkat(pf, bf, pt, bt, 0);
  int e = errno;
  if (pf >= 0)
    close(pf);
  if (pt >= 0)
    close(pt);
  close(dirfd);
  errno = e;
  return rc;
}

int ploop_check_file_beneath(const char *dir, const char *path)
{
  if (!dir)
    return 0;
  int dirfd;
  const char *name;
  if (split(dir, path, &dirfd, &name) < 0)
    return -1;
  int rc = 0;
  int fd = openat_beneath(dirfd, name, O_PATH, 0);
  struct stat st;
  if (fd < 0) {
    /* A file still to be created, or missing (reported where it is used). */
    if (errno != ENOENT)
      rc = open_failed(dir, path, "open");
  } else if (fstat(fd, &st) < 0) {
    rc = ploop_error_os(path, "stat");
  } else if (!S_ISREG(st.st_mode)) {
    rc = not_regular(path, st.st_mode);
  }
  if (fd >= 0)
    close(fd);
  close(dirfd);
  return rc;
}
