/* What `create` and `update` saved in ROOT/NAME/config beyond the basics
 * (the veth network, memory and swap, CPU and I/O limits) travels in HELLO
 * as `config=HEX`, so that every later run at the destination, not only the
 * migrated one, has the same network and limits. The destination takes
 * only the keys it knows, each checked as its command-line option. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "migrate-internal.h"
#include "migrate-proto.h"
#include "net.h"
#include "resources.h"
#include "util.h"

static const char *const net_keys[] = {"ip", "gateway", "host_ip", "bridge"};

char *mig_config_extra(const char *name)
{
  char *text = xasprintf("%s", "");
  char v[256];
  const char *keys[32];
  size_t n = 0;
  keys[n++] = "net";
  for (size_t i = 0; i < 4; i++)
    keys[n++] = net_keys[i];
  keys[n++] = "memory";
  keys[n++] = "swap";
  for (size_t i = 0; ct_res_keys[i]; i++)
    keys[n++] = ct_res_keys[i];
  for (size_t i = 0; i < n; i++)
    if (ct_kv_get(name, "config", keys[i], v, sizeof v) > 0) {
      char *t = xasprintf("%s%s=%s\n", text, keys[i], v);
      free(text);
      text = t;
    }
  char *hex = mig_hex(text);
  free(text);
  return hex;
}

/* Checks the peer's config text; on success *OUT holds it as kv strings. */
int mig_config_parse(const char *hex, char ***out, size_t *nout)
{
  *out = NULL;
  *nout = 0;
  cleanup_free char *text = mig_unhex(hex);
  if (!text)
    return ct_fail(0, "HELLO: bad config");
  struct ct_netcfg net = {0};
  struct ct_res res = {0};
  char v[256];
  if (mig_kv(text, "net", v, sizeof v)) {
    if (strcmp(v, "veth") && strcmp(v, "none"))
      return ct_fail(0, "HELLO: config net '%s' is not veth or none", v);
    net.veth = strcmp(v, "veth") == 0;
  }
  for (int i = 0; i < 4; i++)
    if (mig_kv(text, net_keys[i], v, sizeof v) && v[0] && ct_net_opt(0x140 + i, v, &net) < 0)
      return ct_wrap("HELLO: config");
  if (ct_net_check(&net) < 0)
    return ct_wrap("HELLO: config");
  for (int i = 0; ct_res_keys[i]; i++)
    if (mig_kv(text, ct_res_keys[i], v, sizeof v) && ct_res_set_key(&res, ct_res_keys[i], v) < 0)
      return ct_wrap("HELLO: config");
  uint64_t x;
  if ((mig_kv(text, "memory", v, sizeof v) && mig_kv_u64(text, "memory", &x) < 0) ||
      (mig_kv(text, "swap", v, sizeof v) && mig_kv_u64(text, "swap", &x) < 0))
    return ct_wrap("HELLO: config");
  /* Only lines of known keys are kept, in their order. */
  char **kv = calloc(40, sizeof *kv);
  if (!kv)
    abort();
  size_t n = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < 40; l = strtok_r(NULL, "\n", &save)) {
    size_t kl = strcspn(l, "=");
    bool known = (kl == 3 && !strncmp(l, "net", 3)) || (kl == 6 && !strncmp(l, "memory", 6)) ||
                 (kl == 4 && !strncmp(l, "swap", 4));
    for (int i = 0; !known && i < 4; i++)
      known = strlen(net_keys[i]) == kl && !strncmp(l, net_keys[i], kl);
    for (int i = 0; !known && ct_res_keys[i]; i++)
      known = strlen(ct_res_keys[i]) == kl && !strncmp(l, ct_res_keys[i], kl);
    if (known && l[kl] == '=')
      kv[n++] = xasprintf("%s", l);
  }
  *out = kv;
  *nout = n;
  return 0;
}

int mig_config_apply(const char *name, char **kv, size_t n)
{
  return n ? ct_kv_set(name, "config", (const char *const *)kv, n, true) : 0;
}

void mig_config_free(char **kv, size_t n)
{
  for (size_t i = 0; i < n; i++)
    free(kv[i]);
  free(kv);
}
