/* The container's cgroups: v1 (legacy), v2 (unified) or hybrid, detected at
 * run time as crun does. VSwap-style limits (RAM and swap separately), a pids
 * limit, freezer, OOM detection, usage for `list`, kill-all. */
#ifndef CT_CGROUP_H
#define CT_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum cg_mode { CG_LEGACY, CG_HYBRID, CG_UNIFIED };

struct ct_cgroup {
  enum cg_mode mode;
  /* Absolute directories of this container's cgroup; NULL if not used. In
   * unified mode only `unified` is set; in hybrid `unified` is the
   * controller-less v2 tree (used for tracking and cgroup.kill). */
  char *memory, *pids, *freezer, *unified;
  /* v1 only, NULL when the host has not mounted them (a limit that needs
   * one then fails); cpuacct may be the same directory as cpu. */
  char *cpu, *cpuacct, *cpuset, *blkio;
  bool skip_optional;  /* cg_create leaves the four above out (cg_skip_optional) */
};
#define CG_NDIRS 8

const char *cg_mode_name(enum cg_mode m);
/* Fills CG's paths for container NAME (nothing is created). */
int cg_init(struct ct_cgroup *cg, const char *name);
void cg_free(struct ct_cgroup *cg);
/* Creates the directories and writes the limits; on error removes what it
 * made. MEMORY 0 = no limit; SWAP bytes on top of MEMORY (used only when
 * MEMORY != 0; SWAP_SET false then means "no swap" too). */
int cg_create(struct ct_cgroup *cg, uint64_t memory, uint64_t swap, uint64_t pids);
/* v1: cg_create leaves the optional hierarchies (cpu, cpuacct, cpuset,
 * blkio) out; cg_destroy still removes them if `update` made them: a run without CPU or I/O limits saves
 * their mkdir, join and rmdir (the rmdirs wait for the kernel, ~1-5 ms
 * each). `update` makes them later with cg_ensure_optional. */
void cg_skip_optional(struct ct_cgroup *cg);
/* v1: makes the optional groups a running container lacks and moves all
 * its tasks into them. No-op in v2 (one tree). */
int cg_ensure_optional(const struct ct_cgroup *cg);
/* Moves PID (0 = the caller) into every hierarchy of the container (the
 * optional v1 ones where they exist). */
int cg_attach(const struct ct_cgroup *cg, pid_t pid);
/* True when the container's cgroup exists (it is made by run, removed by its monitor). */
bool cg_exists(const struct ct_cgroup *cg);
/* Kills every task left in it (cgroup.kill, else freeze + kill + thaw), then
 * removes the directories, waiting briefly for tasks to go. */
int cg_destroy(struct ct_cgroup *cg);
int cg_kill_all(const struct ct_cgroup *cg);
/* FROZEN / THAWED; waits until the kernel reports the state reached. */
int cg_freeze(const struct ct_cgroup *cg, bool frozen);
int cg_is_frozen(const struct ct_cgroup *cg, bool *frozen);
/* Number of OOM kills the kernel did in this cgroup (v1 oom_control
 * oom_kill, v2 memory.events oom_kill); also the v1 failcnt. */
int cg_oom_kills(const struct ct_cgroup *cg, uint64_t *kills);
/* Current RAM use and limit (UINT64_MAX = none). */
int cg_memory(const struct ct_cgroup *cg, uint64_t *usage, uint64_t *limit);
/* Swap in use by the container (memsw - mem in v1, memory.swap.current in v2). */
int cg_swap_usage(const struct ct_cgroup *cg, uint64_t *swap);

#endif
