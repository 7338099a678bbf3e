/* State of each local attachment: one key=value file per attachment under
 * PLOOP_ATTACH_RUN_DIR, written atomically; listing and lookup by disk,
 * mount point or device; the host-wide lock that attach and umount take. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach-internal.h"

/* Copies with truncation (paths from state files and logs may be long). */
void attach_copy_field(char *dst, size_t len, const char *v)
{
  size_t n = strnlen(v, len - 1);
  memcpy(dst, v, n);
  dst[n] = 0;
}

static int mkdir_p(const char *path)
{
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof(tmp), "%s", path);
  for (char *s = tmp + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = 0;
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
      return ploop_set_error(PLOOP_ERR_IO, errno, "mkdir %s: %s", tmp, strerror(errno));
    *s = '/';
  }
  if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
    return ploop_set_error(PLOOP_ERR_IO, errno, "mkdir %s: %s", tmp, strerror(errno));
  return 0;
}

/* One attach/umount at a time on this host: they share loop devices and
 * the state directory.  Returns the lock fd. */
int attach_lock(void)
{
  if (mkdir_p(PLOOP_ATTACH_RUN_DIR) < 0)
    return -1;
  int fd = open(PLOOP_ATTACH_RUN_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s/.lock: %s", PLOOP_ATTACH_RUN_DIR, strerror(errno));
  while (flock(fd, LOCK_EX) < 0) {
    if (errno != EINTR) {
      int e = errno;
      close(fd);
      return ploop_set_error(PLOOP_ERR_IO, e, "lock %s: %s", PLOOP_ATTACH_RUN_DIR, strerror(e));
    }
  }
  return fd;
}

void attach_unlock(int fd)
{
  if (fd >= 0)
    close(fd);
}

/* ---- state files ------------------------------------------------------ */

int attach_state_write(const char *path, const struct ploop_attach_info *i)
{
  char tmp[PATH_MAX + 8];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "we");
  if (!f)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", tmp, strerror(errno));
  fprintf(f,
          "disk_dir=%s\nsnapshot=%s\ndevice=%s\nkind=%s\nfuse_dir=%s\nmount_point=%s\n"
          "fstype=%s\ncontrol_socket=%s\nnbd_socket=%s\npid=%d\nreadonly=%d\n",
          i->disk_dir, i->snapshot_guid, i->device, i->kind, i->fuse_dir, i->mount_point,
          i->fstype, i->control_socket, i->nbd_socket, (int)i->daemon_pid, i->readonly ? 1 : 0);
  if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
    int e = errno;
    fclose(f);
    unlink(tmp);
    return ploop_set_error(PLOOP_ERR_IO, e, "%s: %s", tmp, strerror(e));
  }
  fclose(f);
  if (rename(tmp, path) < 0) {
    int e = errno;
    unlink(tmp);
    return ploop_set_error(PLOOP_ERR_IO, e, "rename %s: %s", tmp, strerror(e));
  }
  return 0;
}


/* True when PID runs ploop-nbd (a pid file may outlive its process). */
bool attach_daemon_alive(pid_t pid, const char *fuse_dir)
{
  if (pid <= 0 || kill(pid, 0) < 0)
    return false;
  char link[64], exe[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
  ssize_t n = readlink(link, exe, sizeof(exe) - 1);
  if (n <= 0)
    return false; /* a zombie has no exe any more */
  exe[n] = 0;
  const char *base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  if (strncmp(base, "ploop-nbd", 9) != 0)
    return false;
  /* The pid may since belong to the daemon of another attachment: ours
   * was started with our FUSE directory on its command line. */
  char path[64], args[8192];
  snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t len = read(fd, args, sizeof(args) - 1);
  close(fd);
  if (len <= 0)
    return false;
  args[len] = 0;
  for (ssize_t k = 0; k < len; k += (ssize_t)strlen(args + k) + 1)
    if (strcmp(args + k, fuse_dir) == 0)
      return true;
  return false;
}

int attach_state_read(const char *path, struct ploop_attach_info *i)
{
  FILE *f = fopen(path, "re");
  if (!f)
    return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "%s: %s", path, strerror(errno));
  memset(i, 0, sizeof(*i));
  char line[PATH_MAX + 64];
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    char *eq = strchr(line, '=');
    if (!eq)
      continue;
    *eq = 0;
    const char *k = line, *v = eq + 1;
    if (!strcmp(k, "disk_dir"))
      attach_copy_field(i->disk_dir, sizeof(i->disk_dir), v);
    else if (!strcmp(k, "snapshot"))
      attach_copy_field(i->snapshot_guid, sizeof(i->snapshot_guid), v);
    else if (!strcmp(k, "device"))
      attach_copy_field(i->device, sizeof(i->device), v);
    else if (!strcmp(k, "kind"))
      attach_copy_field(i->kind, sizeof(i->kind), v);
    else if (!strcmp(k, "fuse_dir"))
      attach_copy_field(i->fuse_dir, sizeof(i->fuse_dir), v);
    else if (!strcmp(k, "mount_point"))
      attach_copy_field(i->mount_point, sizeof(i->mount_point), v);
    else if (!strcmp(k, "fstype"))
      attach_copy_field(i->fstype, sizeof(i->fstype), v);
    else if (!strcmp(k, "control_socket"))
      attach_copy_field(i->control_socket, sizeof(i->control_socket), v);
    else if (!strcmp(k, "nbd_socket"))
      attach_copy_field(i->nbd_socket, sizeof(i->nbd_socket), v);
    else if (!strcmp(k, "pid"))
      i->daemon_pid = (pid_t)atoi(v);
    else if (!strcmp(k, "readonly"))
      i->readonly = atoi(v) != 0;
  }
  fclose(f);
  i->daemon_alive = attach_daemon_alive(i->daemon_pid, i->fuse_dir);
  return 0;
}

