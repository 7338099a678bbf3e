/* `ploop init`: creates a new disk (one empty delta + DiskDescriptor.xml). */
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach.h"
#include "common.h"

static int run_init(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"size", required_argument, NULL, 's'},
      {"blocksize", required_argument, NULL, 'b'},
      {"format-version", required_argument, NULL, 'v'},
      {"fstype", required_argument, NULL, 't'},
      {"format", required_argument, NULL, 'f'},
      {"nolazy", no_argument, NULL, 'n'},
      {"fsblocksize", required_argument, NULL, 'B'},
      {0},
  };
  struct ploop_delta_create_params p = {0};
  bool have_size = false;
  const char *fstype = NULL; /* ext4 for a disk in files, as OpenVZ's ploop */
  struct ploop_fs_opts fs = {0};
  bool fs_opts = false;
  int c;
  while ((c = cli_getopt(argc, argv, "s:b:v:t:f:nB:", longopts)) != -1) {
    switch (c) {
    case 'n':
      fs.nolazy = fs_opts = true;
      break;
    case 'B':
    {
      uint64_t v;
      if (!cli_parse_uint("-B", optarg, 1024, 65536, &v))
        return EXIT_USAGE;
      if (v & (v - 1))
        return cli_usage_error("-B: block size %s is not a power of two", optarg);
      fs.block_size = (unsigned)v;
      fs_opts = true;
      break;
    }
    case 's':
      if (!cli_parse_size("-s", optarg, &p.size_bytes))
        return EXIT_USAGE;
      if (p.size_bytes == 0)
        return cli_usage_error("-s: the size must be greater than zero");
      have_size = true;
      break;
    case 'b':
    case 'v':
    {
      int opt_rc = cli_create_option(c, optarg, &p);
      if (opt_rc)
        return opt_rc;
      break;
    }
    case 't':
      fstype = optarg;
      break;
    case 'f':
      /* Only the thin ("expanded") format is made here; raw and
       * preallocated bases come from `ploop convert`. */
      if (strcmp(optarg, "ploop1") != 0 && strcmp(optarg, "expanded") != 0)
        return cli_usage_error("-f: unsupported image format '%s' (ploop1 or expanded)", optarg);
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!have_size)
    return cli_usage_error("-s SIZE is required");
  if (!cli_positional(argc, argv, 1, "DELTA (e.g. DIR/root.hds)"))
    return EXIT_USAGE;
  const char *arg = argv[optind];
  bool rbd = strncmp(arg, "rbd:", 4) == 0;
  if (rbd && fstype && strcmp(fstype, "none") != 0)
    return cli_usage_error("%s: -t makes a filesystem on a disk in files; for an rbd disk, "
                           "`ploop mount` it and run mkfs",
                           arg);
  if (!fstype)
    fstype = rbd ? "none" : "ext4";
  bool make_fs = strcmp(fstype, "none") != 0;
  if (make_fs && strcmp(fstype, "ext4") != 0 && strcmp(fstype, "ext3") != 0 &&
      strcmp(fstype, "xfs") != 0)
    return cli_usage_error("-t: unknown file system '%s' (none, ext4, ext3 or xfs)", fstype);
  if (fs_opts && !make_fs)
    return cli_usage_error("-n and -B apply to the filesystem; they do not go with -t none");

  /* A directory argument means DIR/root.hds, as ploop's own layout has it. */
  char path[4096];
  struct stat st;
  if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
    snprintf(path, sizeof path, "%s/%s", arg, PLOOP_DEFAULT_IMAGE_NAME);
  else
    snprintf(path, sizeof path, "%s", arg);

  if (ploop_disk_create(path, &p) < 0)
    return cli_lib_error();
  if (!make_fs)
    return EXIT_OK;

  /* The filesystem is made through a local attach (ploop-nbd + FUSE + loop);
   * if that fails the new disk is removed again: init makes all or nothing. */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  dirname(dir);
  if (ploop_attach_format_opts(dir, fstype, &fs) == 0)
    return EXIT_OK;
  int rc = cli_lib_error();
  char xml[4096 + 32];
  snprintf(xml, sizeof xml, "%s/%s", dir, PLOOP_DESCRIPTOR_NAME);
  unlink(path);
  unlink(xml);
  return rc;
}

const struct cli_verb verb_init = {
    .name = "init",
    .run = run_init,
    .synopsis = "init -s SIZE [-b CLUSTER_SECTORS] [-v 1|2] [-t none|ext4|ext3|xfs [-n] [-B BYTES]]\n"
                "            [-f ploop1] DELTA",
    .summary = "create a new empty disk: DELTA (or DIR/root.hds) and DiskDescriptor.xml",
    .details = "  -s, --size SIZE           virtual size; bytes or with a K, M, G, T suffix\n"
               "  -b, --blocksize SECTORS   cluster size in 512-byte sectors, a power of two\n"
               "                            from 64 (32 KiB) to 131072 (64 MiB); default 2048\n"
               "  -v, --format-version 1|2  image format version; default 2\n"
               "  -t, --fstype TYPE         file system to make inside: ext4 (the default, as\n"
               "                            OpenVZ's ploop), ext3, xfs, or none for a bare\n"
               "                            disk; made through a local attach like ploop\n"
               "                            mount (needs root); an rbd: disk is made bare\n"
               "  -n, --nolazy              ext3/ext4: initialise inode tables and journal\n"
               "                            now, not lazily after the first mount\n"
               "  -B, --fsblocksize BYTES   filesystem block size (1024..65536, a power of two)\n"
               "  -f, --format ploop1       image format (ploop1, also called expanded)\n",
};
