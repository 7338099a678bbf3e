/* The supervisor loop of `run`/`start`: forwards signals to the container's
 * PID 1, relays its pty to our terminal, and returns its exit status. */
#ifndef CT_MONITOR_H
#define CT_MONITOR_H

#include <signal.h>
#include <sys/types.h>

/* Signals the monitor forwards; block them before ct_launch(). */
void monitor_signals(sigset_t *set);
/* Waits for PID to end. PTY_MASTER >= 0: relay it to stdin/stdout (stdin in
 * raw mode while we run). Returns the exit status shell-style: the code, or
 * 128+signal when killed. */
int monitor_wait(pid_t pid, int pty_master);

#endif