int ploop_attach_list(struct ploop_attach_info **out, size_t *n)
{
  *out = NULL;
  *n = 0;
  DIR *d = opendir(PLOOP_ATTACH_RUN_DIR);
  if (!d)
    return errno == ENOENT ? 0
                           : ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", PLOOP_ATTACH_RUN_DIR,
                                         strerror(errno));
  struct dirent *e;
  size_t cap = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 7 || strcmp(e->d_name + len - 6, ".state") != 0)
      continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      struct ploop_attach_info *p = realloc(*out, cap * sizeof(**out));
      if (!p) {
        closedir(d);
        free(*out);
        *out = NULL;
        *n = 0;
        return ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
      }
      *out = p;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", PLOOP_ATTACH_RUN_DIR, e->d_name);
    if (attach_state_read(path, &(*out)[*n]) == 0)
      (*n)++;
  }
  closedir(d);
  return 0;
}

/* WHAT: a device node, a mount point, a disk directory or its XML.  A disk
 * with several attachments (top + snapshots) resolves to its top. */
/* How well attachment A matches WHAT (0: not at all); live ones win, so a
 * stale record of a crashed attachment never shadows a live one. */
/* rbd:POOL/NAME given without ?conf= names the disk attached with one. */
static bool same_rbd_disk(const char *attached, const char *given)
{
  size_t n = strlen(given);
  return !strncmp(given, "rbd:", 4) && !strchr(given, '?') && !strncmp(attached, given, n) &&
         !strncmp(attached + n, "?conf=", 6);
}

static int match_score(const struct ploop_attach_info *a, const char *real, const char *dir)
{
  int score = 0;
  if ((a->mount_point[0] && strcmp(a->mount_point, real) == 0) ||
      (a->device[0] && strcmp(a->device, real) == 0))
    score = 3;
  else if (dir[0] && (strcmp(a->disk_dir, dir) == 0 || same_rbd_disk(a->disk_dir, dir)))
    score = a->snapshot_guid[0] ? 1 : 2;
  return score ? score * 2 + (a->daemon_alive ? 1 : 0) : 0;
}

int attach_state_find(const char *what, struct ploop_attach_info *out)
{
  struct ploop_attach_info *all;
  size_t n;
  if (ploop_attach_list(&all, &n) < 0)
    return -1;
  char real[PATH_MAX] = "", dir[PATH_MAX] = "";
  struct stat st;
  if (!strncmp(what, "rbd:", 4)) { /* a disk in Ceph, by its name */
    attach_copy_field(real, sizeof(real), what);
    attach_copy_field(dir, sizeof(dir), what);
  } else if (!realpath(what, real))
    attach_copy_field(real, sizeof(real), what);
  if (dir[0]) {
  } else if (stat(what, &st) == 0) {
    if (!S_ISBLK(st.st_mode)) {
      char tmp[PATH_MAX];
      attach_copy_field(tmp, sizeof(tmp), real);
      attach_copy_field(dir, sizeof(dir), S_ISDIR(st.st_mode) ? real : dirname(tmp));
    }
  } else if (what[0] == '/') {
    /* The disk's directory may be gone already (removed under a crashed
     * attachment): match its recorded path as text. */
    attach_copy_field(dir, sizeof(dir), what);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
      dir[--len] = 0;
    const char *xml = "/" PLOOP_DESCRIPTOR_NAME;
    if (len > strlen(xml) && strcmp(dir + len - strlen(xml), xml) == 0)
      dir[len - strlen(xml)] = 0;
    attach_copy_field(real, sizeof(real), dir);
  }
  ssize_t found = -1;
  int best = 0;
  for (size_t k = 0; k < n; k++) {
    int sc = match_score(&all[k], real, dir);
    if (sc > best) {
      best = sc;
      found = (ssize_t)k;
    }
  }
  if (found >= 0)
    *out = all[found];
  free(all);
  if (found < 0)
    return ploop_set_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: not attached", what);
  return 0;
}

int ploop_attach_find(const char *what, struct ploop_attach_info *out)
{
  return attach_state_find(what, out);
}

