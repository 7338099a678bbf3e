/* `mount NAME [--snapshot ID DIR]` and `umount NAME [DIR]`. Keeping the
 * disk mounted lets `run` skip the attach (and lets a benchmark time the
 * launch alone); a snapshot mounts read-only anywhere. */
#include <getopt.h>
#include <string.h>

#include "container.h"
#include "error.h"
#include "verbs.h"

int verb_mount(int argc, char **argv)
{
  if (strcmp(argv[0], "umount") == 0) {
    if (argc < 2 || argc > 3)
      return ct_usage("usage: umount NAME [DIR]");
    return container_umount(argv[1], argc == 3 ? argv[2] : NULL) < 0 ? -1 : 0;
  }
  static const struct option opts[] = {{"snapshot", required_argument, NULL, 's'},
                                       {NULL, 0, NULL, 0}};
  const char *snap = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "s:", opts, NULL)) != -1) {
    if (c != 's')
      return ct_usage("mount: bad option '%s' (see --help)", argv[optind - 1]);
    snap = optarg;
  }
  int rest = argc - optind;
  if (rest < 1 || rest > 2 || (snap && rest != 2) || (!snap && rest != 1))
    return ct_usage("usage: mount NAME | mount NAME --snapshot ID DIR");
  return container_mount(argv[optind], snap, snap ? argv[optind + 1] : NULL) < 0 ? -1 : 0;
}
