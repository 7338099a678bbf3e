/* `update NAME [--memory M] [--swap S] [--pids N] [--cpus ..] [--io-limit ..]`:
 * changes the limits of a running container live (as vzctl set does) and
 * saves them in its config, so every later run and a migration keep them;
 * on a stopped container only the config changes. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cgroup.h"
#include "config.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

struct update {
  bool mem, swap, pids, json;
  uint64_t memory, swap_bytes, pid_max;
  struct ct_res res;
};

static int usage_error(void)
{
  ct_set_error_code(CT_EXIT_USAGE);
  return -1;
}

static int parse(int argc, char **argv, struct update *u)
{
  static const struct option opts[] = {{"memory", required_argument, NULL, 'm'},
                                       {"swap", required_argument, NULL, 's'},
                                       {"pids", required_argument, NULL, 'p'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"json", no_argument, NULL, 'j'},
                                       CT_RES_LONGOPTS,
                                       {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "m:s:p:h", opts, NULL)) != -1) {
    switch (c) {
    case 'm':
      u->mem = true;
      if (parse_size_arg("--memory", optarg, &u->memory) < 0)
        return usage_error();
      break;
    case 's':
      u->swap = true;
      if (parse_size_arg("--swap", optarg, &u->swap_bytes) < 0)
        return usage_error();
      break;
    case 'p': {
      char *end;
      errno = 0;
      long long v = strtoll(optarg, &end, 10);
      if (errno || *end || end == optarg || v < 0)
        return ct_usage("--pids: '%s' is not a non-negative number", optarg);
      u->pids = true;
      u->pid_max = (uint64_t)v;
      break;
    }
    case 'j':
      u->json = true;
      break;
    case 'h':
      printf("usage: update NAME [--memory M] [--swap S] [--pids N] " CT_RES_USAGE "\n"
             "Changes a running container's limits live and saves them in its config.\n");
      return 1;
    default: {
      int r = ct_res_opt(c, optarg, argc, argv, &u->res);
      if (r < 0)
        return -1;
      if (r == 0)
        return ct_usage("update: bad option '%s' (see update --help)", argv[optind - 1]);
    }
    }
  }
  if (optind + 1 != argc)
    return ct_usage("usage: update NAME [limits] (see update --help)");
  if (!u->mem && !u->swap && !u->pids && !u->res.set)
    return ct_usage("update: no limit given (see update --help)");
  return 0;
}

/* The current RAM/swap (state when running, else config) with the new values on top. */
static int memory_after(const char *name, bool running, struct update *u, struct ct_run_opts *o)
{
  char v[32];
  const char *file = running ? "state" : "config";
  memset(o, 0, sizeof *o);
  if (ct_kv_get(name, file, "memory", v, sizeof v) > 0)
    o->memory = strtoull(v, NULL, 10);
  if (ct_kv_get(name, file, "swap", v, sizeof v) > 0)
    o->swap = strtoull(v, NULL, 10);
  if (u->mem)
    o->memory = u->memory;
  if (u->mem && !u->swap)
    o->swap = u->memory ? o->swap : 0;
  if (u->swap) {
    o->swap = u->swap_bytes;
    o->swap_set = true;
  }
  o->pids = u->pids ? u->pid_max : 0;
  return ct_run_opts_check(o);
}

static int apply_live(const char *name, const struct update *u, const struct ct_run_opts *o)
{
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  int rc = 0;
  if (u->mem || u->swap)
    rc = cg_set_memory(&cg, o->memory, o->swap);
  if (rc == 0 && u->pids) {
    const char *dir = cg.mode == CG_UNIFIED ? cg.unified : cg.pids;
    cleanup_free char *p = xasprintf("%s/pids.max", dir);
    char v[32];
    snprintf(v, sizeof v, u->pid_max ? "%" PRIu64 : "max", u->pid_max);
    rc = write_file(p, v);
  }
  if (rc == 0 && u->res.set) {
    cleanup_free char *mnt = ct_path(name, "rootfs");
    struct stat st;
    if (stat(mnt, &st) < 0)
      rc = ct_fail(errno, "stat %s", mnt);
    else if ((rc = cg_ensure_optional(&cg)) == 0)
      rc = cg_res_apply(&cg, &u->res, st.st_dev);
  }
  cg_free(&cg);
  return rc;
}

static int save(const char *name, const char *file, const struct update *u,
                const struct ct_run_opts *o, bool durable)
{
  char *kv[3];
  size_t n = 0;
  if (u->mem || u->swap) {
    kv[n++] = xasprintf("memory=%" PRIu64, o->memory);
    kv[n++] = xasprintf("swap=%" PRIu64, o->swap);
  }
  if (u->pids)
    kv[n++] = xasprintf("pids=%" PRIu64, u->pid_max);
  int rc = n ? ct_kv_set(name, file, (const char *const *)kv, n, durable) : 0;
  for (size_t i = 0; i < n; i++)
    free(kv[i]);
  if (rc == 0)
    rc = ct_res_save(name, file, &u->res, durable);
  return rc;
}

int verb_update(int argc, char **argv)
{
  struct update u;
  memset(&u, 0, sizeof u);
  int rc = parse(argc, argv, &u);
  if (rc != 0)
    return rc < 0 ? -1 : 0;
  const char *name = argv[optind];
  if (ct_require(name) < 0)
    return -1;
  /* A stopped container's config must not change under a starting monitor. */
  cleanup_close int lock = -1;
  struct ct_state st;
  bool running = ct_state_load(name, &st) > 0 && ct_state_running(&st);
  if (!running) {
    lock = ct_lock(name);
    if (lock < 0)
      return -1;
  }
  struct ct_run_opts o;
  if (memory_after(name, running, &u, &o) < 0)
    return -1;
  if (running && (apply_live(name, &u, &o) < 0 || save(name, "state", &u, &o, false) < 0))
    return ct_wrap("update %s", name);
  if (save(name, "config", &u, &o, true) < 0)
    return ct_wrap("update %s", name);
  if (u.json) {
    /* What is in force now: the saved values with this update on top. */
    char v[32];
    uint64_t pids = 0;
    if (u.pids)
      pids = u.pid_max;
    else if (ct_kv_get(name, running ? "state" : "config", "pids", v, sizeof v) > 0)
      pids = strtoull(v, NULL, 10);
    printf("{\"name\": ");
    json_string(stdout, name);
    printf(", \"running\": %s, \"memory\": %" PRIu64 ", \"swap\": %" PRIu64 ", \"pids\": %" PRIu64 "}\n",
           running ? "true" : "false", o.memory, o.swap, pids);
  }
  return 0;
}
