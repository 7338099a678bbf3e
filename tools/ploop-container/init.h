/* `--init`: a tiny PID 1 (as tini, or bwrap's do_init) for commands that
 * were not written to be one: it reaps every orphan that is reparented to
 * it and forwards signals to the command, which then gets SIGTERM with its
 * default action (a PID 1 without a handler never would). */
#ifndef CT_INIT_H
#define CT_INIT_H

/* Called instead of exec in the container's PID 1, after every privilege
 * was dropped. Forks; the child execs ARGV (on failure it reports through
 * SOCK with REPORT_EXEC_FAILURE, which does not return); this process closes
 * SOCK (so the exec alone closes it for the parent), then reaps and
 * forwards until the command exits, and exits with its status
 * (128+signal when killed). Never returns. */
__attribute__((noreturn)) void ct_init_run(char *const *argv, int sock,
                                           void (*report_exec_failure)(int sock));

#endif
