/* compact (alias balloon discard) and balloon show/status. A mounted disk
 * is compacted online (FITRIM, then the daemon moves clusters); a disk
 * nobody serves is compacted offline from its ext2/3/4 free-block bitmap;
 * a bare NBD export gives back what its clients discarded. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "control.h"
#include "online.h"

static int compact_offline(const char *disk)
{
  struct ploop_offline_compact_stats st;
  int rc = ploop_fs_compact_offline(disk, &st);
  if (rc < 0 && ploop_get_status() != PLOOP_ERR_CANCELLED)
    return cli_lib_error();
  char a[32], b[32];
  printf("%s: offline (%s): %" PRIu64 " bytes of free blocks discarded (%s), %" PRIu64
         " bytes reclaimed (image shrank by %s)\n",
         disk, st.fstype, st.bytes_discarded, cli_human_bytes(st.bytes_discarded, a, sizeof a),
         st.bytes_reclaimed, cli_human_bytes(st.bytes_reclaimed, b, sizeof b));
  return rc < 0 ? cli_lib_error() : EXIT_OK;
}

static int compact(const char *disk)
{
  int state = cli_online_state(disk, NULL);
  if (state < 0)
    return -state;
  if (state == CLI_OFFLINE)
    return compact_offline(disk);
  uint64_t trimmed = 0, reclaimed = 0;
  if (state == CLI_SERVED) {
    /* No filesystem of ours to trim: the holes are what NBD clients
     * discarded; the daemon moves clusters into them. */
    if (ploop_ctl_compact(disk, &reclaimed) < 0)
      return cli_ctl_error();
  } else if (ploop_attach_compact(disk, &trimmed, &reclaimed) < 0) {
    return cli_lib_error();
  }
  char a[32];
  printf("%s: %" PRIu64 " bytes trimmed, %" PRIu64 " bytes reclaimed (image shrank by %s)\n", disk,
         trimmed, reclaimed, cli_human_bytes(reclaimed, a, sizeof a));
  return EXIT_OK;
}

static int run_compact(int argc, char **argv)
{
  int c;
  while ((c = cli_getopt(argc, argv, "", NULL)) != -1)
    return c == 'h' ? EXIT_OK : EXIT_USAGE;
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  return compact(argv[optind]);
}

static int run_balloon(int argc, char **argv)
{
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    cli_print_verb_help(cli_find_verb("balloon"), stdout);
    return EXIT_OK;
  }
  if (argc < 2)
    return cli_usage_error("missing balloon action (discard, show or status)");
  if (strcmp(argv[1], "discard") == 0)
    return run_compact(argc - 1, argv + 1);
  if (strcmp(argv[1], "show") != 0 && strcmp(argv[1], "status") != 0)
    return cli_usage_error("balloon %s: not supported (discard, show or status)", argv[1]);
  /* OpenVZ inflates a hidden file in the container's filesystem and moves
   * its blocks out of the image. Here free space goes back by discard
   * (balloon discard = compact), so there is never a balloon file and no
   * balloon operation can be in progress; both are said the OpenVZ way. */
  const char *action = argv[1];
  argc--;
  argv++;
  int c;
  while ((c = cli_getopt(argc, argv, "", NULL)) != -1)
    return c == 'h' ? EXIT_OK : EXIT_USAGE;
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  struct ploop_descriptor *d = ploop_descriptor_load(argv[optind]);
  if (!d)
    return cli_lib_error();
  ploop_descriptor_free(d);
  if (strcmp(action, "show") == 0)
    printf("Current size of hidden balloon is 0 bytes\n");
  else
    printf("Current state of in-fly balloon operation is NONE\n");
  return EXIT_OK;
}

#define COMPACT_DETAILS                                                                            \
  "Mounted (ploop mount -m): FITRIM hands the filesystem's free space to the disk,\n"             \
  "then ploop-nbd moves the image's tail clusters into the holes.\n"                              \
  "Not served: the ext2/3/4 filesystem on the disk is read from the image with\n"                 \
  "libext2fs (it must be clean: e2fsck it, or ploop mount -F, after a crash);\n"                  \
  "the top's clusters holding only free blocks are discarded, then the image is\n"                \
  "compacted the same way. Other filesystems: mount the disk and compact it.\n"                   \
  "Served but not mounted (a bare NBD export): what its clients discarded.\n"                     \
  "SIGINT/SIGTERM stop an offline compaction between two clusters (exit\n"                        \
  "130/143); the image is consistent and compacting again finishes it.\n"

const struct cli_verb verb_compact = {
    .name = "compact",
    .run = run_compact,
    .synopsis = "compact DISK",
    .summary = "give free space back: mounted (FITRIM) or offline (ext2/3/4 bitmap), then shrink",
    .details = COMPACT_DETAILS,
    .interruptible = true,
};

const struct cli_verb verb_balloon = {
    .name = "balloon",
    .run = run_balloon,
    .synopsis = "balloon {discard|show|status} DISK",
    .summary = "discard: same as compact; show/status: no balloon file is ever used (0, NONE)",
    .details = "discard: see `ploop compact --help`.\n",
    .interruptible = true,
};
