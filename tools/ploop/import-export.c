/* `ploop import` / `ploop export`: copy between a raw file and a disk (any
 * snapshot of it, or a bare delta file), with a progress bar on a terminal. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "bare-delta.h"

static void print_stats(const char *what, const char *from, const char *to,
                        const struct ploop_copy_stats *s, uint64_t ns)
{
  char a[32];
  double secs = (double)ns / 1e9;
  printf("%s %s -> %s: %s, %" PRIu64 " clusters written, %" PRIu64 " zeroed, %" PRIu64
         " unchanged/skipped, %.2f s\n",
         what, from, to, cli_human_bytes(s->bytes_total, a, sizeof a), s->clusters_written,
         s->clusters_zeroed, s->clusters_skipped, secs);
}

/* Size of a raw source: a regular file's length or a block device's size. */
static int source_size(const char *src, uint64_t *out)
{
  struct stat st;
  if (stat(src, &st) < 0)
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", src, strerror(errno));
  if (S_ISREG(st.st_mode)) {
    *out = (uint64_t)st.st_size;
    return 0;
  }
  if (S_ISBLK(st.st_mode)) {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, BLKGETSIZE64, out) < 0) {
      int e = errno;
      if (fd >= 0)
        close(fd);
      return cli_error(EXIT_IO, "%s: %s", src, strerror(e));
    }
    close(fd);
    return 0;
  }
  return cli_error(EXIT_USAGE, "%s: not a regular file or block device", src);
}

static bool descriptor_exists(const char *disk)
{
  if (!strncmp(disk, "rbd:", 4)) { /* a disk in Ceph: its descriptor object */
    struct ploop_descriptor *d = ploop_descriptor_load(disk);
    ploop_descriptor_free(d);
    return d != NULL;
  }
  struct stat st;
  if (stat(disk, &st) < 0)
    return false;
  if (!S_ISDIR(st.st_mode))
    return true; /* a file argument is the descriptor itself */
  char xml[4096];
  snprintf(xml, sizeof xml, "%s/%s", disk, PLOOP_DESCRIPTOR_NAME);
  return access(xml, F_OK) == 0;
}

static int run_import(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"size", required_argument, NULL, 's'},
      {"blocksize", required_argument, NULL, 'b'},
      {"format-version", required_argument, NULL, 'v'},
      {"sparse", no_argument, NULL, 'S'},
      {0},
  };
  struct ploop_delta_create_params p = {0};
  int c;
  while ((c = cli_getopt(argc, argv, "s:b:v:", longopts)) != -1) {
    switch (c) {
    case 's':
      if (!cli_parse_size("-s", optarg, &p.size_bytes))
        return EXIT_USAGE;
      if (p.size_bytes == 0)
        return cli_usage_error("-s: the size must be greater than zero");
      break;
    case 'b':
    case 'v':
    {
      int opt_rc = cli_create_option(c, optarg, &p);
      if (opt_rc)
        return opt_rc;
      break;
    }
    case 'S':
      break; /* zero clusters never take space; kept for scripts that say so */
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 2, "SRC.raw and DISK"))
    return EXIT_USAGE;
  const char *src = argv[optind], *disk = argv[optind + 1];
  uint64_t src_bytes;
  int rc = source_size(src, &src_bytes);
  if (rc)
    return rc;

  bool created = false, made_dir = false;
  char delta[4096];
  if (!descriptor_exists(disk)) {
    if (!p.size_bytes)
      p.size_bytes = src_bytes;
    if (p.size_bytes == 0)
      return cli_error(EXIT_USAGE, "%s: empty source; give the disk size with -s", src);
    if (p.size_bytes < src_bytes)
      return cli_usage_error("-s: %" PRIu64 " bytes is smaller than %s (%" PRIu64 " bytes)",
                             p.size_bytes, src, src_bytes);
    bool in_ceph = !strncmp(disk, "rbd:", 4);
    if (in_ceph)
      ;
    else if (mkdir(disk, 0755) == 0)
      made_dir = true;
    else if (errno != EEXIST)
      return cli_error(EXIT_IO, "%s: %s", disk, strerror(errno));
    if (in_ceph) /* the disk's name: its top is NAME.root.hds */
      snprintf(delta, sizeof delta, "%s", disk);
    else
      snprintf(delta, sizeof delta, "%s/%s", disk, PLOOP_DEFAULT_IMAGE_NAME);
    if (ploop_disk_create(delta, &p) < 0) {
      rc = cli_lib_error();
      if (made_dir)
        rmdir(disk);
      return rc;
    }
    created = true;
  } else if (p.size_bytes || p.cluster_sectors || p.version) {
    return cli_usage_error("-s, -b and -v apply only to a new disk; %s exists", disk);
  }

  struct cli_progress prog;
  cli_progress_init(&prog, "import");
  struct ploop_copy_stats stats = {0};
  uint64_t t0 = cli_now_ns();
  rc = ploop_import_raw(src, disk, cli_progress_cb, &prog, &stats);
  cli_progress_end(&prog);
  if (rc < 0) {
    rc = cli_lib_error();
    if (created) {
      /* A failed import into a disk made just now leaves nothing behind. */
      char xml[4096 + 32];
      snprintf(xml, sizeof xml, "%s/%s", disk, PLOOP_DESCRIPTOR_NAME);
      unlink(delta);
      unlink(xml);
      if (made_dir)
        rmdir(disk);
    }
    return rc;
  }
  print_stats("import", src, disk, &stats, cli_now_ns() - t0);
  return EXIT_OK;
}

