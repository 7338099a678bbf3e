/* `ploop lock-break DISK`: fences whoever holds an RBD disk (rbd:POOL/NAME):
 * the holder is blocklisted by Ceph, so its next write fails, and its locks
 * are removed so that another process can open the disk read-write. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static int run_lock_break(int argc, char **argv)
{
  int c;
  while ((c = cli_getopt(argc, argv, "", NULL)) != -1)
    return c == 'h' ? EXIT_OK : EXIT_USAGE;
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  if (strncmp(disk, "rbd:", 4))
    return cli_usage_error("%s: lock-break is for rbd:POOL/NAME disks (a local disk's lock ends with its process)",
                           disk);
  char holder[256];
  if (ploop_rbd_lock_break(disk, holder, sizeof holder) < 0)
    return cli_lib_error();
  if (holder[0])
    printf("fenced %s\n", holder);
  else
    printf("no holder\n");
  return EXIT_OK;
}

const struct cli_verb verb_lock_break = {
    .name = "lock-break",
    .run = run_lock_break,
    .synopsis = "lock-break DISK",
    .summary = "fence the holder of an rbd:POOL/NAME disk (Ceph blocklists it) and drop its locks",
    .details = "The holder's next write fails; the disk can then be opened read-write elsewhere.\n",
};
