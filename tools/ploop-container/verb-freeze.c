/* `freeze NAME`, `thaw NAME` (cgroup freezer). */
#include <string.h>

#include "container.h"
#include "error.h"
#include "verbs.h"

int verb_freeze(int argc, char **argv)
{
  if (argc != 2)
    return ct_usage("usage: %s NAME", argv[0]);
  return container_freeze(argv[1], strcmp(argv[0], "freeze") == 0) < 0 ? -1 : 0;
}
