/* The container's network beyond a private lo: `--net veth`, a veth pair
 * whose container end is eth0 (--ip ADDR/PREFIX, --gateway ADDR) and whose
 * host end gets --host-ip ADDR/PREFIX or joins --bridge BR. Set up with
 * rtnetlink by the monitor between clone and "go". The settings live in the
 * container's config so every later run, and a migration, recreate them. */
#ifndef CT_NET_H
#define CT_NET_H

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ct_netcfg {
  bool set;                    /* a --net veth / --ip / ... flag was given */
  bool veth;
  char ip[20], gateway[16], host_ip[20];  /* "a.b.c.d/p", "a.b.c.d", "" = none */
  char bridge[IF_NAMESIZE];
  char host_if[IF_NAMESIZE];   /* host end, filled by ct_net_name() */
};

#define CT_NET_LONGOPTS                                                         \
  {"ip", required_argument, NULL, 0x140},                                       \
      {"gateway", required_argument, NULL, 0x141},                              \
      {"host-ip", required_argument, NULL, 0x142},                              \
      {"bridge", required_argument, NULL, 0x143}

/* Handles option OPT: 1 ours, 0 not, -1 bad value (usage error set). */
int ct_net_opt(int opt, const char *arg, struct ct_netcfg *n);
/* Checks the combination (--ip needs --net veth, --gateway needs --ip...). */
int ct_net_check(const struct ct_netcfg *n);
/* Host end name for container NAME: "ve-NAME", or "ve-" + a hash of the
 * state root and name when that is too long or the root is not the default. */
void ct_net_name(struct ct_netcfg *n, const char *name);
int ct_net_save(const char *name, const struct ct_netcfg *n);
/* Fills N from the config (n->set stays false). */
int ct_net_load(const char *name, struct ct_netcfg *n);
/* Creates the pair with its container end directly in PID's network
 * namespace, configures both ends. On error nothing of it is left. */
int ct_net_setup(const struct ct_netcfg *n, pid_t pid);

#endif
