/* OOM victims from the kernel log (see oom.h). A record reads
 * "6,1234,56789012,-;oom-kill:constraint=CONSTRAINT_MEMCG,...,
 * oom_memcg=/G/NAME,task_memcg=/G/NAME,task=sh,pid=4321,uid=0". */
#include "oom.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* "/ploop-container-xxxx/NAME": the last two components of the memory group. */
static const char *group_suffix(const struct ct_cgroup *cg)
{
  const char *dir = cg->memory ? cg->memory : cg->unified;
  if (!dir)
    return NULL;
  const char *p = dir + strlen(dir);
  int slashes = 0;
  while (p > dir && slashes < 2)
    if (*--p == '/')
      slashes++;
  return slashes == 2 ? p : NULL;
}

/* The value of KEY= in the comma-separated record, copied into OUT. */
static bool field(const char *rec, const char *key, char *out, size_t len)
{
  size_t kl = strlen(key);
  for (const char *p = rec; (p = strstr(p, key)); p += kl) {
    if (p != rec && p[-1] != ',' && p[-1] != ':')
      continue;
    p += kl;
    size_t n = strcspn(p, ",\n");
    snprintf(out, len, "%.*s", (int)n, p);
    return true;
  }
  return false;
}

int ct_oom_victims(const struct ct_cgroup *cg, uint64_t since_ticks, pid_t init_pid,
                   bool *init_killed, char *victims, size_t len)
{
  *init_killed = false;
  if (len)
    victims[0] = 0;
  const char *suffix = group_suffix(cg);
  if (!suffix)
    return -1;
  int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return -1;
  long hz = sysconf(_SC_CLK_TCK);
  /* One tick of slack: the start time is rounded down to a tick. */
  uint64_t since_us = hz > 0 && since_ticks ? (since_ticks - (since_ticks > 0)) * (1000000 / (uint64_t)hz) : 0;
  int found = 0;
  char rec[8192];
  for (int i = 0; i < 100000; i++) {  /* the ring holds far fewer records */
    ssize_t n = read(fd, rec, sizeof rec - 1);
    if (n < 0 && errno == EPIPE)
      continue;  /* overwritten while we read: go on with the next */
    if (n <= 0)
      break;
    rec[n] = 0;
    char *msg = strchr(rec, ';');
    if (!msg || !strstr(msg, "oom-kill:"))
      continue;
    unsigned long long ts = 0;
    if (sscanf(rec, "%*u,%*u,%llu", &ts) != 1 || ts < since_us)
      continue;
    char memcg[512], task[64] = "?", pid[16] = "";
    if (!field(msg, "task_memcg=", memcg, sizeof memcg) || !field(msg, "pid=", pid, sizeof pid))
      continue;
    size_t ml = strlen(memcg), sl = strlen(suffix);
    if (ml < sl || strcmp(memcg + ml - sl, suffix) != 0)
      continue;
    field(msg, "task=", task, sizeof task);
    found++;
    if (atoi(pid) == init_pid)
      *init_killed = true;
    size_t used = strlen(victims);
    if (used + 1 < len)
      snprintf(victims + used, len - used, "%s%s(%s)", used ? " " : "", task, pid);
  }
  close(fd);
  return found;
}
