/* Error reporting for ploop-container: functions return -1 and leave a
 * one-line message here; callers may prefix context. main() prints it; the
 * only other printers are the monitor (what happens after PID 1 started,
 * e.g. an OOM kill) and exec (which leaves through _exit). */
#ifndef CT_ERROR_H
#define CT_ERROR_H

#include <stddef.h>

/* Set the message (printf-style); ERRNUM != 0 appends ": strerror(ERRNUM)".
 * Always returns -1 so callers can `return ct_fail(...)`. */
int ct_fail(int errnum, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "context: ". Returns -1. */
int ct_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* As ct_fail, but the exit code says "bad usage" (2). */
int ct_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ct_error(void);
/* Exit code class of the last error (see main.c usage text). */
int ct_error_code(void);
void ct_set_error_code(int code);

enum { CT_EXIT_FAIL = 1, CT_EXIT_USAGE = 2, CT_EXIT_NOTFOUND = 3, CT_EXIT_BUSY = 4 };
/* The container is not in the state the verb needs: running where it must
 * not be (exists, frozen, mounted) is CT_EXIT_BUSY; stopped where it must
 * run (not running, not mounted) is CT_EXIT_STOPPED. */
enum { CT_EXIT_STOPPED = 5 };
/* As ct_fail with no errno, and the exit code CODE. */
int ct_state_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
