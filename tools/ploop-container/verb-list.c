/* `list [--json]`: one line (or object) per container: state, PID 1,
 * memory use/limit, disk use, the last run's exit. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
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

static void print_json(const struct container_info *info, bool first)
{
  printf("%s{\"name\": ", first ? "" : ",\n ");
  json_string(stdout, info->name);
  printf(", \"state\": \"%s\", \"pid\": %d", info->state, info->pid);
  if (info->pid)
    printf(", \"monitor\": %s", info->monitor_gone ? "false" : "true");
  if (info->pid && info->mem_known)
    printf(", \"memory_used\": %" PRIu64 ", \"memory_limit\": %s", info->mem_usage,
           info->mem_limit == UINT64_MAX ? "null" : "");
  if (info->pid && info->mem_known && info->mem_limit != UINT64_MAX)
    printf("%" PRIu64, info->mem_limit);
  printf(", \"disk_bytes\": %" PRIu64 ", \"disk\": \"%s\", \"oom_kills\": %" PRIu64, info->disk_bytes,
         info->disk, info->oom_kills);
  if (info->last_status >= 0) {
    printf(", \"last_exit\": {\"status\": %d, \"oom_pid1\": %s, \"oom_victims\": ", info->last_status,
           info->oom_pid1 ? "true" : "false");
    json_string(stdout, info->oom_victims);
    printf("}");
  }
  printf("}");
}

int verb_list(int argc, char **argv)
{
  bool json = argc == 2 && strcmp(argv[1], "--json") == 0;
  if (argc != 1 && !json)
    return ct_usage("usage: list [--json]");
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
  if (json)
    printf("[");
  else
    printf("%-20s %-8s %8s %21s %15s %s\n", "NAME", "STATE", "PID", "MEMORY(USED/LIMIT)", "DISK", "LAST");
  for (size_t i = 0; i < n; i++) {
    struct container_info info;
    container_info(names[i], &info);
    if (json) {
      print_json(&info, i == 0);
      free(names[i]);
      continue;
    }
    char used[16] = "-", limit[16] = "-", size[16], disk[32], mem[40], last[128] = "-";
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
    /* "OOM-killed" only when PID 1 itself was the victim; kills of other
     * processes are counted, with their names when the kernel log had them. */
    if (!info.pid && info.last_status >= 0 && info.oom_pid1)
      snprintf(last, sizeof last, "exit %d (OOM-killed)", info.last_status);
    else if (!info.pid && info.last_status >= 0 && info.oom_kills)
      snprintf(last, sizeof last, "exit %d, %llu OOM kill(s)%s%.60s", info.last_status,
               (unsigned long long)info.oom_kills, info.oom_victims[0] ? ": " : "", info.oom_victims);
    else if (!info.pid && info.last_status >= 0)
      snprintf(last, sizeof last, "exit %d", info.last_status);
    else if (info.pid && info.oom_kills)
      snprintf(last, sizeof last, "%llu OOM kill(s)", (unsigned long long)info.oom_kills);
    char state[32];
    snprintf(state, sizeof state, "%s%s", info.state, info.monitor_gone ? ", monitor gone" : "");
    printf("%-20s %-8s %8d %21s %15s %s\n", info.name, state, info.pid, mem, disk, last);
    free(names[i]);
  }
  if (json)
    printf("]\n");
  return 0;
}
