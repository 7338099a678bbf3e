/* `ploop import` / `ploop export`: copy between a raw file and a disk (any
 * snapshot of it, or a bare delta file), with a progress bar on a terminal. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "bare-delta.h"
#include "import-stream.h"

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

/* Makes a rename durable: fsync of the directory holding PATH. */
static void sync_parent_dir(const char *path)
{
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = 0;
  else
    *slash = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* True when PATH does not exist or is an empty directory. */
static bool dir_absent_or_empty(const char *path)
{
  DIR *d = opendir(path);
  if (!d)
    return errno == ENOENT;
  struct dirent *e;
  bool empty = true;
  while (empty && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      empty = false;
  closedir(d);
  return empty;
}

/* Makes PARENT(DISK)/.BASENAME.import-XXXXXX into OUT. */
static int make_stage_dir(const char *disk, char *out, size_t len)
{
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", disk);
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/')
    copy[--n] = 0;
  char *slash = strrchr(copy, '/');
  const char *base = slash ? slash + 1 : copy;
  int w;
  if (!slash)
    w = snprintf(out, len, ".%s.import-XXXXXX", base);
  else if (slash == copy)
    w = snprintf(out, len, "/.%s.import-XXXXXX", base);
  else {
    *slash = 0;
    w = snprintf(out, len, "%s/.%s.import-XXXXXX", copy, base);
  }
  if (w < 0 || (size_t)w >= len)
    return cli_usage_error("%s: path too long", disk);
  if (!mkdtemp(out))
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", out, strerror(errno));
  return 0;
}

/* Removes what an import made: the staging directory, or the new disk's
 * files in a directory that held other files. */
static void remove_new_disk(const char *dir, bool staged)
{
  static const char *const names[] = {PLOOP_DEFAULT_IMAGE_NAME, PLOOP_DESCRIPTOR_NAME,
                                      PLOOP_DESCRIPTOR_NAME ".tmp", PLOOP_DESCRIPTOR_NAME ".lck"};
  char path[4096 + 64];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  if (staged)
    rmdir(dir);
}

/* An import into an existing disk is all or nothing: it writes into a new
 * top above a snapshot of the old state (GUID). Done: the top is merged
 * down (and, when it zeroed clusters the old state held, the source is
 * compared once more so those become holes again). Failed or interrupted:
 * the new top is dropped (a switch back to GUID, then the empty top merged
 * into it), so the disk reads as before. SIGINT/SIGTERM wait during these
 * steps (they end in "after the work was done"); a kill leaves the old
 * state as snapshot GUID beside the partial import. */
static void block_signals(bool block)
{
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

static int import_finish(const char *src, const char *disk, const char *guid, bool ok, bool again)
{
  block_signals(true);
  bool cancelled = ploop_cancelled();
  ploop_cancel_reset();
  int rc;
  if (ok) {
    rc = ploop_snapshot_merge(disk, NULL, false, NULL, NULL);
    if (rc == 0 && again)
      rc = ploop_import_raw(src, disk, NULL, NULL, NULL);
  } else {
    rc = ploop_snapshot_switch(disk, guid);
    if (rc == 0)
      rc = ploop_snapshot_merge(disk, NULL, false, NULL, NULL);
  }
  if (cancelled)
    ploop_cancel();
  block_signals(false);
  return rc;
}

static int import_into_existing(const char *src, bool from_pipe, const char *disk, struct cli_progress *prog,
                                struct ploop_copy_stats *stats)
{
  char guid[PLOOP_UUID_LEN + 1];
  /* A disk that cannot be opened for writing is refused as the import
   * itself would refuse it, before any snapshot is made. */
  struct ploop_disk *probe = ploop_disk_open(disk, NULL, PLOOP_OPEN_RDWR);
  if (!probe || ploop_disk_close(probe) < 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ploop_get_error() ? ploop_get_error() : "");
    ploop_set_error(ploop_get_status(), ploop_get_errno(), "import: %s", msg);
    return cli_lib_error();
  }
  block_signals(true); /* a snapshot left behind by an early signal would stay */
  int rc = ploop_snapshot_create(disk, NULL, guid);
  block_signals(false);
  if (rc < 0)
    return cli_lib_error();
  int stream_rc = 0;
  if (from_pipe)
    rc = (stream_rc = import_stream(STDIN_FILENO, disk, prog, stats)) ? -1 : 0;
  else
    rc = ploop_import_raw(src, disk, cli_progress_cb, prog, stats);
  cli_progress_end(prog);
  if (rc == 0) {
    if (import_finish(src, disk, guid, true, !from_pipe && stats->clusters_zeroed) < 0)
      return cli_lib_error();
    return 0;
  }
  /* The import's own error is the line to print; a failed rollback is
   * added to it (the old state is still snapshot GUID). */
  char msg[1024];
  int status = ploop_get_status(), err = ploop_get_errno();
  snprintf(msg, sizeof msg, "%s", ploop_get_error() ? ploop_get_error() : "");
  if (import_finish(src, disk, guid, false, false) < 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", ploop_get_error());
    if (stream_rc)
      return cli_error(stream_rc, "%s: the old state is snapshot %s (restoring it failed: %s)", disk, guid, why);
    ploop_set_error(status, err, "%s; the old state is snapshot %s (restoring it failed: %s)", msg, guid, why);
    return cli_lib_error();
  }
  if (stream_rc)
    return stream_rc; /* printed already */
  ploop_set_error(status, err, "%s", msg);
  return cli_lib_error();
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
  uint64_t src_bytes = 0;
  int rc;
  /* "-" is stdin: a redirected file is read as any file; a pipe is read
   * front to back (import-stream.c), and a new disk needs -s then. */
  bool from_pipe = false;
  if (strcmp(src, "-") == 0) {
    struct stat in;
    if (fstat(STDIN_FILENO, &in) < 0)
      return cli_error(EXIT_READ, "stdin: %s", strerror(errno));
    if (isatty(STDIN_FILENO))
      return cli_usage_error("refusing to read an image from a terminal (pipe one in)");
    if (S_ISREG(in.st_mode) || S_ISBLK(in.st_mode))
      src = "/dev/stdin";
    else
      from_pipe = true;
  }
  if (!from_pipe && (rc = source_size(src, &src_bytes)))
    return rc;
  if (from_pipe && !descriptor_exists(disk) && !p.size_bytes)
    return cli_usage_error("-s SIZE is required for a new disk imported from a pipe");

  /* A new disk is built in a hidden directory beside DISK and renamed to
   * it when complete (rename replaces an empty directory): an import that
   * fails, is interrupted or is killed leaves no DISK with half a disk. A
   * directory that already holds other files gets the disk's files, which
   * a failure removes. */
  bool created = false, staged = false;
  char work[4096], delta[4096 + 32];
  snprintf(work, sizeof work, "%s", disk);
  if (!descriptor_exists(disk)) {
    if (!p.size_bytes)
      p.size_bytes = src_bytes;
    if (p.size_bytes == 0)
      return cli_error(EXIT_USAGE, "%s: empty source; give the disk size with -s", src);
    if (p.size_bytes < src_bytes)
      return cli_usage_error("-s: %" PRIu64 " bytes is smaller than %s (%" PRIu64 " bytes)",
                             p.size_bytes, src, src_bytes);
    if (!strncmp(disk, "rbd:", 4)) {
      snprintf(delta, sizeof delta, "%s", disk); /* in Ceph: the top is NAME.root.hds */
    } else {
      if (dir_absent_or_empty(disk)) {
        if ((rc = make_stage_dir(disk, work, sizeof work)))
          return rc;
        staged = true;
      }
      snprintf(delta, sizeof delta, "%s/%s", work, PLOOP_DEFAULT_IMAGE_NAME);
    }
    if (ploop_disk_create(delta, &p) < 0) {
      rc = cli_lib_error();
      remove_new_disk(work, staged);
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
  if (!created) {
    if ((rc = import_into_existing(src, from_pipe, disk, &prog, &stats)))
      return rc;
    print_stats("import", src, disk, &stats, cli_now_ns() - t0);
    return EXIT_OK;
  }
  int stream_rc = 0;
  if (from_pipe)
    rc = (stream_rc = import_stream(STDIN_FILENO, work, &prog, &stats)) ? -1 : 0;
  else
    rc = ploop_import_raw(src, work, cli_progress_cb, &prog, &stats);
  cli_progress_end(&prog);
  if (stream_rc) {
    rc = stream_rc; /* printed already */
  } else if (rc == 0 && staged && rename(work, disk) < 0) {
    rc = -1;
    cli_error(EXIT_IO, "%s: rename to %s: %s", work, disk, strerror(errno));
  } else if (rc < 0) {
    rc = cli_lib_error();
  }
  if (rc) {
    if (created)
      remove_new_disk(work, staged);
    return rc < 0 ? EXIT_IO : rc;
  }
  if (staged)
    sync_parent_dir(disk);
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
  /* Written as OUT.tmp and renamed when complete: a failed or interrupted
   * export leaves no OUT that could pass for one (and an old OUT intact). */
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", out) >= sizeof tmp) {
    bare_delta_close(&bare);
    return cli_usage_error("%s: path too long", out);
  }
  if (lstat(tmp, &st) == 0 && !S_ISREG(st.st_mode)) {
    bare_delta_close(&bare);
    return cli_error(EXIT_USAGE, "%s: exists and is not a regular file", tmp);
  }
  rc = ploop_export_raw(src, snapshot, tmp, cli_progress_cb, &prog, &stats);
  cli_progress_end(&prog);
  if (rc == 0 && rename(tmp, out) < 0) {
    rc = cli_error(EXIT_IO, "%s: rename to %s: %s", tmp, out, strerror(errno));
    unlink(tmp);
  } else if (rc < 0) {
    rc = cli_lib_error();
    unlink(tmp);
  } else {
    sync_parent_dir(out);
    print_stats("export", disk, out, &stats, cli_now_ns() - t0);
    rc = EXIT_OK;
  }
  bare_delta_close(&bare);
  return rc;
}

const struct cli_verb verb_import = {
    .name = "import",
    .run = run_import,
    .synopsis = "import [-s SIZE] [-b SECTORS] [-v 1|2] [--sparse] SRC.raw|- DISK",
    .summary = "make DISK equal to a raw file, writing only clusters that differ",
    .details = "DISK is a directory; if it holds no DiskDescriptor.xml a new disk is made\n"
               "there (DIR/root.hds) with the source's size.  Zero clusters of the source\n"
               "are never allocated (they stay holes; --sparse is accepted for scripts).\n"
               "SRC '-' reads stdin; from a pipe, a new disk needs -s.\n"
               "  -s, --size SIZE           size of a new disk (default: the source's)\n"
               "  -b, --blocksize SECTORS   cluster size of a new disk (default 2048)\n"
               "  -v, --format-version 1|2  format version of a new disk (default 2)\n"
               "Prints one summary line: clusters written, zeroed and left unchanged.\n"
               "SIGINT/SIGTERM stop it (exit 130/143): a disk made by this import is\n"
               "removed (and DIR, if made); an existing disk reads as before (the import\n"
               "writes into a new top above a snapshot of it, merged down when done).\n",
    .interruptible = true,
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
               "FILE is written as FILE.tmp and renamed when complete: a failed or\n"
               "interrupted (SIGINT/SIGTERM: exit 130/143) export leaves no FILE.tmp and\n"
               "FILE as it was.\n",
    .interruptible = true,
};
