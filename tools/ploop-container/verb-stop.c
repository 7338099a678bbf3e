/* `stop NAME [--timeout S]`: SIGTERM, then SIGKILL to all after S seconds;
 * returns once the monitor has unmounted the disk and removed the cgroups. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>

#include "container.h"
#include "error.h"
#include "verbs.h"

int verb_stop(int argc, char **argv)
{
  static const struct option opts[] = {{"timeout", required_argument, NULL, 't'},
                                       {NULL, 0, NULL, 0}};
  unsigned long timeout = 10;
  int c;
  while ((c = getopt_long(argc, argv, "t:", opts, NULL)) != -1) {
    if (c != 't')
      return ct_usage("stop: bad option '%s' (see --help)", argv[optind - 1]);
    char *end;
    errno = 0;
    timeout = strtoul(optarg, &end, 10);
    if (errno || *end || optarg[0] == '-' || timeout > 3600)
      return ct_usage("--timeout: '%s' is not a number of seconds (0-3600)", optarg);
  }
  if (argc - optind != 1)
    return ct_usage("usage: stop NAME [--timeout SECONDS]");
  return container_stop(argv[optind], (unsigned)timeout) < 0 ? -1 : 0;
}
