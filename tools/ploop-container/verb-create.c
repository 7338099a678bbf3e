/* `create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]]` and `destroy NAME`. */
#include <getopt.h>
#include <stdint.h>

#include "container.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

int verb_create(int argc, char **argv)
{
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"from", required_argument, NULL, 'f'},
                                       {NULL, 0, NULL, 0}};
  uint64_t size = 2ull << 30;
  const char *from = "busybox";
  int c;
  while ((c = getopt_long(argc, argv, "s:f:", opts, NULL)) != -1) {
    if (c == 's') {
      if (parse_size_arg("--size", optarg, &size) < 0)
        return ct_usage("%s", ct_error());
    } else if (c == 'f') {
      from = optarg;
    } else {
      return ct_usage("create: bad option (see --help)");
    }
  }
  if (argc - optind != 1)
    return ct_usage("usage: create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]]");
  return container_create(argv[optind], size, from) < 0 ? -1 : 0;
}

int verb_destroy(int argc, char **argv)
{
  if (argc != 2)
    return ct_usage("usage: destroy NAME");
  return container_destroy(argv[1]) < 0 ? -1 : 0;
}
