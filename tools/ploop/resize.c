/* `ploop resize`: offline grow or shrink of a disk's virtual size. */
#include <inttypes.h>

#include "common.h"

static int run_resize(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"size", required_argument, NULL, 's'},
      {"force", no_argument, NULL, 'f'},
      {0},
  };
  uint64_t size = 0;
  bool have_size = false;
  unsigned flags = 0;
  int c;
  while ((c = cli_getopt(argc, argv, "s:f", longopts)) != -1) {
    switch (c) {
    case 's':
      if (!cli_parse_size("-s", optarg, &size))
        return EXIT_USAGE;
      if (size == 0)
        return cli_usage_error("-s: the size must be greater than zero");
      have_size = true;
      break;
    case 'f':
      flags |= PLOOP_RESIZE_FORCE;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!have_size)
    return cli_usage_error("-s SIZE is required");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  if (ploop_resize(disk, size, flags) < 0)
    return cli_lib_error(NULL);
  return EXIT_OK;
}

const struct cli_verb verb_resize = {
    .name = "resize",
    .run = run_resize,
    .synopsis = "resize -s SIZE [--force] DISK",
    .summary = "grow or shrink the disk's virtual size (offline)",
    .details = "  -s, --size SIZE   the new virtual size (K, M, G, T suffixes)\n"
               "  -f, --force       shrink even if data lies beyond the new end (it is lost)\n",
};
