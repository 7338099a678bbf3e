/* veth networking over rtnetlink (see net.h). No iproute2 at run time: one
 * NETLINK_ROUTE socket per namespace, each request acknowledged. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "util.h"

/* "10.0.0.2/24" (PREFIX true) or "10.0.0.1". */
static int check_addr(const char *what, const char *s, bool prefix)
{
  char a[20];
  struct in_addr in;
  if (strlen(s) >= sizeof a)
    return ct_usage("%s: '%s' is not an IPv4 address%s", what, s, prefix ? "/prefix" : "");
  snprintf(a, sizeof a, "%s", s);
  char *slash = strchr(a, '/');
  if (prefix) {
    char *end;
    long p = slash ? strtol(slash + 1, &end, 10) : -1;
    if (!slash || !slash[1] || *end || p < 0 || p > 32)
      return ct_usage("%s: '%s' is not ADDRESS/PREFIX (like 10.0.0.2/24)", what, s);
    *slash = 0;
  } else if (slash) {
    return ct_usage("%s: '%s' takes no /prefix", what, s);
  }
  if (inet_pton(AF_INET, a, &in) != 1)
    return ct_usage("%s: '%s' is not an IPv4 address", what, s);
  return 0;
}

int ct_net_opt(int opt, const char *arg, struct ct_netcfg *n)
{
  switch (opt) {
  case 0x140:
    if (check_addr("--ip", arg, true) < 0)
      return -1;
    snprintf(n->ip, sizeof n->ip, "%s", arg);
    break;
  case 0x141:
    if (check_addr("--gateway", arg, false) < 0)
      return -1;
    snprintf(n->gateway, sizeof n->gateway, "%s", arg);
    break;
  case 0x142:
    if (check_addr("--host-ip", arg, true) < 0)
      return -1;
    snprintf(n->host_ip, sizeof n->host_ip, "%s", arg);
    break;
  case 0x143:
    if (!arg[0] || strlen(arg) >= IF_NAMESIZE || strchr(arg, '/') || strchr(arg, ' '))
      return ct_usage("--bridge: '%s' is not an interface name", arg);
    snprintf(n->bridge, sizeof n->bridge, "%s", arg);
    break;
  default:
    return 0;
  }
  n->set = true;
  return 1;
}

int ct_net_check(const struct ct_netcfg *n)
{
  bool extra = n->ip[0] || n->gateway[0] || n->host_ip[0] || n->bridge[0];
  if (extra && !n->veth)
    return ct_usage("--ip, --gateway, --host-ip and --bridge need --net veth");
  if (n->gateway[0] && !n->ip[0])
    return ct_usage("--gateway needs --ip (the route goes through eth0)");
  if (n->host_ip[0] && n->bridge[0])
    return ct_usage("--host-ip and --bridge exclude each other (give the bridge the address)");
  return 0;
}

