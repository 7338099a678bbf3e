/* Helpers shared by attach.c, attach-online.c and attach-fs.c (not installed). */
#ifndef PLOOP_ATTACH_INTERNAL_H
#define PLOOP_ATTACH_INTERNAL_H

#include "attach.h"

/* Runs ARGV (argv[0] looked up in PATH plus /sbin:/usr/sbin), waits.  Returns
 * the exit status (0..255), or -1 with an error set when it could not run.
 * The last non-empty line the program printed goes into MSG (may be NULL). */
int attach_run(char *const argv[], char *msg, size_t msglen);

/* ---- attach-state.c ---- */
/* The host-wide lock of attach/umount (returns the fd), and its release. */
int attach_lock(void);
void attach_unlock(int fd);
int attach_state_write(const char *path, const struct ploop_attach_info *i);
int attach_state_read(const char *path, struct ploop_attach_info *i);
/* True when PID is a running ploop-nbd serving FUSE_DIR (pid files outlive
 * processes, and pids are reused). */
bool attach_daemon_alive(pid_t pid, const char *fuse_dir);
/* Copies V into DST (LEN bytes), truncating. */
void attach_copy_field(char *dst, size_t len, const char *v);
/* Lookup of the state of one attachment (by disk dir, mount point, device). */
int attach_state_find(const char *what, struct ploop_attach_info *out);

/* The filesystem type mounted on MOUNT_POINT, "" if it is not a mount point. */
void attach_mounted_fstype(const char *mount_point, char *type, size_t len);

#endif
