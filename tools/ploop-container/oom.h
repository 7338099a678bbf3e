/* Which processes the kernel OOM-killed in a container: the kernel log's
 * "oom-kill:" records name the victim's pid and memory cgroup, so a later
 * SIGKILL of PID 1 (by stop) is not taken for an OOM kill. */
#ifndef CT_OOM_H
#define CT_OOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup.h"

/* Scans /dev/kmsg for OOM kills in CG's memory cgroup since SINCE_TICKS
 * (a /proc/PID/stat start time, clock ticks since boot). *INIT_KILLED: one
 * of them was INIT_PID (host view); VICTIMS gets "comm(pid) ..." (may be
 * cut short). Returns the number found, -1 when the log cannot be read. */
int ct_oom_victims(const struct ct_cgroup *cg, uint64_t since_ticks, pid_t init_pid,
                   bool *init_killed, char *victims, size_t len);

#endif