void ct_net_name(struct ct_netcfg *n, const char *name)
{
  if (strcmp(ct_root, CT_DEFAULT_ROOT) == 0 && strlen(name) + 3 < IF_NAMESIZE) {
    snprintf(n->host_if, sizeof n->host_if, "ve-%s", name);
    return;
  }
  uint32_t h = 2166136261u;  /* FNV-1a of root and name, as the cgroup parent */
  for (const char *p = ct_root; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  for (const char *p = name; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  snprintf(n->host_if, sizeof n->host_if, "ve-%08x", h);
}

int ct_net_save(const char *name, const struct ct_netcfg *n)
{
  char *kv[] = {xasprintf("net=%s", n->veth ? "veth" : "none"), xasprintf("ip=%s", n->ip),
                xasprintf("gateway=%s", n->gateway), xasprintf("host_ip=%s", n->host_ip),
                xasprintf("bridge=%s", n->bridge)};
  int rc = ct_kv_set(name, "config", (const char *const *)kv, 5, true);
  for (int i = 0; i < 5; i++)
    free(kv[i]);
  return rc;
}

int ct_net_load(const char *name, struct ct_netcfg *n)
{
  char v[32];
  memset(n, 0, sizeof *n);
  int got = ct_kv_get(name, "config", "net", v, sizeof v);
  if (got < 0)
    return -1;
  n->veth = got && strcmp(v, "veth") == 0;
  if (ct_kv_get(name, "config", "ip", n->ip, sizeof n->ip) < 0 ||
      ct_kv_get(name, "config", "gateway", n->gateway, sizeof n->gateway) < 0 ||
      ct_kv_get(name, "config", "host_ip", n->host_ip, sizeof n->host_ip) < 0 ||
      ct_kv_get(name, "config", "bridge", n->bridge, sizeof n->bridge) < 0)
    return -1;
  return 0;
}

/* ---- rtnetlink ---- */

struct req {
  union {
    struct nlmsghdr h;
    char raw[1024];
  };
};

static struct rtattr *tail(struct req *r) { return (struct rtattr *)(r->raw + NLMSG_ALIGN(r->h.nlmsg_len)); }

static struct rtattr *add(struct req *r, unsigned short type, const void *data, size_t len)
{
  struct rtattr *a = tail(r);
  a->rta_type = type;
  a->rta_len = (unsigned short)RTA_LENGTH(len);
  if (len)
    memcpy(RTA_DATA(a), data, len);
  r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
  return a;
}

static void end_nest(struct req *r, struct rtattr *a)
{
  a->rta_len = (unsigned short)((char *)tail(r) - (char *)a);
}

static void init(struct req *r, uint16_t type, uint16_t flags, const void *body, size_t len)
{
  memset(r, 0, sizeof *r);
  r->h.nlmsg_type = type;
  r->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  r->h.nlmsg_len = (uint32_t)NLMSG_LENGTH(len);
  memcpy(NLMSG_DATA(&r->h), body, len);
}

/* Sends R and waits for its acknowledgement; the kernel's error becomes WHAT's. */
static int talk(int fd, struct req *r, const char *what)
{
  static uint32_t seq;
  r->h.nlmsg_seq = ++seq;
  struct sockaddr_nl k = {.nl_family = AF_NETLINK};
  if (sendto(fd, &r->h, r->h.nlmsg_len, 0, (struct sockaddr *)&k, sizeof k) < 0)
    return ct_fail(errno, "%s: netlink send", what);
  char buf[8192];
  for (int tries = 0; tries < 16; tries++) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ct_fail(errno, "%s: netlink receive", what);
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != r->h.nlmsg_seq || h->nlmsg_type != NLMSG_ERROR)
        continue;
      int err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
      return err ? ct_fail(-err, "%s", what) : 0;
    }
  }
  return ct_fail(0, "%s: no answer from the kernel", what);
}

static int nl_open(void)
{
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0)
    return ct_fail(errno, "netlink socket");
  struct timeval tv = {2, 0};  /* a request never waits forever */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static int link_up(int fd, int index, const char *ifname)
{
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP,
                          .ifi_change = IFF_UP};
  struct req r;
  init(&r, RTM_NEWLINK, 0, &ifi, sizeof ifi);
  char what[64];
  snprintf(what, sizeof what, "bring %s up", ifname);
  return talk(fd, &r, what);
}

static int add_addr(int fd, int index, const char *ifname, const char *cidr)
{
  char a[20];
  snprintf(a, sizeof a, "%s", cidr);
  char *slash = strchr(a, '/');
  *slash = 0;
  struct in_addr in;
  inet_pton(AF_INET, a, &in);
  struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)atoi(slash + 1),
                          .ifa_index = (unsigned)index, .ifa_scope = RT_SCOPE_UNIVERSE};
  struct req r;
  init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
  add(&r, IFA_LOCAL, &in, sizeof in);
  add(&r, IFA_ADDRESS, &in, sizeof in);
  char what[80];
  snprintf(what, sizeof what, "add %s to %s", cidr, ifname);
  return talk(fd, &r, what);
}

