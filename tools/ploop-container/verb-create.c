/* `create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]] [--disk ploop|raw|rbd:POOL/NAME]`
 * and `destroy NAME`. */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "container.h"
#include "net.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

/* A parse error is the caller's fault: exit code 2. */
static int usage_error(void)
{
  ct_set_error_code(CT_EXIT_USAGE);
  return -1;
}

int verb_create(int argc, char **argv)
{
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"from", required_argument, NULL, 'f'},
                                       {"disk", required_argument, NULL, 'd'},
                                       {"net", required_argument, NULL, 'n'},
                                       CT_NET_LONGOPTS,
                                       {NULL, 0, NULL, 0}};
  struct ct_netcfg net = {0};
  uint64_t size = 2ull << 30;
  const char *from = "busybox";
  bool raw = false;
  const char *rbd = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "s:f:d:", opts, NULL)) != -1) {
    if (c == 's') {
      if (parse_size_arg("--size", optarg, &size) < 0)
        return usage_error();
    } else if (c == 'f') {
      from = optarg;
    } else if (c == 'd') {
      if (strncmp(optarg, "rbd:", 4) == 0) {
        rbd = optarg;
        raw = false;
        continue;
      }
      if (strcmp(optarg, "ploop") != 0 && strcmp(optarg, "raw") != 0)
        return ct_usage("--disk: '%s' is not ploop, raw or rbd:POOL/NAME", optarg);
      raw = strcmp(optarg, "raw") == 0;
      rbd = NULL;
    } else if (c == 'n') {
      if (strcmp(optarg, "veth") != 0 && strcmp(optarg, "none") != 0)
        return ct_usage("create --net: '%s' is not veth or none (host is chosen per run)", optarg);
      net.veth = strcmp(optarg, "veth") == 0;
      net.set = true;
    } else {
      int r = ct_net_opt(c, optarg, &net);
      if (r < 0)
        return -1;
      if (r == 0)
        return ct_usage("create: bad option '%s' (see --help)", argv[optind - 1]);
    }
  }
  if (argc - optind != 1)
    return ct_usage("usage: create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]] [--disk ploop|raw|rbd:POOL/NAME]");
  if (ct_net_check(&net) < 0)
    return -1;
  if (container_create(argv[optind], size, from, raw, rbd) < 0)
    return -1;
  /* The network is part of the container, as its disk (net.h). */
  if (net.set && ct_net_save(argv[optind], &net) < 0)
    return ct_wrap("create %s", argv[optind]);
  return 0;
}

int verb_destroy(int argc, char **argv)
{
  if (argc != 2)
    return ct_usage("usage: destroy NAME");
  return container_destroy(argv[1]) < 0 ? -1 : 0;
}
