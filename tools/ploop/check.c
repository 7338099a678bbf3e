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

static int check_delta(const char *path, unsigned flags, bool silent)
{
  struct ploop_check_report r;
  memset(&r, 0, sizeof r);
  int rc = ploop_delta_check(path, flags, &r);
  if (rc < 0)
    return cli_lib_error();
  char text[8192] = "";
  ploop_check_report_format(&r, text, sizeof text);
  bool broken = rc > 0 && report_broken(&r);
  if (!silent || broken || r.repaired)
    print_lines(text);
  if (r.repaired) {
    printf("%s: repaired\n", path);
    return EXIT_OK;
  }
  if (broken) {
    char first[1024];
    if (r.header_bad)
      return cli_error(EXIT_CORRUPT, "%s: unusable header: %s", path, r.header_problem);
    return cli_error(EXIT_CORRUPT, "%s: corrupt: %s", path,
                     first_problem(text, first, sizeof first));
  }
  if (!silent) {
    if (r.clusters_lost)
      printf("%s: %" PRIu64 " lost clusters (unreferenced; space only, no data at risk)\n", path,
             r.clusters_lost);
    printf("%s: clean\n", path);
  }
  return EXIT_OK;
}

static int check_disk(const char *path, unsigned flags, bool silent)
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
  int rc = ploop_disk_check(path, flags, msg, sizeof msg);
  if (rc < 0)
    return cli_lib_error();
  bool repaired = (flags & PLOOP_CHECK_REPAIR) && strstr(msg, "repaired");
  if (!silent || rc > 0 || repaired)
    print_lines(msg);
  if (rc > 0) {
    char first[1024];
    return cli_error(EXIT_CORRUPT, "%s: corrupt: %s", path, first_problem(msg, first, sizeof first));
  }
  if (!silent)
    printf("%s: %s\n", path, repaired ? "repaired" : "clean");
  return EXIT_OK;
}

static int run_check(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"force", no_argument, NULL, 'f'},     {"hard-force", no_argument, NULL, 'F'},
      {"repair", no_argument, NULL, 'r'},    {"ro", no_argument, NULL, 'R'},
      {"check", no_argument, NULL, 'c'},     {"silent", no_argument, NULL, 's'},
      {0},
  };
  unsigned flags = 0;
  bool silent = false;
  int c;
  while ((c = cli_getopt(argc, argv, "fFrcs", longopts)) != -1) {
    switch (c) {
    case 'f':
      flags |= PLOOP_CHECK_FORCE;
      break;
    case 'F':
    case 'r':
      flags |= PLOOP_CHECK_FORCE | PLOOP_CHECK_REPAIR;
      break;
    case 'R':
      flags |= PLOOP_CHECK_READONLY;
      break;
    case 'c':
      break; /* duplicate clusters are always looked for */
    case 's':
      silent = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if ((flags & PLOOP_CHECK_READONLY) && (flags & PLOOP_CHECK_REPAIR))
    return cli_usage_error("--ro (read-only) and -r/-F (repair) exclude each other");
  if (!cli_positional(argc, argv, 1, "DISK or DELTA"))
    return EXIT_USAGE;
  const char *path = argv[optind];
  enum cli_target t;
  int rc = cli_classify(path, &t);
  if (rc)
    return rc;
  return t == CLI_TARGET_DELTA ? check_delta(path, flags, silent) : check_disk(path, flags, silent);
}

const struct cli_verb verb_check = {
    .name = "check",
    .run = run_check,
    .synopsis = "check [-f] [-r|-F] [--ro] [-c] [-s] DELTA|DISK",
    .summary = "check (and with -r repair) a delta file or a whole disk",
    .details =
        "  -f, --force        check even if the image is not marked in use\n"
        "  -r, --repair       repair what can be repaired: bad BAT slots are cleared,\n"
        "                     an interrupted conversion undone, the in-use mark dropped\n"
        "  -F, --hard-force   the same as -r (OpenVZ's spelling)\n"
        "      --ro           read-only: never write to the image (the default)\n"
        "  -c, --check        look for clusters used twice (always done; accepted)\n"
        "  -s, --silent       print nothing when the image is clean\n"
        "Without -r nothing on disk changes.\n"
        "Each problem is printed on its own line to stdout.  Unreferenced (lost)\n"
        "clusters are reported but are not corruption.  Exit 0: clean or\n"
        "repaired; exit 3: problems remain.\n",
};
