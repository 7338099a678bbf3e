/* Shared helpers of the ploop CLI: errors printed once at the top, exit codes,
 * option and value parsing, the terminal progress bar, JSON string output. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *cli_verb_name;

static volatile sig_atomic_t caught_signal;

static void on_signal(int sig)
{
  if (!caught_signal)
    caught_signal = sig;
  ploop_cancel();
}

void cli_catch_signals(void)
{
  /* No SA_RESTART: a read of a pipe or socket returns EINTR and the library
   * looks at the cancel flag at once. */
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

int cli_caught_signal(void)
{
  return caught_signal;
}

static void __attribute__((format(printf, 1, 0)))
vprint_error(const char *fmt, va_list ap, const char *suffix)
{
  /* Everything goes out in one write so the message stays one line even when
   * a progress bar was drawn or another process shares the terminal. */
  char msg[2048];
  int n = 0;
  if (cli_verb_name)
    n = snprintf(msg, sizeof msg, "ploop %s: ", cli_verb_name);
  else
    n = snprintf(msg, sizeof msg, "ploop: ");
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  /* Library messages and file names must not break the one-line rule. */
  for (char *c = msg; *c; c++)
    if (*c == '\n' || *c == '\r')
      *c = ' ';
  size_t len = strlen(msg);
  snprintf(msg + len, sizeof msg - len, "%s\n", suffix ? suffix : "");
  fflush(stdout);
  fputs(msg, stderr);
}

int cli_error(int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vprint_error(fmt, ap, NULL);
  va_end(ap);
  return code;
}

int cli_exit_from_status(int status)
{
  switch (status) {
  case PLOOP_OK:
  case PLOOP_ERR_GENERIC:
    return EXIT_GENERIC;
  case PLOOP_ERR_PARAM:
    return EXIT_USAGE;
  case PLOOP_ERR_CORRUPT:
    return EXIT_CORRUPT;
  case PLOOP_ERR_IO:
    return EXIT_IO;
  case PLOOP_ERR_BUSY:
    return EXIT_BUSY;
  case PLOOP_ERR_NOTFOUND:
    return EXIT_NOTFOUND;
  case PLOOP_ERR_NOSNAP:
    return EXIT_NOSNAP;
  case PLOOP_ERR_READ:
    return EXIT_READ;
  case PLOOP_ERR_CANCELLED:
    return cli_caught_signal() == SIGTERM ? EXIT_SIGTERM : EXIT_SIGINT;
  default:
    return EXIT_GENERIC;
  }
}

int cli_lib_error(void)
{
  const char *lib = ploop_get_error();
  int status = ploop_get_status();
  if (status == PLOOP_ERR_CANCELLED) {
    /* What an interrupted verb leaves is its own business (README); the
     * line says only what happened. */
    cli_error(0, "interrupted by %s", cli_caught_signal() == SIGTERM ? "SIGTERM" : "SIGINT");
    return cli_exit_from_status(status);
  }
  if (!lib || !*lib) {
    int e = ploop_get_errno();
    lib = e ? strerror(e) : "unknown error";
  }
  cli_error(0, "%s", lib);
  return cli_exit_from_status(status);
}

int cli_usage_error(const char *fmt, ...)
{
  char hint[128];
  snprintf(hint, sizeof hint, " (see 'ploop %s --help')", cli_verb_name ? cli_verb_name : "");
  if (!cli_verb_name)
    snprintf(hint, sizeof hint, " (see 'ploop help')");
  va_list ap;
  va_start(ap, fmt);
  vprint_error(fmt, ap, hint);
  va_end(ap);
  return EXIT_USAGE;
}

void cli_print_verb_help(const struct cli_verb *v, FILE *f)
{
  fprintf(f, "usage: ploop %s\n\n%s\n", v->synopsis, v->summary);
  if (v->details && *v->details)
    fprintf(f, "\n%s", v->details);
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
  /* Our own table with --help appended, and a leading ':' so a missing
   * argument is told apart from an unknown option. */
  struct option all[32];
  size_t n = 0;
  for (; longopts && longopts[n].name && n < 30; n++)
    all[n] = longopts[n];
  all[n++] = (struct option){"help", no_argument, NULL, 'h'};
  all[n] = (struct option){0};
  char opts[64];
  snprintf(opts, sizeof opts, ":%sh", shortopts);

  opterr = 0;
  int c = getopt_long(argc, argv, opts, all, NULL);
  if (c == 'h') {
    const struct cli_verb *v = cli_find_verb(cli_verb_name);
    if (v)
      cli_print_verb_help(v, stdout);
    return 'h';
  }
  if (c == ':') {
    cli_usage_error("option '%s' needs a value", argv[optind - 1]);
    return '?';
  }
  if (c == '?') {
    if (optopt)
      cli_usage_error("unknown option '-%c'", optopt);
    else
      cli_usage_error("unknown option '%s'", argv[optind - 1]);
    return '?';
  }
  return c;
}

bool cli_positional(int argc, char **argv, int n, const char *what)
{
  int have = argc - optind;
  if (have < n) {
    cli_usage_error("missing %s", what);
    return false;
  }
  if (have > n) {
    cli_usage_error("unexpected argument '%s'", argv[optind + n]);
    return false;
  }
  return true;
}

