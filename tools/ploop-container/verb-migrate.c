/* `migrate NAME ADDR:PORT [...]` and `migrate --resolve NAME [--commit|--abort]`. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "migrate.h"
#include "migrate-tls.h"
#include "util.h"
#include "verbs.h"

static const char help[] =
    "usage: ploop-container migrate NAME ADDR:PORT [--offline] [--criu PATH | --no-criu]\n"
    "         [--keep-source] [--json] [--max-rounds N] [--min-round BYTES] [--timeout S]\n"
    "         [--auth FILE] [--tls=off|on|require] [--tls-psk FILE | --tls-certificates DIR]\n"
    "       ploop-container migrate --resolve NAME [--commit | --abort] [--to ADDR:PORT]\n"
    "         [--auth FILE] [--tls-psk FILE | --tls-certificates DIR]\n"
    "Moves NAME to the host where `ploop-container receive --listen ADDR:PORT` runs.\n"
    "Online (the default for a running container): round 0 streams the disk below a\n"
    "snapshot while the container runs; each next round streams what changed since\n"
    "the last snapshot. Live rounds stop after --max-rounds (default 8), or after a\n"
    "round under --min-round bytes (default 4M: about 35 ms on a 1 Gbit/s link), or\n"
    "after a round not at least 10% smaller than the one before. Then the container\n"
    "is frozen, its filesystem synced, the last round sent, and it starts there; it\n"
    "is removed here (--keep-source: stopped and kept). --offline: stop, copy, start.\n"
    "Any failure before the destination confirms leaves it running here.\n"
    "With CRIU (found as --criu PATH, the installed one, or criu on PATH, on both\n"
    "hosts) the processes move with their memory; else the command starts again.\n"
    "--auth FILE: a shared token (the same file as `receive --auth`); both sides\n"
    "prove they hold it before any data moves.\n"
    "--tls-psk FILE: TLS with a pre-shared key (psktool's IDENTITY:HEXKEY lines; the\n"
    "first one's identity), the receiver's --tls-psk file. --tls-certificates DIR:\n"
    "TLS with X.509: DIR/ca-cert.pem checks the receiver's certificate and its name\n"
    "(ADDR), DIR/client-cert.pem + client-key.pem are shown when present. Either one\n"
    "means --tls=require (on is the same here: a source does not fall back to\n"
    "plaintext); --tls=off refuses them. TLS and --auth are independent.\n"
    "Exit 6: in doubt (COMMIT sent, no answer): the container stays frozen here until\n"
    "`migrate --resolve NAME` asks the destination, or --commit/--abort decide.\n";

static int num_arg(const char *what, const char *s, uint64_t max, uint64_t *out)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-' || !s[0] || v > max)
    return ct_usage("%s: '%s' is not a number (at most %" PRIu64 ")", what, s, max);
  *out = v;
  return 0;
}

static void print_result(const struct mig_opts *o, const struct mig_result *r, bool json)
{
  if (json) {
    printf("{\"rounds\":[");
    for (unsigned i = 0; i < r->n_rounds; i++)
      printf("%s%" PRIu64, i ? "," : "", r->rounds[i]);
    printf("],\"bytes_sent\":%" PRIu64 ",\"downtime_ms\":%.1f,\"total_ms\":%.1f,\"criu\":%s,"
           "\"online\":%s,\"stop_reason\":\"%s\",\"criu_bytes\":%" PRIu64 ",\"dest_pre_attach_ms\":%.1f,"
           "\"shared_disk\":%s,",
           r->bytes_sent, r->downtime_ms, r->total_ms, r->criu ? "true" : "false",
           r->online ? "true" : "false", r->stop_reason ? r->stop_reason : "", r->criu_bytes,
           r->dest_pre_attach_ms, r->shared ? "true" : "false");
    if (r->shared)
      printf("\"acquire_ms\":%.1f,\"acquire_ahead\":%s,", r->acquire_ms, r->acquire_ahead ? "true" : "false");
    if (r->criu_why) {
      printf("\"criu_why\":\"");
      for (const char *c = r->criu_why; *c; c++)
        printf(*c == '"' || *c == '\\' ? "\\%c" : (unsigned char)*c < 0x20 ? " " : "%c", *c);
      printf("\",");
    }
    printf("\"hello_ms\":%.1f,\"finish_ms\":%.1f,", r->hello_ms, r->finish_ms);
    const double *per_round[] = {r->round_ms, r->round_send_ms, r->round_receive_ms};
    const char *per_round_name[] = {"round_ms", "round_send_ms", "round_receive_ms"};
    for (unsigned k = 0; k < 3; k++) {
      printf("\"%s\":[", per_round_name[k]);
      for (unsigned i = 0; i < r->n_rounds; i++)
        printf("%s%.1f", i ? "," : "", per_round[k][i]);
      printf("],");
    }
    const struct mig_phases *p = &r->ph;
    printf("\"phases_ms\":{\"freeze\":%.1f,\"sync\":%.1f,\"snapshot\":%.1f,\"checkpoint\":%.1f,"
           "\"last_round\":%.1f,\"send\":%.1f,\"dest_receive\":%.1f,\"prepare\":%.1f,\"dest_attach\":%.1f,"
           "\"commit\":%.1f,\"dest_start\":%.1f,\"fsfreeze\":%.1f,\"release\":%.1f,\"dest_mount\":%.1f}}\n",
           p->freeze, p->sync, p->snapshot, p->checkpoint, p->round, p->send, p->dest_receive, p->prepare,
           p->dest_attach, p->commit, p->dest_start, p->fsfreeze, p->release, p->dest_mount);
    return;
  }
  for (unsigned i = 0; i < r->n_rounds; i++) {
    char b[32];
    format_size(r->rounds[i], b, sizeof b);
    printf("round %u%s: %s (%" PRIu64 " bytes)\n", i,
           i + 1 == r->n_rounds ? (r->online ? " (frozen)" : " (stopped)") : "", b, r->rounds[i]);
  }
  if (r->shared)
    printf("disk in shared storage: its lock moved, no disk bytes sent\n");
  char total[32];
  format_size(r->bytes_sent, total, sizeof total);
  printf("%s moved to %s: %s sent, downtime %.1f ms, total %.1f ms, %s%s%s%s%s%s\n", o->name, o->dest,
         total, r->downtime_ms, r->total_ms, r->criu ? "processes restored" : "command restarted",
         r->criu_why ? " (" : "", r->criu_why ? r->criu_why : "", r->criu_why ? ")" : "",
         r->stop_reason ? "; live rounds stopped: " : "", r->stop_reason ? r->stop_reason : "");
}

int verb_migrate(int argc, char **argv)
{
  static const struct option opts[] = {
      {"offline", no_argument, NULL, 'o'},      {"criu", required_argument, NULL, 'c'},
      {"no-criu", no_argument, NULL, 'n'},      {"keep-source", no_argument, NULL, 'k'},
      {"json", no_argument, NULL, 'j'},         {"max-rounds", required_argument, NULL, 'r'},
      {"min-round", required_argument, NULL, 'm'}, {"timeout", required_argument, NULL, 't'},
      {"resolve", no_argument, NULL, 'R'},      {"commit", no_argument, NULL, 'C'},
      {"abort", no_argument, NULL, 'A'},        {"to", required_argument, NULL, 'T'},
      {"auth", required_argument, NULL, 'a'},   MIG_TLS_LONGOPTS,
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  struct mig_tls_args tls = {0};
  struct mig_opts o = {.max_rounds = MIG_DEFAULT_ROUNDS, .min_round = MIG_DEFAULT_MIN_ROUND,
                       .timeout_s = MIG_DEFAULT_TIMEOUT};
  bool json = false, resolve = false;
  static struct mig_auth auth;
  int decision = 0;
  const char *to = NULL;
  uint64_t v;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'o': o.offline = true; break;
    case 'c': o.criu_path = optarg; break;
    case 'n': o.no_criu = true; break;
    case 'k': o.keep_source = true; break;
    case 'j': json = true; break;
    case 'r':
      if (num_arg("--max-rounds", optarg, MIG_MAX_ROUNDS, &v) < 0)
        return -1;
      if (v < 1)
        return ct_usage("--max-rounds must be at least 1");
      o.max_rounds = (unsigned)v;
      break;
    case 'm':
      if (parse_size_arg("--min-round", optarg, &o.min_round) < 0) {
        ct_set_error_code(CT_EXIT_USAGE);
        return -1;
      }
      break;
    case 't':
      if (num_arg("--timeout", optarg, 3600, &v) < 0)
        return -1;
      if (v < 1)
        return ct_usage("--timeout must be at least 1 second");
      o.timeout_s = (unsigned)v;
      break;
    case 'R': resolve = true; break;
    case 'C': decision = 1; break;
    case 'A': decision = -1; break;
    case 'T': to = optarg; break;
    case 'a':
      if (mig_auth_load(optarg, &auth) < 0)
        return -1;
      o.auth = &auth;
      break;
    case 'h': fputs(help, stdout); return 0;
    default:
      if (mig_tls_option(&tls, c, optarg))
        break;
      return ct_usage("migrate: bad option '%s' (see migrate --help)", argv[optind - 1]);
    }
  }
  if (mig_tls_setup(&tls, false) < 0)
    return -1;
  if (resolve) {
    if (argc - optind != 1)
      return ct_usage("usage: migrate --resolve NAME [--commit | --abort] [--to ADDR:PORT] [--auth FILE]");
    return migrate_resolve(argv[optind], to, decision, o.timeout_s, o.auth) < 0 ? -1 : 0;
  }
  if (decision || to)
    return ct_usage("--commit, --abort and --to go with --resolve");
  if (argc - optind != 2)
    return ct_usage("usage: migrate NAME ADDR:PORT [options] (see migrate --help)");
  if (o.criu_path && o.no_criu)
    return ct_usage("--criu and --no-criu exclude each other");
  o.name = argv[optind];
  o.dest = argv[optind + 1];
  if (ct_check_name(o.name) < 0)
    return -1;
  struct mig_result r;
  int rc = migrate_source(&o, &r);
  if (rc == 0)
    print_result(&o, &r, json);
  return rc == 0 ? 0 : -1;
}
