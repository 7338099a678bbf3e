/* The supervisor loop of `run`/`start`: forwards signals to the container's
 * PID 1, relays its pty to our terminal, and returns its exit status. */
#ifndef CT_MONITOR_H
#define CT_MONITOR_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

/* Signals the monitor forwards; block them before ct_launch(). */
void monitor_signals(sigset_t *set);
/* Waits for PID to end. PTY_MASTER >= 0: relay it to stdin/stdout (stdin in
 * raw mode while we run). Returns the exit status shell-style: the code, or
 * 128+signal when killed. */
int monitor_wait(pid_t pid, int pty_master);

/* Forks the detached monitor of container NAME (start, restore, a
 * migration's start). The child (returns 0) leads a new session with stdin
 * from /dev/null and stdout/stderr appended to NAME's console.log; with
 * CLOSE_OTHERS every fd but LOCK and *REPORT is closed (a caller's sockets
 * are not the monitor's). It writes "ok" or "E<message>" on *REPORT. The
 * parent gets the child's pid and reads the report from *REPORT_IN. -1 on
 * error (message set). */
pid_t monitor_fork(const char *name, int lock, bool close_others, int *report_in, int *report);
/* The parent's side for a plain start: 0 once the monitor reported "ok",
 * -1 with its message (or "died before the container started"). Closes FD. */
int monitor_started(const char *name, int fd);

#endif
