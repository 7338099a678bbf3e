/* Starts the container's PID 1: clone into new namespaces, join the cgroup,
 * enter the rootfs, drop privileges, exec. Parent and child talk over a
 * SOCK_SEQPACKET pair (crun-style): the child reports a setup error as a
 * message, passes the pty master with SCM_RIGHTS, and exec closes it. */
#ifndef CT_LAUNCH_H
#define CT_LAUNCH_H

#include <stdbool.h>
#include <sys/types.h>

#include "cgroup.h"
#include "config.h"
#include "security.h"

/* Host range a --userns container's ids map to (0..65535 -> 100000..165535). */
#define CT_USERNS_HOST_BASE 100000u
#define CT_USERNS_SIZE 65536u

struct ct_launch {
  const char *rootfs;      /* mounted root filesystem (host path) */
  char *const *argv;       /* command; argv[0] is looked up in the container's PATH */
  const char *hostname;
  enum ct_net net;
  bool userns;
  bool tty;                /* give the container a pty from its own devpts */
  const struct ct_cgroup *cg;
  struct ct_sec sec;       /* capabilities, seccomp, read-only root */
  const struct ct_netcfg *netcfg;  /* with CT_NET_VETH */
  const struct ct_volumes *vol;    /* bind volumes, NULL for none */
  bool init;               /* --init: a reaper PID 1 runs the command (init.h) */
};

struct ct_process {
  pid_t pid;               /* PID 1 of the container, host view */
  int pty_master;          /* -1 unless tty */
  bool exec_failed;        /* on error: setup went fine, the command could not run */
};

/* Returns 0 once the command has been exec'd (the setup error otherwise,
 * with the child reaped). The caller must have blocked the signals it wants
 * to forward; the child restores an empty mask before exec. */
int ct_launch(const struct ct_launch *l, struct ct_process *p);

/* Brings up lo of the caller's network namespace. */
int ct_loopback_up(void);

#endif
