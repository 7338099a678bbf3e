/* `ploop convert`: offline change of the format version (1 <-> 2) or of the
 * base image's format (ploop1 <-> raw). */
#include <string.h>

#include "common.h"

static int run_convert(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"format-version", required_argument, NULL, 'v'},
      {"format", required_argument, NULL, 'f'},
      {0},
  };
  int version = 0, to_raw = -1;
  uint64_t v;
  int c;
  while ((c = cli_getopt(argc, argv, "v:f:", longopts)) != -1) {
    switch (c) {
    case 'v':
      if (!cli_parse_uint("-v", optarg, 1, 2, &v))
        return EXIT_USAGE;
      version = (int)v;
      break;
    case 'f':
      if (strcmp(optarg, "raw") == 0)
        to_raw = 1;
      else if (strcmp(optarg, "ploop1") == 0 || strcmp(optarg, "expanded") == 0)
        to_raw = 0;
      else
        return cli_usage_error("-f: unsupported format '%s' (raw or ploop1)", optarg);
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if ((version != 0) == (to_raw != -1))
    return cli_usage_error("give exactly one of -v 1|2 and -f raw|ploop1");
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  const char *disk = argv[optind];
  int rc = version ? ploop_convert_version(disk, version) : ploop_convert_format(disk, to_raw == 1);
  if (rc < 0)
    return cli_lib_error();
  return EXIT_OK;
}

const struct cli_verb verb_convert = {
    .name = "convert",
    .run = run_convert,
    .synopsis = "convert {-v 1|2 | -f raw|ploop1} DISK",
    .summary = "convert the disk's format version, or its base between raw and ploop1",
    .details = "  -v, --format-version 1|2   rewrite every delta's BAT in that version\n"
               "                             (v1 allows 1 MiB clusters and 2 TiB at most)\n"
               "  -f, --format raw|ploop1    convert a single-image disk's base image\n",
    .interruptible = true,
};
