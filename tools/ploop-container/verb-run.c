/* `run NAME [limits] [-- CMD]` (foreground, the process is the monitor) and
 * `start` (the same, detached: a forked monitor, output to console.log). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monitor.h"
#include "container.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

/* A parse error is the caller's fault: exit code 2. */
static int usage_error(void)
{
  ct_set_error_code(CT_EXIT_USAGE);
  return -1;
}

/* --memory/--swap on the command line win over the limits `update` saved. */
static bool memory_given;
/* --net given: this run's network; else the one saved in the config (veth). */
static bool net_given;

/* What `update` saved in the config is the default of every run. */
static int saved_limits(const char *name, struct ct_run_opts *o)
{
  struct ct_res saved;
  if (ct_res_load(name, "config", &saved) < 0)
    return -1;
  ct_res_merge(&saved, &o->res);
  o->res = saved;
  char v[32];
  if (!memory_given && ct_kv_get(name, "config", "memory", v, sizeof v) > 0) {
    o->memory = strtoull(v, NULL, 10);
    if (ct_kv_get(name, "config", "swap", v, sizeof v) > 0)
      o->swap = strtoull(v, NULL, 10);
  }
  if (!net_given) {
    struct ct_netcfg n;
    if (ct_net_load(name, &n) < 0)
      return -1;
    if (n.veth) {
      o->netcfg = n;
      o->net = CT_NET_VETH;
    }
  }
  ct_net_name(&o->netcfg, name);
  return ct_run_opts_check(o);
}

static int parse_opts(int argc, char **argv, struct ct_run_opts *o)
{
  static const struct option opts[] = {
      {"memory", required_argument, NULL, 'm'}, {"swap", required_argument, NULL, 's'},
      {"pids", required_argument, NULL, 'p'},   {"hostname", required_argument, NULL, 'H'},
      {"net", required_argument, NULL, 'n'},    {"userns", no_argument, NULL, 'u'},
      {"init", no_argument, NULL, 'I'},
      CT_RES_LONGOPTS, CT_SEC_LONGOPTS, CT_NET_LONGOPTS, CT_VOLUME_LONGOPTS,
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->pids = 1024;  /* fork bombs stop here unless asked otherwise */
  int c;
  while ((c = getopt_long(argc, argv, "m:s:p:H:n:u", opts, NULL)) != -1) {
    switch (c) {
    case 'm':
      if (parse_size_arg("--memory", optarg, &o->memory) < 0)
        return usage_error();
      break;
    case 's':
      if (parse_size_arg("--swap", optarg, &o->swap) < 0)
        return usage_error();
      o->swap_set = true;
      break;
    case 'p': {
      char *end;
      errno = 0;
      long long v = strtoll(optarg, &end, 10);
      if (errno || *end || v < 0)
        return ct_usage("--pids: '%s' is not a non-negative number", optarg);
      o->pids = (uint64_t)v;
      break;
    }
    case 'H':
      if (strlen(optarg) == 0 || strlen(optarg) > 64)
        return ct_usage("--hostname must be 1-64 characters");
      snprintf(o->hostname, sizeof o->hostname, "%s", optarg);
      break;
    case 'n':
      if (strcmp(optarg, "none") == 0)
        o->net = CT_NET_NONE;
      else if (strcmp(optarg, "host") == 0)
        o->net = CT_NET_HOST;
      else if (strcmp(optarg, "veth") == 0)
        o->net = CT_NET_VETH;
      else
        return ct_usage("--net: '%s' is not none, host or veth", optarg);
      net_given = true;
      break;
    case 'u':
      o->userns = true;
      break;
    case 'I':
      o->init = true;
      break;
    default: {
      int r = ct_res_opt(c, optarg, argc, argv, &o->res);
      if (r == 0)
        r = ct_sec_opt(c, optarg, &o->sec);
      if (r == 0)
        r = ct_net_opt(c, optarg, &o->netcfg);
      if (r == 0)
        r = ct_volume_opt(c, optarg, &o->vol);
      if (r < 0)
        return -1;
      if (r == 0)
        return ct_usage("%s: bad option '%s' (see --help)", argv[0], argv[optind - 1]);
    }
    }
  }
  memory_given = o->memory || o->swap_set;
  o->netcfg.veth = o->net == CT_NET_VETH;
  o->netcfg.set = o->netcfg.set || o->netcfg.veth;
  return ct_net_check(&o->netcfg);
}

/* Each run's output in console.log begins with one line saying when it
 * started and what it runs (`logs` shows the file). */
static void log_header(char **cmd)
{
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  printf("--- ploop-container: run started %s:", when);
  for (char **a = cmd; *a; a++)
    printf(" %s", *a);
  printf(" ---\n");
  fflush(stdout);
}

static int start_detached(const char *name, int lock, const struct ct_run_opts *o, char **cmd)
{
  int report_in, report;
  pid_t pid = monitor_fork(name, lock, false, &report_in, &report);
  if (pid < 0)
    return -1;
  if (pid == 0) {
    log_header(cmd);
    int rc = container_run(name, lock, o, cmd, report);
    _exit(rc < 0 ? 1 : rc);
  }
  return monitor_started(name, report_in);
}

int verb_run(int argc, char **argv)
{
  struct ct_run_opts o;
  if (parse_opts(argc, argv, &o) < 0)
    return -1;
  o.detach = strcmp(argv[0], "start") == 0;
  if (optind >= argc)
    return ct_usage("usage: %s NAME [options] [-- CMD...]", argv[0]);
  const char *name = argv[optind];
  static char *default_cmd[] = {"/bin/sh", NULL};
  char **cmd = optind + 1 < argc ? &argv[optind + 1] : default_cmd;
  if (ct_require(name) < 0 || saved_limits(name, &o) < 0)
    return -1;
  cleanup_close int lock = ct_lock(name);
  if (lock < 0)
    return -1;
  if (o.detach)
    return start_detached(name, lock, &o, cmd) < 0 ? -1 : 0;
  return container_run(name, lock, &o, cmd, -1);
}
