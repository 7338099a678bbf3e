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
#include "monitor.h"
#include "net.h"
#include "util.h"

int mig_start(const char *name, int lock, const struct ct_runargs *ra, bool adopt_mount)
{
  struct ct_run_opts o = ra->o;
  o.detach = true;
  o.adopt_mount = adopt_mount;
  ct_net_name(&o.netcfg, name);  /* this root's name for the host end */
  int report_in, report;
  /* the migration's socket and listener are not the container's business */
  pid_t pid = monitor_fork(name, lock, true, &report_in, &report);
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int rc = container_run(name, lock, &o, ra->argv, report);
    _exit(rc < 0 ? 1 : rc);
  }
  return monitor_started(name, report_in);
}
