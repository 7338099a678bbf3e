/* `freeze NAME`, `thaw NAME` (cgroup freezer) and `snapshot NAME`. */
#include <stdio.h>
#include <string.h>

#include "container.h"
#include "disk.h"
#include "error.h"
#include "verbs.h"

int verb_freeze(int argc, char **argv)
{
  if (argc != 2)
    return ct_usage("usage: %s NAME", argv[0]);
  return container_freeze(argv[1], strcmp(argv[0], "freeze") == 0) < 0 ? -1 : 0;
}

int verb_snapshot(int argc, char **argv)
{
  if (argc != 2)
    return ct_usage("usage: snapshot NAME");
  char id[DISK_SNAPSHOT_ID_MAX];
  if (container_snapshot(argv[1], id, sizeof id) < 0)
    return -1;
  printf("%s\n", id);
  return 0;
}
