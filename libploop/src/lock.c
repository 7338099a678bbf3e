/* The disk lock: an open-file-description lock on DIR/DiskDescriptor.xml.lck
 * held by whoever changes the disk (one writer at a time). The file records
 * the holder so a refusal can say who holds it. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int ploop_lock_disk(const char *dir)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.lck", dir, PLOOP_DESCRIPTOR_NAME);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return ploop_error_os(path, "open lock file");
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
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
  if (ftruncate(fd, 0) < 0) {
    /* advisory record only */
  }
  close(fd);
}
