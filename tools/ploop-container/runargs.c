/* ROOT/NAME/run-args (see runargs.h). */
#include "runargs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "migrate-proto.h"
#include "util.h"

char *ct_runargs_format(const struct ct_runargs *r)
{
  const struct ct_run_opts *o = &r->o;
  cleanup_free char *host = mig_hex(o->hostname);
  char *s = xasprintf("memory=%" PRIu64 "\nswap=%" PRIu64 "\nswap_set=%d\npids=%" PRIu64
                      "\nhostname=%s\nnet=%s\nuserns=%d\nargc=%d\n",
                      o->memory, o->swap, o->swap_set, o->pids, host,
                      o->net == CT_NET_HOST ? "host" : "none", o->userns, r->argc);
  for (int i = 0; i < r->argc; i++) {
    cleanup_free char *h = mig_hex(r->argv[i]);
    char *t = xasprintf("%sarg%d=%s\n", s, i, h);
    free(s);
    s = t;
  }
  return s;
}

int ct_runargs_parse(const char *text, struct ct_runargs *r)
{
  memset(r, 0, sizeof *r);
  uint64_t v, argc;
  if (mig_kv_u64(text, "memory", &r->o.memory) < 0 || mig_kv_u64(text, "swap", &r->o.swap) < 0 ||
      mig_kv_u64(text, "pids", &r->o.pids) < 0 || mig_kv_u64(text, "swap_set", &v) < 0)
    return -1;
  r->o.swap_set = v != 0;
  if (mig_kv_u64(text, "userns", &v) < 0)
    return -1;
  r->o.userns = v != 0;
  char buf[160];
  if (!mig_kv(text, "net", buf, sizeof buf))
    return ct_fail(0, "run arguments lack net");
  if (strcmp(buf, "host") && strcmp(buf, "none"))
    return ct_fail(0, "run arguments: bad net '%s'", buf);
  r->o.net = strcmp(buf, "host") == 0 ? CT_NET_HOST : CT_NET_NONE;
  if (mig_kv(text, "hostname", buf, sizeof buf) && buf[0]) {
    cleanup_free char *h = mig_unhex(buf);
    if (!h || strlen(h) > 64)
      return ct_fail(0, "run arguments: bad hostname");
    snprintf(r->o.hostname, sizeof r->o.hostname, "%s", h);
  }
  if (mig_kv_u64(text, "argc", &argc) < 0)
    return -1;
  if (argc < 1 || argc > CT_RUNARGS_MAX_ARGS)
    return ct_fail(0, "run arguments: bad argc %" PRIu64, argc);
  r->argv = calloc(argc + 1, sizeof *r->argv);
  if (!r->argv)
    abort();
  for (uint64_t i = 0; i < argc; i++) {
    char key[32];
    snprintf(key, sizeof key, "arg%" PRIu64, i);
    size_t cap = strlen(text) + 1;
    cleanup_free char *hex = malloc(cap);
    if (!hex)
      abort();
    if (!mig_kv(text, key, hex, cap) || !(r->argv[i] = mig_unhex(hex))) {
      r->argc = (int)i;
      ct_runargs_free(r);
      return ct_fail(0, "run arguments: bad or missing %s", key);
    }
  }
  r->argc = (int)argc;
  if (ct_run_opts_check(&r->o) < 0) {
    ct_runargs_free(r);
    return -1;
  }
  return 0;
}

int ct_runargs_save(const char *name, const struct ct_run_opts *o, char *const *argv)
{
  struct ct_runargs r = {.o = *o};
  while (argv[r.argc] && r.argc < CT_RUNARGS_MAX_ARGS)
    r.argc++;
  r.argv = (char **)argv;
  cleanup_free char *s = ct_runargs_format(&r);
  cleanup_free char *path = ct_path(name, "run-args");
  return write_file_atomic(path, s, strlen(s), false);
}

int ct_runargs_load(const char *name, struct ct_runargs *r)
{
  memset(r, 0, sizeof *r);
  cleanup_free char *path = ct_path(name, "run-args");
  FILE *f = fopen(path, "re");
  if (!f)
    return errno == ENOENT ? 0 : ct_fail(errno, "open %s", path);
  char *text = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&text, &cap, 0, f);
  fclose(f);
  if (n < 0) {
    free(text);
    return ct_fail(0, "read %s", path);
  }
  int rc = ct_runargs_parse(text, r);
  free(text);
  return rc < 0 ? ct_wrap("%s", path) : 1;
}

void ct_runargs_free(struct ct_runargs *r)
{
  if (r->argv)
    for (int i = 0; i < r->argc; i++)
      free(r->argv[i]);
  free(r->argv);
  r->argv = NULL;
  r->argc = 0;
}