static int default_route(int fd, int index, const char *gw)
{
  struct in_addr in;
  inet_pton(AF_INET, gw, &in);
  struct rtmsg rt = {.rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT,
                     .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST};
  struct req r;
  init(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
  add(&r, RTA_GATEWAY, &in, sizeof in);
  uint32_t oif = (uint32_t)index;
  add(&r, RTA_OIF, &oif, sizeof oif);
  char what[64];
  snprintf(what, sizeof what, "default route via %s", gw);
  return talk(fd, &r, what);
}

static int del_link(int fd, const char *ifname)
{
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  struct req r;
  init(&r, RTM_DELLINK, 0, &ifi, sizeof ifi);
  add(&r, IFLA_IFNAME, ifname, strlen(ifname) + 1);
  return talk(fd, &r, "delete a stale host interface");
}

/* The pair: host end named n->host_if here, peer "eth0" made directly in
 * the namespace of PID (never visible on the host). */
static int make_pair(int fd, const struct ct_netcfg *n, pid_t pid)
{
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  struct req r;
  init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  add(&r, IFLA_IFNAME, n->host_if, strlen(n->host_if) + 1);
  struct rtattr *info = add(&r, IFLA_LINKINFO, NULL, 0);
  add(&r, IFLA_INFO_KIND, "veth", 5);
  struct rtattr *data = add(&r, IFLA_INFO_DATA, NULL, 0);
  struct rtattr *peer = add(&r, VETH_INFO_PEER, &ifi, sizeof ifi);
  add(&r, IFLA_IFNAME, "eth0", 5);
  uint32_t p = (uint32_t)pid;
  add(&r, IFLA_NET_NS_PID, &p, sizeof p);
  end_nest(&r, peer);
  end_nest(&r, data);
  end_nest(&r, info);
  char what[80];
  snprintf(what, sizeof what, "create veth pair %s/eth0", n->host_if);
  return talk(fd, &r, what);
}

static int set_master(int fd, int index, const struct ct_netcfg *n)
{
  unsigned br = if_nametoindex(n->bridge);
  if (!br)
    return ct_fail(0, "--bridge %s: no such interface", n->bridge);
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index};
  struct req r;
  init(&r, RTM_NEWLINK, 0, &ifi, sizeof ifi);
  uint32_t m = br;
  add(&r, IFLA_MASTER, &m, sizeof m);
  char what[80];
  snprintf(what, sizeof what, "put %s on bridge %s", n->host_if, n->bridge);
  return talk(fd, &r, what);
}

/* eth0's side, in PID's network namespace (entered and left again). */
static int setup_inside(const struct ct_netcfg *n, pid_t pid)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
  cleanup_close int theirs = open(path, O_RDONLY | O_CLOEXEC);
  cleanup_close int ours = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (theirs < 0 || ours < 0)
    return ct_fail(errno, "open network namespaces");
  if (setns(theirs, CLONE_NEWNET) < 0)
    return ct_fail(errno, "enter the container's network namespace");
  int rc = -1;
  int fd = nl_open();
  unsigned idx = if_nametoindex("eth0");
  if (fd >= 0 && !idx)
    ct_fail(errno, "eth0 missing in the container");
  else if (fd >= 0 && (!n->ip[0] || add_addr(fd, (int)idx, "eth0", n->ip) == 0) &&
           link_up(fd, (int)idx, "eth0") == 0 &&
           (!n->gateway[0] || default_route(fd, (int)idx, n->gateway) == 0))
    rc = 0;
  if (fd >= 0)
    close(fd);
  if (setns(ours, CLONE_NEWNET) < 0)
    abort();  /* stuck in the container's namespace: nothing safe to do */
  return rc;
}

int ct_net_setup(const struct ct_netcfg *n, pid_t pid)
{
  cleanup_close int fd = nl_open();
  if (fd < 0)
    return -1;
  int rc = make_pair(fd, n, pid);
  /* Our lock is held, so an interface of this name is a dead run's, whose
   * namespace the kernel has not finished tearing down. */
  if (rc < 0 && if_nametoindex(n->host_if) && del_link(fd, n->host_if) == 0)
    rc = make_pair(fd, n, pid);
  if (rc < 0)
    return -1;
  unsigned idx = if_nametoindex(n->host_if);
  if (!idx)
    rc = ct_fail(errno, "%s vanished", n->host_if);
  if (rc == 0 && n->host_ip[0])
    rc = add_addr(fd, (int)idx, n->host_if, n->host_ip);
  if (rc == 0 && n->bridge[0])
    rc = set_master(fd, (int)idx, n);
  if (rc == 0)
    rc = link_up(fd, (int)idx, n->host_if);
  if (rc == 0)
    rc = setup_inside(n, pid);
  if (rc < 0) {
    char err[1024];
    snprintf(err, sizeof err, "%s", ct_error());
    del_link(fd, n->host_if);  /* takes eth0 with it */
    ct_fail(0, "%s", err);
    return ct_wrap("--net veth");
  }
  return 0;
}
