/* Container operations the verbs call (crun's libcrun layer in miniature):
 * each one leaves nothing half-made behind when it fails. */
#ifndef CT_CONTAINER_H
#define CT_CONTAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

/* RAW_DISK: the raw-image-on-loop alternative instead of a ploop disk.
 * RBD (or NULL): the ploop disk rbd:POOL/NAME[?conf=PATH] in Ceph, made
 * unless it exists (destroy removes it only when create made it). */
int container_create(const char *name, uint64_t disk_bytes, const char *from, bool raw_disk, const char *rbd);
int container_destroy(const char *name);
/* Runs the container in the foreground of this process (the monitor).
 * LOCKFD: the container lock, already held. READY_FD >= 0: written "ok" once
 * PID 1 runs, or the error message, then closed (used by `start`).
 * Returns the container's exit status (>= 0) or -1 when it could not start. */
int container_run(const char *name, int lockfd, const struct ct_run_opts *o, char *const *argv,
                  int ready_fd);
/* The monitor's life once PID 1 (our child PID) runs and the state file is
 * written, shared by run/start and restore: "ok" on READY_FD (if >= 0),
 * signal forwarding and pty relay until PID 1 exits, the OOM report, then
 * cgroups (CG, freed), state and, unless KEPT mounted, the disk go. Returns
 * the container's exit status. */
struct ct_cgroup;
int container_supervise(const char *name, struct ct_cgroup *cg, pid_t pid, int pty_master,
                        bool kept, const struct ct_run_opts *o, int ready_fd);
/* Cleans what a monitor that died (SIGKILL, crash) left: cgroups, mount,
 * state. Call with the lock held. */
int container_recover(const char *name);
int container_stop(const char *name, unsigned timeout_s);
/* exec's options: NULL fields keep the defaults (root, /, the base environment). */
struct ct_exec_opts {
  char *const *env;  /* "K=V" each, added to or replacing the base environment */
  size_t nenv;
  bool user_set;
  uint32_t uid, gid;
  const char *cwd;
};
int container_exec(const char *name, char *const *argv, const struct ct_exec_opts *eo);
int container_freeze(const char *name, bool frozen);
int container_snapshot(const char *name, char *id, size_t idlen);
/* `mount NAME`: keeps the disk mounted across runs (start latency without
 * the attach). With SNAPSHOT: mounts that snapshot read-only on DIR. */
int container_mount(const char *name, const char *snapshot, const char *dir);
int container_umount(const char *name, const char *dir);

/* One line of `list`. */
struct container_info {
  char name[CT_NAME_MAX + 1];
  const char *state;  /* running, frozen, stopped */
  int pid;            /* 0 when stopped */
  uint64_t mem_usage, mem_limit, disk_bytes, oom_kills;
  bool mem_known;     /* the memory controller answered */
  const char *disk;   /* backend: ploop or raw */
  int last_status;    /* -1 when unknown */
  bool oom_pid1;      /* the last run's PID 1 was the OOM killer's victim */
  char oom_victims[256]; /* "comm(pid) ..." of the last run's OOM kills */
  bool monitor_gone;  /* running, but its monitor died (only `stop` ends it) */
};
int container_info(const char *name, struct container_info *info);

#endif
