/* Starting a container detached for a migration (destination after COMMIT,
 * source after a failed --offline migration): the same monitor `start`
 * forks, told the command and limits of the migrated run. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "container.h"
#include "error.h"
#include "migrate-internal.h"
#include "util.h"

int mig_start(const char *name, int lock, const struct ct_runargs *ra, bool adopt_mount)
{
  struct ct_run_opts o = ra->o;
  o.detach = true;
  o.adopt_mount = adopt_mount;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  cleanup_free char *log = ct_path(name, "console.log");
  pid_t pid = fork();
  if (pid < 0)
    return ct_fail(errno, "fork");
  if (pid == 0) {
    close(pfd[0]);
    setsid();
    int in = open("/dev/null", O_RDONLY);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
      _exit(1);
    close(in);
    close(out);
    /* the migration's socket and listener are not the container's business */
    for (int fd = 3; fd < 1024; fd++)
      if (fd != lock && fd != pfd[1])
        close(fd);
    int rc = container_run(name, lock, &o, ra->argv, pfd[1]);
    _exit(rc < 0 ? 1 : rc);
  }
  close(pfd[1]);
  char msg[1200];
  ssize_t n;
  while ((n = read(pfd[0], msg, sizeof msg - 1)) < 0 && errno == EINTR) {
  }
  close(pfd[0]);
  if (n <= 0)
    return ct_fail(0, "start %s: the monitor died before the container started (see %s)", name, log);
  msg[n] = 0;
  if (msg[0] == 'E')
    return ct_fail(0, "%s", msg + 1);
  return 0;
}
