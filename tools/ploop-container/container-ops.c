/* freeze/thaw, snapshot and the facts `list` shows. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup.h"
#include "container.h"
#include "disk.h"
#include "error.h"
#include "util.h"

static int running(const char *name, struct ct_state *st)
{
  if (ct_require(name) < 0)
    return -1;
  if (ct_state_load(name, st) <= 0 || !ct_state_running(st))
    return ct_state_fail(CT_EXIT_STOPPED, "container %s is not running", name);
  return 0;
}

int container_freeze(const char *name, bool frozen)
{
  struct ct_state st;
  if (running(name, &st) < 0)
    return -1;
  /* A container frozen in a migration's in-doubt window may run elsewhere. */
  cleanup_free char *mig = ct_path(name, "migration");
  if (!frozen && access(mig, F_OK) == 0)
    return ct_usage("%s is frozen by a migration: settle it with `migrate --resolve %s`", name, name);
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  int rc = cg_freeze(&cg, frozen);
  cg_free(&cg);
  return rc < 0 ? ct_wrap("%s %s", frozen ? "freeze" : "thaw", name) : 0;
}

int container_snapshot(const char *name, char *id, size_t idlen)
{
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  struct ct_state st;
  bool run = ct_state_load(name, &st) > 0 && ct_state_running(&st);
  if (!run) {
    cleanup_close int lock = ct_lock(name);
    if (lock < 0)
      return -1;
    return disk_snapshot(diskdir, disk_is_mounted(mnt) ? mnt : NULL, id, idlen);
  }
  /* Processes first (no new writes), then the filesystem (FIFREEZE inside
   * disk_snapshot), then the instant disk snapshot; thaw whatever happens. */
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  bool was_frozen = false;
  cg_is_frozen(&cg, &was_frozen);
  int rc = was_frozen ? 0 : cg_freeze(&cg, true);
  if (rc == 0)
    rc = disk_snapshot(diskdir, mnt, id, idlen);
  if (!was_frozen && cg_freeze(&cg, false) < 0 && rc == 0)
    rc = -1;
  cg_free(&cg);
  return rc < 0 ? ct_wrap("snapshot %s", name) : 0;
}

int container_info(const char *name, struct container_info *info)
{
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%s", name);
  info->state = "stopped";
  info->last_status = -1;
  cleanup_free char *diskdir = ct_path(name, "disk");
  disk_usage(diskdir, &info->disk_bytes);
  info->disk = disk_backend(diskdir);
  cleanup_free char *last = ct_path(name, "last-exit");
  char buf[256];
  if (access(last, F_OK) == 0 && read_file(last, buf, sizeof buf) > 0) {
    sscanf(buf, "status=%d", &info->last_status);
    char *oom = strstr(buf, "oom_kills=");
    if (oom)
      info->oom_kills = strtoull(oom + 10, NULL, 10);
    char *pid1 = strstr(buf, "oom_pid1=");
    info->oom_pid1 = pid1 && pid1[9] == '1';
    char *v = strstr(buf, "oom_victims=");
    if (v)
      snprintf(info->oom_victims, sizeof info->oom_victims, "%.*s", (int)strcspn(v + 12, "\n"), v + 12);
  }
  struct ct_state st;
  if (ct_state_load(name, &st) <= 0 || !ct_state_running(&st))
    return 0;
  info->state = "running";
  info->pid = st.init_pid;
  /* The monitor holds the lock exclusively for the container's whole life. */
  cleanup_free char *lockpath = ct_path(name, "lock");
  cleanup_close int lfd = open(lockpath, O_RDONLY | O_CLOEXEC);
  if (lfd >= 0 && flock(lfd, LOCK_SH | LOCK_NB) == 0) {
    info->monitor_gone = true;
    flock(lfd, LOCK_UN);
  }
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return 0;
  bool frozen = false;
  if (cg_is_frozen(&cg, &frozen) == 0 && frozen)
    info->state = "frozen";
  info->mem_known = cg_memory(&cg, &info->mem_usage, &info->mem_limit) == 0;
  uint64_t oom = 0;
  if (cg_oom_kills(&cg, &oom) == 0)
    info->oom_kills = oom;
  cg_free(&cg);
  return 0;
}
