/* `logs NAME [--follow]`: the output of the container's detached runs
 * (ROOT/NAME/console.log, each run headed by a line with its start time
 * and command). --follow goes on printing while the container runs. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

static int copy_out(int fd)
{
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
      return ct_fail(errno, "write");
  fflush(stdout);
  return n < 0 ? ct_fail(errno, "read console.log") : 0;
}

static bool running(const char *name)
{
  struct ct_state st;
  return ct_state_load(name, &st) > 0 && ct_state_running(&st);
}

int verb_logs(int argc, char **argv)
{
  static const struct option opts[] = {{"follow", no_argument, NULL, 'f'}, {NULL, 0, NULL, 0}};
  bool follow = false;
  int c;
  while ((c = getopt_long(argc, argv, "f", opts, NULL)) != -1) {
    if (c != 'f')
      return ct_usage("logs: bad option '%s' (see --help)", argv[optind - 1]);
    follow = true;
  }
  if (argc - optind != 1)
    return ct_usage("usage: logs NAME [--follow]");
  const char *name = argv[optind];
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *path = ct_path(name, "console.log");
  cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT)
    return ct_fail(errno, "open %s", path);
  if (fd >= 0 && copy_out(fd) < 0)
    return -1;
  if (!follow)
    return 0;
  /* Until the container stops, with one last read after that. */
  for (;;) {
    bool alive = running(name);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (fd < 0)
      fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && copy_out(fd) < 0)
      return -1;
    if (!alive)
      return 0;
  }
}
