/* `checkpoint NAME DIR [--criu PATH] [--leave-running]` and
 * `restore NAME DIR [--criu PATH]`: process checkpoint/restore with CRIU. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "criu.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

int verb_criu(int argc, char **argv)
{
  bool checkpoint = strcmp(argv[0], "checkpoint") == 0;
  static const struct option opts[] = {{"criu", required_argument, NULL, 'c'},
                                       {"leave-running", no_argument, NULL, 'l'},
                                       {"lazy-pages", no_argument, NULL, 'z'},
                                       {NULL, 0, NULL, 0}};
  const char *criu_path = NULL;
  bool leave_running = false, lazy = false;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'c')
      criu_path = optarg;
    else if (c == 'l' && checkpoint)
      leave_running = true;
    else if (c == 'z' && !checkpoint)
      lazy = true;
    else
      return ct_usage("%s: bad option '%s' (see --help)", argv[0], argv[optind - 1]);
  }
  if (argc - optind != 2)
    return ct_usage(checkpoint ? "usage: checkpoint NAME DIR [--criu PATH] [--leave-running]"
                               : "usage: restore NAME DIR [--criu PATH] [--lazy-pages]");
  const char *name = argv[optind], *dir = argv[optind + 1];
  cleanup_free char *bin = NULL;
  char why[1024];
  if (ct_criu_find(criu_path, &bin, why, sizeof why) < 0)
    return -1;
  struct ct_criu_times t;
  int rc = checkpoint ? ct_checkpoint(name, bin, dir, leave_running, &t)
                      : ct_restore(name, bin, dir, lazy, &t);
  if (rc < 0)
    return -1;
  if (getenv("PLOOP_CONTAINER_TIMING"))
    fprintf(stderr, "ploop-container: timing: %s criu=%.1fms criu_cpu=%.1fms total=%.1fms\n",
            argv[0], (double)t.criu_ns / 1e6, (double)t.criu_cpu_ns / 1e6, (double)t.total_ns / 1e6);
  /* The container runs; DIR must stay until its memory is all back. */
  uint64_t t0 = now_ns();
  if (lazy && ct_restore_lazy_wait(dir, 60000) < 0)
    return -1;
  if (lazy && getenv("PLOOP_CONTAINER_TIMING"))
    fprintf(stderr, "ploop-container: timing: lazy-pages done %.1fms after running\n",
            (double)(now_ns() - t0) / 1e6);
  return 0;
}