/* Refuses an OUT that is one of the files being read: -f must not let an
 * export overwrite the image it comes from. */
static int output_is_input(const char *out, const struct stat *ost, const char *disk,
                           enum cli_target t)
{
  struct stat st;
  if (t == CLI_TARGET_DELTA) {
    if (stat(disk, &st) == 0 && st.st_dev == ost->st_dev && st.st_ino == ost->st_ino)
      return cli_error(EXIT_USAGE, "%s: is the delta being exported", out);
    return 0;
  }
  struct ploop_descriptor *d = ploop_descriptor_load(disk);
  if (!d)
    return cli_lib_error();
  int rc = 0;
  for (size_t i = 0; i < d->n_images && !rc; i++) {
    char *path = ploop_descriptor_image_path(d, &d->images[i]);
    if (path && stat(path, &st) == 0 && st.st_dev == ost->st_dev && st.st_ino == ost->st_ino)
      rc = cli_error(EXIT_USAGE, "%s: is an image of %s", out, disk);
    free(path);
  }
  ploop_descriptor_free(d);
  return rc;
}

static int run_export(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"uuid", required_argument, NULL, 'u'},
      {"output", required_argument, NULL, 'o'},
      {"force", no_argument, NULL, 'f'},
      {0},
  };
  char uuid[PLOOP_UUID_LEN + 1];
  const char *snapshot = NULL, *out = NULL;
  bool force = false;
  int c;
  while ((c = cli_getopt(argc, argv, "u:o:f", longopts)) != -1) {
    switch (c) {
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      snapshot = uuid;
      break;
    case 'o':
      out = optarg;
      break;
    case 'f':
      force = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK or DELTA"))
    return EXIT_USAGE;
  if (!out)
    return cli_usage_error("-o OUT is required (the raw file to write)");
  const char *disk = argv[optind];
  enum cli_target t;
  int rc = cli_classify(disk, &t);
  if (rc)
    return rc;

  struct stat st;
  bool existed = stat(out, &st) == 0;
  if (existed && S_ISREG(st.st_mode) && !force)
    return cli_error(EXIT_USAGE, "%s: file exists (use -f to overwrite)", out);
  if (existed && (rc = output_is_input(out, &st, disk, t)))
    return rc;

  struct bare_delta bare = {0};
  const char *src = disk;
  if (t == CLI_TARGET_DELTA) {
    if (snapshot)
      return cli_usage_error("-u needs a DISK; %s is a single delta file", disk);
    rc = bare_delta_open(disk, &bare);
    if (rc)
      return rc;
    src = bare.dir;
  }

  struct cli_progress prog;
  cli_progress_init(&prog, "export");
  struct ploop_copy_stats stats = {0};
  uint64_t t0 = cli_now_ns();
  rc = ploop_export_raw(src, snapshot, out, cli_progress_cb, &prog, &stats);
  cli_progress_end(&prog);
  if (rc < 0) {
    rc = cli_lib_error();
    if (!existed)
      unlink(out); /* a half-written file must not pass for an export */
  } else {
    print_stats("export", disk, out, &stats, cli_now_ns() - t0);
    rc = EXIT_OK;
  }
  bare_delta_close(&bare);
  return rc;
}

const struct cli_verb verb_import = {
    .name = "import",
    .run = run_import,
    .synopsis = "import [-s SIZE] [-b SECTORS] [-v 1|2] [--sparse] SRC.raw DISK",
    .summary = "make DISK equal to a raw file, writing only clusters that differ",
    .details = "DISK is a directory; if it holds no DiskDescriptor.xml a new disk is made\n"
               "there (DIR/root.hds) with the source's size.  Zero clusters of the source\n"
               "are never allocated (they stay holes; --sparse is accepted for scripts).\n"
               "  -s, --size SIZE           size of a new disk (default: the source's)\n"
               "  -b, --blocksize SECTORS   cluster size of a new disk (default 2048)\n"
               "  -v, --format-version 1|2  format version of a new disk (default 2)\n"
               "Prints one summary line: clusters written, zeroed and left unchanged.\n",
};

const struct cli_verb verb_export = {
    .name = "export",
    .run = run_export,
    .synopsis = "export [-u UUID] -o OUT.raw [-f] DISK|DELTA",
    .summary = "write the disk (or one snapshot, or a bare delta) to a sparse raw file",
    .details = "  -u, --uuid UUID     export that snapshot's state instead of the top\n"
               "  -o, --output FILE   the raw file to write (required; not stdout, since\n"
               "                      the output is written sparse, by offset)\n"
               "  -f, --force         overwrite FILE if it exists\n"
               "A bare delta file (no DiskDescriptor.xml) is read on its own, as a base.\n"
               "On failure a newly created FILE is removed.\n",
};
