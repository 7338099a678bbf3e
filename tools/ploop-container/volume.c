/* Bind volumes (see volume.h). */
#include "volume.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "util.h"

static bool has_dotdot(const char *p)
{
  for (const char *s = p; (s = strstr(s, "..")); s += 2)
    if ((s == p || s[-1] == '/') && (s[2] == 0 || s[2] == '/'))
      return true;
  return false;
}

int ct_volume_opt(int opt, const char *arg, struct ct_volumes *vs)
{
  if (opt != 0x160)
    return 0;
  if (vs->n >= CT_MAX_VOLUMES)
    return ct_usage("--volume: at most %d volumes", CT_MAX_VOLUMES);
  char *s = strdup(arg);
  char *ct = s ? strchr(s, ':') : NULL;
  if (!ct) {
    free(s);
    return ct_usage("--volume: '%s' is not HOST:CONTAINER[:ro]", arg);
  }
  *ct++ = 0;
  char *mode = strchr(ct, ':');
  if (mode)
    *mode++ = 0;
  int rc = 0;
  struct stat st;
  if (s[0] != '/' || ct[0] != '/')
    rc = ct_usage("--volume %s: both paths must be absolute", arg);
  else if (mode && strcmp(mode, "ro") != 0 && strcmp(mode, "rw") != 0)
    rc = ct_usage("--volume %s: '%s' is not ro or rw", arg, mode);
  else if (strcmp(ct, "/") == 0 || has_dotdot(ct) || strlen(ct) > 1024)
    rc = ct_usage("--volume %s: the container path must be below / with no '..'", arg);
  else if (stat(s, &st) < 0)
    rc = ct_usage("--volume %s: %s: %s", arg, s, strerror(errno));
  else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    rc = ct_usage("--volume %s: %s is not a directory or a regular file", arg, s);
  if (rc < 0) {
    free(s);
    return -1;
  }
  vs->v[vs->n++] = (struct ct_volume){.host = s, .ct = ct, .ro = mode && strcmp(mode, "ro") == 0};
  return 1;
}

int ct_volumes_open(const struct ct_volumes *vs, int *fds)
{
  for (size_t i = 0; i < vs->n; i++) {
    fds[i] = open_tree(AT_FDCWD, vs->v[i].host, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (fds[i] < 0)
      return ct_fail(errno, "--volume: clone %s", vs->v[i].host);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                          (vs->v[i].ro ? MOUNT_ATTR_RDONLY : 0)};
    if (mount_setattr(fds[i], "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
      return ct_fail(errno, "--volume: restrict %s", vs->v[i].host);
  }
  return 0;
}

/* mkdir -p of PATH's directories (all of them when DIR, else up to the last). */
static int make_path(const char *path, bool dir)
{
  cleanup_free char *p = strdup(path);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s)
      continue;
    char c = *s;
    *s = 0;
    if ((c || dir) && mkdir(p, 0755) < 0 && errno != EEXIST)
      return ct_fail(errno, "--volume: mkdir %s in the container", p);
    if (!c)
      break;
    *s = c;
  }
  if (!dir) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
      return ct_fail(errno, "--volume: create %s in the container", path);
    close(fd);
  }
  return 0;
}

int ct_volumes_attach(const struct ct_volumes *vs, int *fds)
{
  int rc = 0;
  for (size_t i = 0; i < vs->n; i++) {
    struct stat st;
    if (rc == 0 && fstat(fds[i], &st) < 0)
      rc = ct_fail(errno, "--volume: stat %s", vs->v[i].host);
    if (rc == 0)
      rc = make_path(vs->v[i].ct, S_ISDIR(st.st_mode));
    if (rc == 0 && move_mount(fds[i], "", AT_FDCWD, vs->v[i].ct, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      rc = ct_fail(errno, "--volume: attach %s on %s", vs->v[i].host, vs->v[i].ct);
    close(fds[i]);
  }
  return rc;
}
