/* The --init PID 1 (see init.h). */
#include "init.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"

void ct_init_run(char *const *argv, int sock, void (*report_exec_failure)(int sock))
{
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  /* Blocked signals are queued, even for a namespace's init; sigwaitinfo
   * then takes them one by one. */
  sigprocmask(SIG_SETMASK, &all, NULL);
  pid_t child = fork();
  if (child < 0) {
    ct_fail(errno, "--init: fork");
    report_exec_failure(sock);
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(argv[0], argv);
    ct_fail(errno, "exec %s", argv[0]);
    report_exec_failure(sock);
  }
  close(sock);
  prctl(PR_SET_NAME, "ploop-init", 0, 0, 0);
  for (;;) {
    siginfo_t si;
    int sig = sigwaitinfo(&all, &si);
    if (sig < 0)
      continue;  /* EINTR */
    if (sig != SIGCHLD) {
      kill(child, sig);
      continue;
    }
    int st;
    pid_t w;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
      if (w != child)
        continue;  /* an orphan: reaped, nothing more */
      /* The rest of the container goes with its pid namespace. */
      _exit(WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255);
    }
  }
}
