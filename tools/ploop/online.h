/* How a verb reaches a disk: offline through libploop, or online through the
 * ploop-nbd daemon that serves it (control socket) or the local attachment
 * (FUSE + loop + mount) that wraps that daemon. */
#ifndef PLOOP_CLI_ONLINE_H
#define PLOOP_CLI_ONLINE_H

#include <stdbool.h>

#include "attach.h"

enum cli_online {
  CLI_OFFLINE = 0, /* nobody serves the disk: open it ourselves */
  CLI_SERVED,      /* a ploop-nbd daemon serves it (control socket answers) */
  CLI_ATTACHED,    /* served and attached locally (loop device, maybe mounted) */
};

/* Finds out how DISK is reachable; fills ATT when attached (may be NULL).
 * Returns an enum cli_online, or -EXITCODE after printing an error. */
int cli_online_state(const char *disk, struct ploop_attach_info *att);

/* Prints the control client's last error; returns the matching exit code. */
int cli_ctl_error(void);

#endif
