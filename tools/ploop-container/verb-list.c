/* `list`: one line per container: state, PID 1, memory use/limit, disk use. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

static int by_name(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int verb_list(int argc, char **argv)
{
  (void)argv;
  if (argc != 1)
    return ct_usage("usage: list");
  DIR *d = opendir(ct_root);
  if (!d && errno == ENOENT)
    d = NULL;
  else if (!d)
    return ct_fail(errno, "open %s", ct_root);
  char *names[4096];
  size_t n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) && n < 4096)
    if (e->d_name[0] != '.' && ct_exists(e->d_name))
      names[n++] = strdup(e->d_name);
  if (d)
    closedir(d);
  qsort(names, n, sizeof names[0], by_name);
  printf("%-20s %-8s %8s %21s %15s %s\n", "NAME", "STATE", "PID", "MEMORY(USED/LIMIT)", "DISK", "LAST");
  for (size_t i = 0; i < n; i++) {
    struct container_info info;
    container_info(names[i], &info);
    char used[16] = "-", limit[16] = "-", size[16], disk[32], mem[40], last[48] = "-";
    if (info.pid && info.mem_known) {
      format_size(info.mem_usage, used, sizeof used);
      if (info.mem_limit == UINT64_MAX)
        snprintf(limit, sizeof limit, "none");
      else
        format_size(info.mem_limit, limit, sizeof limit);
    }
    snprintf(mem, sizeof mem, "%s/%s", used, limit);
    format_size(info.disk_bytes, size, sizeof size);
    snprintf(disk, sizeof disk, "%s %s", size, info.disk);
    if (!info.pid && info.last_status >= 0)
      snprintf(last, sizeof last, "exit %d%s", info.last_status, info.oom_kills ? " (OOM-killed)" : "");
    else if (info.pid && info.oom_kills)
      snprintf(last, sizeof last, "%llu OOM kill(s)", (unsigned long long)info.oom_kills);
    printf("%-20s %-8s %8d %21s %15s %s\n", info.name, info.state, info.pid, mem, disk, last);
    free(names[i]);
  }
  return 0;
}