bool cli_parse_size(const char *opt, const char *s, uint64_t *out)
{
  if (ploop_parse_size(s, out) < 0) {
    cli_usage_error("%s: invalid size '%s' (a number with an optional K, M, G or T suffix)", opt,
                    s);
    return false;
  }
  return true;
}

bool cli_parse_uint(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-' || v < min || v > max) {
    cli_usage_error("%s: invalid value '%s' (expected %" PRIu64 "..%" PRIu64 ")", opt, s, min,
                    max);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_uuid(const char *opt, const char *s, char *out)
{
  if (ploop_uuid_normalize(s, out) < 0) {
    cli_usage_error("%s: invalid UUID '%s'", opt, s);
    return false;
  }
  return true;
}

int cli_classify(const char *path, enum cli_target *out)
{
  struct stat st;
  if (stat(path, &st) < 0)
    return cli_error(EXIT_NOTFOUND, "%s: %s", path, strerror(errno)); /* cannot open: SYSEXIT_OPEN */
  if (S_ISDIR(st.st_mode)) {
    *out = CLI_TARGET_DISK;
    return 0;
  }
  size_t len = strlen(path);
  if (len >= 4 && strcmp(path + len - 4, ".xml") == 0) {
    *out = CLI_TARGET_DISK;
    return 0;
  }
  char head[16] = {0};
  /* Non-blocking: a FIFO named here must fail now, not wait for a writer. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return cli_error(EXIT_NOTFOUND, "%s: %s", path, strerror(errno)); /* cannot open: SYSEXIT_OPEN */
  struct stat fst;
  if (fstat(fd, &fst) == 0 && !S_ISREG(fst.st_mode)) {
    close(fd);
    return cli_error(EXIT_USAGE, "%s: not a regular file, a directory or a disk descriptor", path);
  }
  ssize_t got = read(fd, head, sizeof head);
  close(fd);
  *out = CLI_TARGET_DELTA;
  for (ssize_t i = 0; i < got; i++) {
    if (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')
      continue;
    if (head[i] == '<')
      *out = CLI_TARGET_DISK;
    break;
  }
  return 0;
}

uint64_t cli_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *cli_human_bytes(uint64_t bytes, char *buf, size_t len)
{
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

void cli_progress_init(struct cli_progress *p, const char *label)
{
  *p = (struct cli_progress){.label = label, .last_permille = -1};
  p->enabled = isatty(STDERR_FILENO) && !getenv("PLOOP_NO_PROGRESS");
  p->start_ns = p->last_ns = cli_now_ns();
}

void cli_progress_cb(void *opaque, uint64_t done, uint64_t total)
{
  struct cli_progress *p = opaque;
  if (!p || !p->enabled || total == 0)
    return;
  uint64_t now = cli_now_ns();
  int permille = done >= total ? 1000 : (int)(done * 1000 / total);
  /* Redraw at most ten times a second: the callback may come per cluster. */
  if (permille == p->last_permille || (now - p->last_ns < 100000000ull && permille < 1000))
    return;
  p->last_permille = permille;
  p->last_ns = now;
  enum { WIDTH = 30 };
  char bar[WIDTH + 1];
  int fill = permille * WIDTH / 1000;
  for (int i = 0; i < WIDTH; i++)
    bar[i] = i < fill ? '#' : '.';
  bar[WIDTH] = 0;
  double secs = (double)(now - p->start_ns) / 1e9;
  char rate[32] = "";
  if (secs > 0.2) {
    char hb[24];
    snprintf(rate, sizeof rate, "%s/s", cli_human_bytes((uint64_t)((double)done / secs), hb, sizeof hb));
  }
  fprintf(stderr, "\r%s [%s] %3d.%d%% %s\033[K", p->label, bar, permille / 10, permille % 10, rate);
  p->drawn = true;
}

void cli_progress_end(struct cli_progress *p)
{
  if (p->enabled && p->drawn)
    fputs("\r\033[K", stderr);
  p->drawn = false;
}

void cli_json_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    switch (*c) {
    case '"':
      fputs("\\\"", f);
      break;
    case '\\':
      fputs("\\\\", f);
      break;
    case '\n':
      fputs("\\n", f);
      break;
    case '\t':
      fputs("\\t", f);
      break;
    default:
      if (*c < 0x20)
        fprintf(f, "\\u%04x", *c);
      else
        fputc(*c, f);
    }
  }
  fputc('"', f);
}

int cli_create_option(int opt, const char *arg, struct ploop_delta_create_params *p)
{
  uint64_t v;
  if (opt == 'v') {
    if (!cli_parse_uint("-v", arg, 1, 2, &v))
      return EXIT_USAGE;
    p->version = (int)v;
    return 0;
  }
  if (!cli_parse_uint("-b", arg, PLOOP_MIN_CLUSTER_SECTORS, PLOOP_MAX_CLUSTER_SECTORS, &v))
    return EXIT_USAGE;
  if (v & (v - 1))
    return cli_usage_error("-b: cluster size %s sectors is not a power of two", arg);
  p->cluster_sectors = (uint32_t)v;
  return 0;
}
