/* Process checkpoint/restore of a running container with CRIU (the
 * `criu` binary, as runc --criu uses it): what `checkpoint`, `restore` and
 * `migrate` call. The disk is not part of it: a checkpoint holds the
 * processes only, and restore runs them again on the container's own disk. */
#ifndef CT_CRIU_H
#define CT_CRIU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What install-criu.sh installs: CRIU >= 4.2 from a side root. */
#define CT_CRIU_WRAPPER "/usr/local/lib/ploop-container/criu"
#define CT_CRIU_MIN_MAJOR 4
#define CT_CRIU_MIN_MINOR 2

/* Finds a working CRIU: OPT_PATH when given (and then only it), else
 * CT_CRIU_WRAPPER, else `criu` on PATH. Working = version >= 4.2 and
 * `criu check` says "Looks good" (~0.1 s: call it before freezing).
 * Returns 0 with *BIN malloc'd, or -1 with one line in WHY (and the same
 * as the error) saying why there is none. */
int ct_criu_find(const char *opt_path, char **bin, char *why, size_t whylen);

/* Where the time of a checkpoint or restore went, in nanoseconds. */
struct ct_criu_times {
  uint64_t criu_ns;      /* the criu dump / criu restore process, wall clock */
  uint64_t criu_cpu_ns;  /* its CPU time (user + system; not its children's) */
  uint64_t total_ns;  /* the whole call (restore: until the monitor said "ok") */
};

/* Dumps the process tree of running container NAME into IMAGES_DIR
 * (created if missing; on tmpfs for speed). Works on a frozen container
 * (cgroup freezer) and leaves it frozen. LEAVE_RUNNING false: the
 * processes end after the dump and this returns once the monitor has
 * cleaned up (disk unmounted, cgroups gone); true: they go on (a frozen
 * container stays frozen: migrate thaws it on abort, stops it on commit).
 * TIMES may be NULL. */
int ct_checkpoint(const char *name, const char *criu_bin, const char *images_dir,
                  bool leave_running, struct ct_criu_times *times);

/* Runs the processes of IMAGES_DIR again as container NAME (stopped, its
 * disk holding the checkpoint's filesystem state): a detached monitor (as
 * `start`) mounts the disk, makes the cgroups with the checkpoint's
 * limits, and runs `criu restore` as its child so the restored PID 1
 * becomes the monitor's own child. Output goes to ROOT/NAME/console.log.
 * Returns 0 once the container runs again. TIMES may be NULL.
 * LAZY_PAGES: post-copy; the processes run before their memory is back
 * (~64 MiB costs ~0.3 s of page faults on this VM) and a `criu
 * lazy-pages` daemon fills it from IMAGES_DIR on first touch or in the
 * background: IMAGES_DIR must stay until ct_restore_lazy_wait() returned. */
int ct_restore(const char *name, const char *criu_bin, const char *images_dir, bool lazy_pages,
               struct ct_criu_times *times);
/* ct_restore of a container whose disk the caller mounted for this run
 * (a migration's destination mounts it before COMMIT): the monitor owns
 * that mount, and unmounts it when the container stops or the restore
 * fails. */
int ct_restore_adopt(const char *name, const char *criu_bin, const char *images_dir);
/* After a lazy restore: waits until all memory is back (the daemon is
 * done with IMAGES_DIR). 0 at once for a restore that was not lazy. */
int ct_restore_lazy_wait(const char *images_dir, unsigned timeout_ms);

#endif
