/* ROOT/NAME/run-args (see runargs.h). */
#include "runargs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "migrate-proto.h"
#include "net.h"
#include "resources.h"
#include "security.h"
#include "volume.h"
#include "util.h"

/* The hex-encoded value of KEY in TEXT, decoded (malloc'd); NULL when it
 * is missing or not hex. */
static char *kv_unhex(const char *text, const char *key)
{
  size_t cap = strlen(text) + 1;
  cleanup_free char *hex = malloc(cap);
  if (!hex)
    abort();
  return mig_kv(text, key, hex, cap) ? mig_unhex(hex) : NULL;
}

static void append(char **s, char *line)
{
  char *t = xasprintf("%s%s\n", *s, line);
  free(*s);
  free(line);
  *s = t;
}

/* Every option of the run: limits, --init, capabilities, seccomp, the
 * read-only root, the veth network and the volumes travel with it, so the
 * destination (and a restart there) runs it as confined as it was here. */
char *ct_runargs_format(const struct ct_runargs *r)
{
  const struct ct_run_opts *o = &r->o;
  cleanup_free char *host = mig_hex(o->hostname);
  const char *net = o->net == CT_NET_HOST ? "host" : o->net == CT_NET_VETH ? "veth" : "none";
  char *s = xasprintf("memory=%" PRIu64 "\nswap=%" PRIu64 "\nswap_set=%d\npids=%" PRIu64
                      "\nhostname=%s\nnet=%s\nuserns=%d\ninit=%d\nargc=%d\n",
                      o->memory, o->swap, o->swap_set, o->pids, host, net, o->userns, o->init, r->argc);
  for (int i = 0; i < r->argc; i++) {
    cleanup_free char *h = mig_hex(r->argv[i]);
    append(&s, xasprintf("arg%d=%s", i, h));
  }
  if (o->net == CT_NET_VETH)
    append(&s, xasprintf("ip=%s\ngateway=%s\nhost_ip=%s\nbridge=%s", o->netcfg.ip, o->netcfg.gateway,
                         o->netcfg.host_ip, o->netcfg.bridge));
  char *kv[CT_RES_KV_MAX > CT_SEC_KV ? CT_RES_KV_MAX : CT_SEC_KV];
  size_t n = ct_res_kv(&o->res, kv);
  for (size_t i = 0; i < n; i++)
    append(&s, kv[i]);
  ct_sec_kv(&o->sec, kv);
  for (size_t i = 0; i < CT_SEC_KV; i++)
    append(&s, kv[i]);
  append(&s, xasprintf("volumes=%zu", o->vol.n));
  for (size_t i = 0; i < o->vol.n; i++) {
    cleanup_free char *spec =
        xasprintf("%s:%s:%s", o->vol.v[i].host, o->vol.v[i].ct, o->vol.v[i].ro ? "ro" : "rw");
    cleanup_free char *h = mig_hex(spec);
    append(&s, xasprintf("volume%zu=%s", i, h));
  }
  return s;
}

/* The options after the command: each checked as the same option given on
 * the command line would be (the text may come from a peer). */
static int parse_options(const char *text, struct ct_run_opts *o)
{
  char v[256];
  if (mig_kv(text, "init", v, sizeof v))
    o->init = strcmp(v, "1") == 0;
  for (int i = 0; ct_res_keys[i]; i++)
    if (mig_kv(text, ct_res_keys[i], v, sizeof v) && ct_res_set_key(&o->res, ct_res_keys[i], v) < 0)
      return ct_wrap("run arguments");
  static const char *const sec_keys[] = {"cap_add", "cap_drop", "seccomp", "read_only"};
  for (size_t i = 0; i < sizeof sec_keys / sizeof sec_keys[0]; i++)
    if (mig_kv(text, sec_keys[i], v, sizeof v) && ct_sec_set_key(&o->sec, sec_keys[i], v) < 0)
      return ct_wrap("run arguments");
  if (o->net == CT_NET_VETH) {
    static const char *const net_keys[] = {"ip", "gateway", "host_ip", "bridge"};
    o->netcfg.veth = o->netcfg.set = true;
    for (int i = 0; i < 4; i++)
      if (mig_kv(text, net_keys[i], v, sizeof v) && v[0] && ct_net_opt(0x140 + i, v, &o->netcfg) < 0)
        return ct_wrap("run arguments");
    if (ct_net_check(&o->netcfg) < 0)
      return ct_wrap("run arguments");
  }
  uint64_t nvol = 0;
  if (mig_kv(text, "volumes", v, sizeof v) && mig_kv_u64(text, "volumes", &nvol) < 0)
    return -1;
  if (nvol > CT_MAX_VOLUMES)
    return ct_fail(0, "run arguments: %" PRIu64 " volumes, at most %d", nvol, CT_MAX_VOLUMES);
  for (uint64_t i = 0; i < nvol; i++) {
    char key[32];
    snprintf(key, sizeof key, "volume%" PRIu64, i);
    cleanup_free char *spec = kv_unhex(text, key);
    if (!spec)
      return ct_fail(0, "run arguments: bad or missing %s", key);
    if (ct_volume_opt(0x160, spec, &o->vol) < 0)
      return ct_wrap("run arguments");
  }
  return 0;
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
  if (strcmp(buf, "host") && strcmp(buf, "none") && strcmp(buf, "veth"))
    return ct_fail(0, "run arguments: bad net '%s'", buf);
  r->o.net = !strcmp(buf, "host") ? CT_NET_HOST : !strcmp(buf, "veth") ? CT_NET_VETH : CT_NET_NONE;
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
    if (!(r->argv[i] = kv_unhex(text, key))) {
      r->argc = (int)i;
      ct_runargs_free(r);
      return ct_fail(0, "run arguments: bad or missing %s", key);
    }
  }
  r->argc = (int)argc;
  if (parse_options(text, &r->o) < 0 || ct_run_opts_check(&r->o) < 0) {
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
  for (size_t i = 0; i < r->o.vol.n; i++)
    free(r->o.vol.v[i].host);  /* one allocation: ct points into it */
  r->o.vol.n = 0;
  if (r->argv)
    for (int i = 0; i < r->argc; i++)
      free(r->argv[i]);
  free(r->argv);
  r->argv = NULL;
  r->argc = 0;
}
