/* --volume HOST:CT[:ro]: host files or directories bound into the
 * container. The child clones each host tree (open_tree) while host paths
 * are still reachable, and attaches it (move_mount) after pivot_root, where
 * the target path can only resolve inside the container's root. */
#ifndef CT_VOLUME_H
#define CT_VOLUME_H

#include <stdbool.h>
#include <stddef.h>

#define CT_MAX_VOLUMES 16

struct ct_volume {
  char *host, *ct;  /* absolute paths */
  bool ro;
};

struct ct_volumes {
  size_t n;
  struct ct_volume v[CT_MAX_VOLUMES];
};

#define CT_VOLUME_LONGOPTS {"volume", required_argument, NULL, 0x160}

/* Handles option OPT: 1 ours, 0 not, -1 bad value (usage error set). */
int ct_volume_opt(int opt, const char *arg, struct ct_volumes *vs);
/* Child, before pivot: a detached copy of each host tree (read-only, nodev
 * and nosuid applied) into FDS. */
int ct_volumes_open(const struct ct_volumes *vs, int *fds);
/* Child, after pivot: makes each target (directory or file) and attaches
 * the copy there; closes FDS. */
int ct_volumes_attach(const struct ct_volumes *vs, int *fds);

#endif
