/* A container on disk: its directory under the state root, its persistent
 * config (set at create) and its runtime state (written by the monitor while
 * it runs). Both are flat "key=value" files. */
#ifndef CT_CONFIG_H
#define CT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "net.h"
#include "resources.h"
#include "security.h"
#include "volume.h"

#define CT_DEFAULT_ROOT "/var/lib/ploop-container"
#define CT_NAME_MAX 64

/* Process-wide state root (--root); set once by main(). */
extern const char *ct_root;

enum ct_net { CT_NET_NONE = 0, CT_NET_HOST = 1, CT_NET_VETH = 2 };

/* What `create` decided; never changes afterwards. */
struct ct_config {
  char name[CT_NAME_MAX + 1];
  uint64_t disk_bytes;
  char source[256];  /* "busybox" or the tarball path, for `list`/humans */
};

/* Limits and namespaces of one run (flags of run/start). */
struct ct_run_opts {
  uint64_t memory;  /* bytes, 0 = no limit */
  uint64_t swap;    /* bytes of swap on top of memory (VSwap) */
  bool swap_set;
  uint64_t pids;    /* max tasks, 0 = no limit */
  char hostname[65];
  enum ct_net net;
  bool userns;
  bool detach;
  bool init;        /* --init: a reaper PID 1 runs the command */
  struct ct_res res;  /* CPU, cpuset and I/O limits */
  struct ct_sec sec;  /* capabilities, seccomp, read-only root */
  struct ct_netcfg netcfg;  /* --net veth: addresses, bridge */
  struct ct_volumes vol;    /* --volume HOST:CT[:ro] */
  bool adopt_mount; /* the disk is mounted already, but for this run (migrate) */
};

/* Written by the monitor after launch, removed when it has cleaned up. */
struct ct_state {
  pid_t monitor_pid;
  pid_t init_pid;           /* PID 1 of the container, as the host sees it */
  uint64_t init_start;      /* its start time: guards against pid reuse */
  bool userns;
  bool kept_mounted;        /* disk was mounted before run (mount verb) */
  uint64_t memory, swap, pids;
};

int ct_check_name(const char *name);
/* ROOT/NAME[/SUB], malloc'd. */
char *ct_path(const char *name, const char *sub);
bool ct_exists(const char *name);
/* Fails with CT_EXIT_NOTFOUND and "no container NAME" when it does not exist. */
int ct_require(const char *name);

int ct_config_save(const struct ct_config *c);
int ct_config_load(const char *name, struct ct_config *c);

int ct_state_save(const char *name, const struct ct_state *s);
/* Returns 1 if a state file exists and was read, 0 if none, -1 on error. */
int ct_state_load(const char *name, struct ct_state *s);
void ct_state_remove(const char *name);
/* Running = state present and its PID 1 still alive (same start time). */
bool ct_state_running(const struct ct_state *s);

/* The container's lock, held by create/destroy/mount and by the monitor for
 * the container's whole life. Returns the fd, or -1 with CT_EXIT_BUSY when
 * someone else holds it (message says "NAME is running" or "busy"). */
int ct_lock(const char *name);

/* Validates and parses the shared run/start limits (--memory, --swap, --pids). */
int ct_run_opts_check(struct ct_run_opts *o);

/* Keys other modules keep in ROOT/NAME/FILE ("config", "state"): read one
 * (1 found, 0 absent, -1 error); set several "key=value" ("key=" removes),
 * keeping every other line. ct_config_save keeps them too. */
int ct_kv_get(const char *name, const char *file, const char *key, char *val, size_t len);
int ct_kv_set(const char *name, const char *file, const char *const *kv, size_t n, bool durable);

#endif
