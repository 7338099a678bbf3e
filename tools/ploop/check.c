/* `ploop check`: consistency check (and optional repair) of one delta file or
 * of a whole disk (descriptor plus every delta).  Findings go to stdout, one
 * per line; the verdict decides the exit code (0 clean/repaired, 3 broken). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "online.h"

/* Lost clusters waste space but lose no data, so they alone are not corruption. */
static bool report_broken(const struct ploop_check_report *r)
{
  return r->header_bad || r->clusters_beyond_eof || r->clusters_beyond_size ||
         r->clusters_misaligned || r->clusters_duplicate || r->clusters_in_bat_area ||
         r->file_size_unaligned;
}

static void print_lines(const char *text)
{
  if (!text || !*text)
    return;
  fputs(text, stdout);
  if (text[strlen(text) - 1] != '\n')
    fputc('\n', stdout);
}

/* "first problem (and N more)" from a multi-line report, for the one-line verdict. */
static const char *first_problem(const char *text, char *buf, size_t len)
{
  while (*text == '\n')
    text++;
  size_t n = strcspn(text, "\n");
  int more = 0;
  for (const char *c = text + n; *c; c++)
    if (*c == '\n' && c[1] && c[1] != '\n')
      more++;
  if (more)
    snprintf(buf, len, "%.*s (and %d more)", (int)n, text, more);
  else
    snprintf(buf, len, "%.*s", (int)n, text);
  return buf;
}

struct check_opts {
  unsigned flags;
  bool force, silent, raw, sparse;
};

static int in_use_left(const char *path, const struct check_opts *o)
{
  if ((o->flags & PLOOP_CHECK_READONLY) && (o->flags & PLOOP_CHECK_DROP_INUSE))
    return cli_error(EXIT_IO, "%s: image is marked in use; read-only (-r): the mark cannot be dropped", path);
  return cli_error(EXIT_INUSE, "%s: image is marked in use (open elsewhere, or not closed cleanly); "
                               "-d drops the mark", path);
}

/* As OpenVZ: without -f an image whose header says it was closed cleanly
 * is not walked. 1: skip it; 0: check it. */
static int clean_skip(const char *path)
{
  struct ploop_delta *d = ploop_delta_open(path, PLOOP_OPEN_RDONLY | PLOOP_OPEN_ALLOW_DIRTY);
  if (!d)
    return 0; /* the check itself says what is wrong, in its own terms */
  struct ploop_delta_info in;
  int rc = ploop_delta_get_info(d, &in);
  ploop_delta_close(d);
  return rc == 0 && !in.in_use;
}

static int check_delta(const char *path, const struct check_opts *o)
{
  if (!o->force) {
    if (clean_skip(path)) {
      if (!o->silent)
        printf("%s: image is clean (not marked in use): check skipped (-f checks it anyway)\n", path);
      return EXIT_OK;
    }
  }
  struct ploop_check_report r;
  memset(&r, 0, sizeof r);
  int rc = ploop_delta_check(path, o->flags, &r);
  if (rc < 0)
    return cli_lib_error();
  char text[8192] = "";
  ploop_check_report_format(&r, text, sizeof text);
  bool broken = rc > 0 && report_broken(&r) && !r.repaired; /* repaired, but still marked in use */
  if (!o->silent || broken || r.repaired)
    print_lines(text);
  if (broken) {
    char first[1024];
    if (r.header_bad)
      return cli_error(EXIT_CORRUPT, "%s: unusable header: %s", path, r.header_problem);
    return cli_error(EXIT_CORRUPT, "%s: corrupt: %s", path, first_problem(text, first, sizeof first));
  }
  if (r.in_use && !r.in_use_dropped)
    return in_use_left(path, o);
  if (r.repaired) {
    printf("%s: repaired\n", path);
    return EXIT_OK;
  }
  if (!o->silent) {
    if (r.clusters_lost)
      printf("%s: %" PRIu64 " lost clusters (unreferenced; space only, no data at risk)\n", path,
             r.clusters_lost);
    printf("%s: clean\n", path);
  }
  return EXIT_OK;
}

static int check_disk(const char *path, const struct check_opts *o)
{
  /* A served disk is open read-write: its in-use mark is expected and its
   * BAT changes under us, so a check now would only report noise. */
  int st = cli_online_state(path, NULL);
  if (st < 0)
    return -st;
  if (st != CLI_OFFLINE)
    return cli_error(EXIT_BUSY, "%s: served by ploop-nbd; stop it (ploop umount) before a check",
                     path);
  char msg[16384] = "";
  int rc = ploop_disk_check(path, o->flags, msg, sizeof msg);
  if (rc < 0)
    return cli_lib_error();
  bool repaired = strstr(msg, "repaired") || strstr(msg, "(cleared)");
  if (!o->silent || rc > 0 || repaired)
    print_lines(msg);
  if (rc == 1) {
    char first[1024];
    return cli_error(EXIT_CORRUPT, "%s: corrupt: %s", path, first_problem(msg, first, sizeof first));
  }
  if (rc == 2)
    return in_use_left(path, o);
  if (!o->silent)
    printf("%s: %s\n", path, repaired ? "repaired" : "clean");
  return EXIT_OK;
}

