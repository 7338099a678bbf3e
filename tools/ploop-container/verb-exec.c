/* `exec NAME -- CMD...`: a new process inside a running container. */
#include <stdio.h>
#include <unistd.h>

#include "container.h"
#include "error.h"
#include "verbs.h"

int verb_exec(int argc, char **argv)
{
  int first = 1;
  if (first < argc && argv[first][0] == '-' && argv[first][1] != '-')
    return ct_usage("exec: bad option '%s'", argv[first]);
  if (argc < 3)
    return ct_usage("usage: exec NAME -- CMD...");
  const char *name = argv[1];
  int cmd = 2;
  if (cmd < argc && argv[cmd][0] == '-' && argv[cmd][1] == '-' && argv[cmd][2] == 0)
    cmd++;
  if (cmd >= argc)
    return ct_usage("usage: exec NAME -- CMD...");
  int rc = container_exec(name, &argv[cmd]);
  /* This process may now sit in the container's namespaces (its children
   * in its pid namespace): leave without at-exit handlers, which may fork
   * (LeakSanitizer's stop-the-world tracer spins forever in there). So the
   * error is printed here rather than by main(). */
  if (rc < 0) {
    fprintf(stderr, "ploop-container: %s\n", ct_error());
    rc = ct_error_code();
  }
  fflush(NULL);
  _exit(rc);
}
