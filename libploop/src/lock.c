/* The disk lock: open-file-description locks on DIR/DiskDescriptor.xml.lck.
 * Byte 0 is the writer's (one process changes the disk at a time); byte 1
 * guards the snapshots: readers of a snapshot share it, and whoever rewrites
 * or removes existing deltas (merge, delete, switch, convert) takes it
 * alone. The file records the last writer so a refusal can say who holds it. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int lock_byte(int fd, short type, off_t byte)
{
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
  return fcntl(fd, F_OFD_SETLK, &fl);
}

int ploop_lock_disk(const char *dir, unsigned what)
{
  return store_for(dir)->lock(dir, what);
}

int lock_disk_file(const char *dir, unsigned what)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.lck", dir, PLOOP_DESCRIPTOR_NAME);
  /* The holder record is written into this file: a symlink planted in its
   * place must not redirect that write outside the directory. */
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0 && what == PLOOP_LOCK_READER && (errno == EROFS || errno == EACCES))
    return -2; /* read-only media: nobody can change the disk, no lock needed */
  if (fd < 0 && errno == ELOOP)
    return ploop_error(PLOOP_ERR_PARAM, ELOOP, "%s: lock file is a symlink; it must be a regular file", path);
  if (fd < 0)
    return ploop_error_os(path, "open lock file");
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: lock file is not a regular file", path);
  }
  if (what == PLOOP_LOCK_READER) {
    if (lock_byte(fd, F_RDLCK, 1) < 0) {
      close(fd);
      return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: snapshots are being merged or removed; try again later",
                         dir);
    }
    return fd;
  }
  if ((what & PLOOP_LOCK_WRITER) && lock_byte(fd, F_WRLCK, 0) < 0) {
    int e = errno;
    char holder[256] = "another process";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    if (n > 0) {
      holder[n] = 0;
      holder[strcspn(holder, "\n")] = 0;
    }
    close(fd);
    if (e == EAGAIN || e == EACCES)
      return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: disk is locked by %s", dir, holder);
    errno = e;
    return ploop_error_os(path, "lock");
  }
  if ((what & PLOOP_LOCK_DELTAS) && lock_byte(fd, F_WRLCK, 1) < 0) {
    close(fd);
    return ploop_error(PLOOP_ERR_BUSY, EBUSY,
                       "%s: a snapshot of the disk is open (exported or served); close it first", dir);
  }
  if (!(what & PLOOP_LOCK_WRITER))
    return fd;
  char comm[64] = "?", who[160];
  FILE *f = fopen("/proc/self/comm", "re");
  if (f) {
    if (fgets(comm, sizeof comm, f))
      comm[strcspn(comm, "\n")] = 0;
    fclose(f);
  }
  int n = snprintf(who, sizeof who, "pid %d (%s)\n", (int)getpid(), comm);
  if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)n, 0) != n) {
    /* The record is advisory; the lock itself is what counts. */
  }
  return fd;
}

void ploop_unlock_disk(int fd)
{
  if (fd < 0)
    return;
  store_rbd_ops.unlock(fd); /* a store's lock handle is an fd it keeps a note of */
  close(fd);                /* the holder record stays: it is read only while the lock is held */
}
