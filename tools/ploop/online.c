/* How a verb reaches a disk: offline, through the serving daemon's control
 * socket, or through the local attachment that wraps that daemon. */
#include "online.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "control.h"

int cli_ctl_error(void)
{
  int e = errno;
  const char *msg = ploop_ctl_error();
  cli_error(0, "%s", msg && *msg ? msg : strerror(e));
  switch (e) {
  case ENOENT:
    return msg && strstr(msg, "no snapshot") ? EXIT_NOSNAP : EXIT_NOTFOUND;
  case EBUSY:
  case EAGAIN:
    return EXIT_BUSY;
  case EINVAL:
  case ERANGE:
  case EEXIST:
    return EXIT_USAGE;
  case EIO:
  case ENOSPC:
  case EDQUOT:
    return EXIT_IO;
  default:
    return EXIT_GENERIC;
  }
}

int cli_online_state(const char *disk, struct ploop_attach_info *att)
{
  int fd = ploop_ctl_connect(disk);
  if (fd < 0) {
    if (errno == ENOENT)
      return CLI_OFFLINE;
    return -cli_ctl_error();
  }
  close(fd);
  struct ploop_attach_info tmp;
  if (!att)
    att = &tmp;
  /* Only a live attachment counts: after a daemon crash its state file stays. */
  if (ploop_attach_find(disk, att) == 0 && att->daemon_alive && !att->snapshot_guid[0])
    return CLI_ATTACHED;
  return CLI_SERVED;
}