/* -S: holes are filled with zeros (OpenVZ refuses sparse images). */
static int fill_sparse(const char *path, const struct check_opts *o)
{
  uint64_t filled = 0;
  if (ploop_delta_fill_holes(path, &filled) < 0)
    return cli_lib_error();
  if (filled && !o->silent)
    printf("%s: %" PRIu64 " bytes of holes filled\n", path, filled);
  return EXIT_OK;
}

static int run_check(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"force", no_argument, NULL, 'f'},      {"hard-force", no_argument, NULL, 'F'},
      {"repair", no_argument, NULL, 'P'},     {"ro", no_argument, NULL, 'r'},
      {"check", no_argument, NULL, 'c'},      {"silent", no_argument, NULL, 's'},
      {"drop-inuse", no_argument, NULL, 'd'}, {"raw", no_argument, NULL, 'R'},
      {"blocksize", required_argument, NULL, 'b'}, {"repair-sparse", no_argument, NULL, 'S'},
      {0},
  };
  struct check_opts o = {0};
  bool repair = false, drop = false, ro = false;
  uint64_t blocksize = 0;
  int c;
  while ((c = cli_getopt(argc, argv, "fFrcsdRb:S", longopts)) != -1) {
    switch (c) {
    case 'f':
      o.force = true;
      break;
    case 'F':
      o.force = repair = true;
      break;
    case 'P': /* our long spelling: repair everything, the mark included */
      o.force = repair = drop = true;
      break;
    case 'r':
      ro = true;
      break;
    case 'd':
      drop = true;
      break;
    case 'c':
      break; /* duplicate clusters are always looked for */
    case 's':
      o.silent = true;
      break;
    case 'R':
      o.raw = true;
      break;
    case 'b':
      if (!cli_parse_uint("-b", optarg, PLOOP_MIN_CLUSTER_SECTORS, PLOOP_MAX_CLUSTER_SECTORS, &blocksize))
        return EXIT_USAGE;
      break;
    case 'S':
      o.sparse = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK or DELTA"))
    return EXIT_USAGE;
  const char *path = argv[optind];
  if (o.raw && !blocksize)
    return cli_usage_error("-R (raw image) needs -b CLUSTER_SECTORS");
  /* -r wins, as in OpenVZ: an admin asking for read-only never gets writes. */
  if (ro) {
    o.flags |= PLOOP_CHECK_READONLY;
    o.sparse = false;
  } else {
    o.flags |= (repair ? PLOOP_CHECK_REPAIR : 0) | (drop ? PLOOP_CHECK_DROP_INUSE : 0);
    if (repair && !drop)
      o.flags |= PLOOP_CHECK_KEEP_INUSE;
  }
  if (ro && drop)
    o.flags |= PLOOP_CHECK_DROP_INUSE; /* only to say why the mark stays (exit 7) */
  if (o.force)
    o.flags |= PLOOP_CHECK_FORCE;
  enum cli_target t;
  int rc = cli_classify(path, &t);
  if (rc)
    return rc;
  if (o.raw) {
    if (t != CLI_TARGET_DELTA)
      return cli_usage_error("-R checks one raw image file, not a disk");
    if (!o.silent)
      printf("%s: raw image: no header or BAT to check\n", path);
    return EXIT_OK;
  }
  rc = t == CLI_TARGET_DELTA ? check_delta(path, &o) : check_disk(path, &o);
  if (rc == EXIT_OK && o.sparse && t == CLI_TARGET_DELTA)
    rc = fill_sparse(path, &o);
  return rc;
}

/* check and fsck (OpenVZ's other spelling) say the same. */
static const char check_details[] =
    "OpenVZ's flags, with OpenVZ's meaning:\n"
    "  -f, --force          check even if the image is not marked in use (without it\n"
    "                       a delta closed cleanly is not walked)\n"
    "  -F, --hard-force     -f, and repair: bad BAT slots are cleared, an interrupted\n"
    "                       conversion undone, the file size fixed; the in-use mark\n"
    "                       stays unless -d is given too (exit 37)\n"
    "  -d, --drop-inuse     clear the in-use mark when nothing else is wrong\n"
    "  -r, --ro             read-only: never write to the image, whatever else is given\n"
    "  -c, --check          look for clusters used twice (always done; accepted)\n"
    "  -s, --silent         print nothing when the image is clean\n"
    "  -S, --repair-sparse  fill holes of the file with zeros (OpenVZ refuses sparse images)\n"
    "  -R, --raw -b SECTORS the file is a raw image: nothing to check\n"
    "      --repair         repair everything, the in-use mark included (= -F -d)\n"
    "Without -F, -d or -S nothing on disk changes.\n"
    "Each problem is printed on its own line to stdout.  Unreferenced (lost)\n"
    "clusters are reported but are not corruption.  Exit 0: clean, skipped or\n"
    "repaired; 11: problems remain; 37: still marked in use; 7: -r -d on an image\n"
    "marked in use; 4: cannot open; 17: the disk is served.\n";

const struct cli_verb verb_check = {
    .name = "check",
    .run = run_check,
    .synopsis = "check [-fFcrsdS] [--repair] [-R -b SECTORS] DELTA|DISK",
    .summary = "check (and with -F repair) a delta file or a whole disk",
    .details = check_details,
};

const struct cli_verb verb_fsck = {
    .name = "fsck",
    .run = run_check,
    .synopsis = "fsck [-fFcrsdS] [--repair] [-R -b SECTORS] DELTA|DISK",
    .summary = "same as check (OpenVZ's other spelling)",
    .details = check_details,
};
