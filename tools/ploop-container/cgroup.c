/* cgroup v1 / v2 / hybrid handling for the container (see cgroup.h).
 * Layout: <hierarchy>/ploop-container[-<hash of --root>]/<name>. */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mntent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#include "config.h"
#include "error.h"
#include "util.h"

#define CGROUP2_SUPER_MAGIC 0x63677270

const char *cg_mode_name(enum cg_mode m)
{
  return m == CG_UNIFIED ? "v2" : m == CG_HYBRID ? "hybrid" : "v1";
}

static int detect_mode(enum cg_mode *mode)
{
  struct statfs sf;
  if (statfs("/sys/fs/cgroup", &sf) < 0)
    return ct_fail(errno, "statfs /sys/fs/cgroup");
  if (sf.f_type == CGROUP2_SUPER_MAGIC) {
    *mode = CG_UNIFIED;
    return 0;
  }
  if (statfs("/sys/fs/cgroup/unified", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
    *mode = CG_HYBRID;
  else
    *mode = CG_LEGACY;
  return 0;
}

/* Mount point of the v1 hierarchy holding CONTROLLER (it may be co-mounted). */
static char *v1_mount(const char *controller)
{
  FILE *f = setmntent("/proc/self/mounts", "r");
  if (!f)
    return NULL;
  char *found = NULL;
  struct mntent *m;
  while ((m = getmntent(f))) {
    if (strcmp(m->mnt_type, "cgroup") == 0 && hasmntopt(m, controller)) {
      found = strdup(m->mnt_dir);
      break;
    }
  }
  endmntent(f);
  return found;
}

/* Containers under different --root dirs must not share cgroups. */
static char *group_name(const char *name)
{
  if (strcmp(ct_root, CT_DEFAULT_ROOT) == 0)
    return xasprintf("ploop-container/%s", name);
  uint32_t h = 2166136261u;  /* FNV-1a */
  for (const char *p = ct_root; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  return xasprintf("ploop-container-%08x/%s", h, name);
}

int cg_init(struct ct_cgroup *cg, const char *name)
{
  memset(cg, 0, sizeof *cg);
  if (detect_mode(&cg->mode) < 0)
    return -1;
  cleanup_free char *group = group_name(name);
  if (cg->mode == CG_UNIFIED) {
    cg->unified = xasprintf("/sys/fs/cgroup/%s", group);
    return 0;
  }
  /* Test hook: on a hybrid host, drive the v2 code (attach, freeze, kill,
   * events) on the controller-less v2 tree; limits are refused there. */
  const char *force = getenv("PLOOP_CONTAINER_CGROUP");
  if (force && strcmp(force, "v2") == 0 && cg->mode == CG_HYBRID) {
    cg->mode = CG_UNIFIED;
    cg->unified = xasprintf("/sys/fs/cgroup/unified/%s", group);
    return 0;
  }
  const char *ctrl[] = {"memory", "pids", "freezer"};
  char **dst[] = {&cg->memory, &cg->pids, &cg->freezer};
  for (int i = 0; i < 3; i++) {
    cleanup_free char *mnt = v1_mount(ctrl[i]);
    if (!mnt) {
      cg_free(cg);
      return ct_fail(0, "cgroup v1 controller '%s' is not mounted", ctrl[i]);
    }
    *dst[i] = xasprintf("%s/%s", mnt, group);
  }
  if (cg->mode == CG_HYBRID)
    cg->unified = xasprintf("/sys/fs/cgroup/unified/%s", group);
  /* Optional: CPU and I/O limits need them, memory-only containers do not. */
  const char *opt[] = {"cpu", "cpuacct", "cpuset", "blkio"};
  char **odst[] = {&cg->cpu, &cg->cpuacct, &cg->cpuset, &cg->blkio};
  for (int i = 0; i < 4; i++) {
    cleanup_free char *mnt = v1_mount(opt[i]);
    if (mnt)
      *odst[i] = xasprintf("%s/%s", mnt, group);
  }
  return 0;
}

void cg_free(struct ct_cgroup *cg)
{
  free(cg->memory);
  free(cg->pids);
  free(cg->freezer);
  free(cg->unified);
  free(cg->cpu);
  free(cg->cpuacct);
  free(cg->cpuset);
  free(cg->blkio);
  memset(cg, 0, sizeof *cg);
}

static int cg_write(const char *dir, const char *file, const char *val)
{
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  return write_file(p, val);
}

static char *cg_file(const char *dir, const char *file) { return xasprintf("%s/%s", dir, file); }

static bool has_word(const char *list, const char *w)
{
  size_t n = strlen(w);
  for (const char *p = strstr(list, w); p; p = strstr(p + 1, w))
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ' || p[n] == '\n'))
      return true;
  return false;
}

/* v2 controllers must be enabled in every ancestor's subtree_control, from
 * the root down to DIR's parent (the root may hold processes; our own
 * parent holds none). Memory and pids are required; cpu, cpuset and io are
 * enabled where the kernel offers them. */
static int v2_enable_controllers(const char *dir)
{
  const char *root = "/sys/fs/cgroup";
  if (strncmp(dir, "/sys/fs/cgroup/unified/", 23) == 0)
    return ct_fail(0, "no memory/pids controllers in the v2 tree of a hybrid host");
  static const char *const want[] = {"memory", "pids", "cpu", "cpuset", "io"};
  cleanup_free char *path = strdup(dir);
  char *end = strrchr(path, '/');
  for (char *p = path + strlen(root); p && p <= end; p = strchr(p + 1, '/')) {
    char saved = *p;
    *p = 0;
    cleanup_free char *sc = cg_file(path, "cgroup.subtree_control");
    cleanup_free char *ac = cg_file(path, "cgroup.controllers");
    char have[256] = "", avail[256] = "", add[128] = "";
    int rc = read_file(sc, have, sizeof have) < 0 || read_file(ac, avail, sizeof avail) < 0 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < sizeof want / sizeof want[0]; i++) {
      if (has_word(have, want[i]))
        continue;
      if (!has_word(avail, want[i])) {
        if (i < 2)
          rc = ct_fail(0, "the %s controller is not available in %s", want[i], path);
        continue;
      }
      size_t n = strlen(add);
      snprintf(add + n, sizeof add - n, "%s+%s", n ? " " : "", want[i]);
    }
    if (rc == 0 && add[0])
      rc = write_file(sc, add);
    *p = saved;
    if (rc < 0)
      return ct_wrap("enable cgroup controllers");
  }
  return 0;
}

static void dirs(const struct ct_cgroup *cg, char *out[CG_NDIRS])
{
  out[0] = cg->memory;
  out[1] = cg->pids;
  out[2] = cg->freezer;
  out[3] = cg->unified;
  out[4] = cg->cpu;
  out[5] = cg->cpuacct;
  out[6] = cg->cpuset;
  out[7] = cg->blkio;
  /* Co-mounted controllers (cpu,cpuacct) share one directory: visit it once. */
  for (int i = 1; i < CG_NDIRS; i++)
    for (int j = 0; j < i && out[i]; j++)
      if (out[j] && strcmp(out[i], out[j]) == 0)
        out[i] = NULL;
}

static int rmdir_wait(const char *dir)
{
  for (int i = 0; i < 200; i++) {
    if (rmdir(dir) == 0 || errno == ENOENT)
      return 0;
    if (errno != EBUSY)
      return ct_fail(errno, "rmdir %s", dir);
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return ct_fail(EBUSY, "rmdir %s", dir);
}

static int write_limits(const struct ct_cgroup *cg, uint64_t memory, uint64_t swap, uint64_t pids)
{
  char v[32];
  const char *pdir = cg->mode == CG_UNIFIED ? cg->unified : cg->pids;
  if (pids) {
    snprintf(v, sizeof v, "%" PRIu64, pids);
    if (cg_write(pdir, "pids.max", v) < 0)
      return -1;
  }
  if (!memory)
    return 0;
  if (cg->mode == CG_UNIFIED) {
    snprintf(v, sizeof v, "%" PRIu64, memory);
    if (cg_write(cg->unified, "memory.max", v) < 0)
      return -1;
    snprintf(v, sizeof v, "%" PRIu64, swap);
    cleanup_free char *sw = cg_file(cg->unified, "memory.swap.max");
    if (access(sw, F_OK) < 0)
      return swap ? ct_fail(0, "no swap accounting in cgroup v2 (memory.swap.max missing)") : 0;
    return write_file(sw, v);
  }
  /* v1: the RAM limit first (memsw must never be below it), then RAM+swap. */
  snprintf(v, sizeof v, "%" PRIu64, memory);
  if (cg_write(cg->memory, "memory.limit_in_bytes", v) < 0)
    return -1;
  cleanup_free char *memsw = cg_file(cg->memory, "memory.memsw.limit_in_bytes");
  if (access(memsw, F_OK) < 0)
    return swap ? ct_fail(0, "no swap accounting (boot with swapaccount=1) for --swap") : 0;
  snprintf(v, sizeof v, "%" PRIu64, memory + swap);
  return write_file(memsw, v);
}

/* The shared parent may vanish under us: the last container of another
 * monitor removes it on exit. Retry instead of failing the start. */
static int cg_mkdir(const char *dir)
{
  cleanup_free char *parent = strdup(dir);
  *strrchr(parent, '/') = 0;
  for (int i = 0; i < 10; i++) {
    if (mkdir(dir, 0755) == 0)
      return 0;
    if (errno == EEXIST) {
      /* A group left behind with no task in it (a cleanup that raced with
       * the kernel, a crash between two rmdirs): remove it and start clean,
       * so no limit of an earlier run survives. One in use is refused. */
      char procs[16] = "";
      cleanup_free char *p = cg_file(dir, "cgroup.procs");
      if (read_file(p, procs, sizeof procs) == 0 && rmdir(dir) == 0)
        continue;
      errno = EEXIST;
      break;
    }
    if (errno != ENOENT)
      break;
    if (mkdir(parent, 0755) < 0 && errno != EEXIST)
      break;
  }
  return ct_fail(errno, "mkdir %s", dir);
}

int cg_create(struct ct_cgroup *cg, uint64_t memory, uint64_t swap, uint64_t pids)
{
  char *d[CG_NDIRS];
  dirs(cg, d);
  for (int i = 0; i < CG_NDIRS; i++) {
    if (!d[i] || (i >= 4 && cg->skip_optional))
      continue;
    if (cg_mkdir(d[i]) < 0)
      goto fail;
  }
  if (cg->cpuset && !cg->skip_optional && cg_cpuset_inherit(cg->cpuset) < 0)
    goto fail;
  if (cg->mode == CG_UNIFIED && (memory || pids || strncmp(cg->unified, "/sys/fs/cgroup/unified/", 23) != 0) &&
      v2_enable_controllers(cg->unified) < 0)
    goto fail;
  if (write_limits(cg, memory, swap, pids) < 0)
    goto fail;
  return 0;
fail:
  ct_wrap("cgroup");
  for (int i = CG_NDIRS - 1; i >= 0; i--)
    if (d[i])
      rmdir(d[i]);
  return -1;
}

int cg_attach(const struct ct_cgroup *cg, pid_t pid)
{
  char v[32];
  snprintf(v, sizeof v, "%d", pid ? (int)pid : (int)getpid());
  char *d[CG_NDIRS];
  dirs(cg, d);
  for (int i = 0; i < CG_NDIRS; i++) {
    /* The optional v1 groups exist only when a limit asked for them. */
    if (d[i] && i >= 4 && access(d[i], F_OK) < 0 && errno == ENOENT)
      continue;
    if (d[i] && cg_write(d[i], "cgroup.procs", v) < 0)
      return ct_wrap("join cgroup");
  }
  return 0;
}

void cg_skip_optional(struct ct_cgroup *cg) { cg->skip_optional = true; }

static int pids_in(const char *dir, pid_t *out, size_t max, size_t *n);

int cg_ensure_optional(const struct ct_cgroup *cg)
{
  if (cg->mode == CG_UNIFIED)
    return 0;
  char *d[CG_NDIRS];
  dirs(cg, d);
  for (int i = 4; i < CG_NDIRS; i++) {
    if (!d[i] || access(d[i], F_OK) == 0)
      continue;
    if (cg_mkdir(d[i]) < 0 || (d[i] == cg->cpuset && cg_cpuset_inherit(d[i]) < 0))
      return ct_wrap("cgroup");
    /* Every task of the container (the pids group has them all) moves in;
     * what they fork from now on is born there. */
    static pid_t pids[65536];
    size_t n = 0;
    if (pids_in(cg->pids, pids, sizeof pids / sizeof pids[0], &n) < 0)
      return ct_wrap("cgroup");
    cleanup_free char *procs = cg_file(d[i], "cgroup.procs");
    cleanup_close int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return ct_fail(errno, "open %s", procs);
    for (size_t k = 0; k < n; k++) {
      char v[16];
      int len = snprintf(v, sizeof v, "%d", (int)pids[k]);
      if (write(fd, v, (size_t)len) < 0 && errno != ESRCH)  /* ESRCH: it exited meanwhile */
        return ct_fail(errno, "move task %d into %s", (int)pids[k], d[i]);
    }
  }
  return 0;
}

bool cg_exists(const struct ct_cgroup *cg)
{
  const char *d = cg->memory ? cg->memory : cg->unified;
  return d && access(d, F_OK) == 0;
}

static int pids_in(const char *dir, pid_t *out, size_t max, size_t *n)
{
  char buf[65536];
  cleanup_free char *p = cg_file(dir, "cgroup.procs");
  *n = 0;
  if (read_file(p, buf, sizeof buf) < 0)
    return -1;
  for (char *s = buf; *s && *n < max;) {
    out[(*n)++] = (pid_t)strtol(s, &s, 10);
    while (*s == '\n')
      s++;
  }
  return 0;
}

int cg_kill_all(const struct ct_cgroup *cg)
{
  if (cg->unified) {
    cleanup_free char *k = cg_file(cg->unified, "cgroup.kill");
    if (access(k, F_OK) == 0)
      return write_file(k, "1");
  }
  /* No cgroup.kill: freeze so nothing forks while we kill, then thaw so the
   * SIGKILLs are delivered (crun cgroup_killall_path). */
  const char *dir = cg->memory ? cg->memory : cg->unified;
  bool froze = cg_freeze(cg, true) == 0;
  pid_t pids[4096];
  size_t n = 0;
  int rc = pids_in(dir, pids, 4096, &n);
  for (size_t i = 0; i < n; i++)
    kill(pids[i], SIGKILL);
  if (froze)
    cg_freeze(cg, false);
  return rc;
}

int cg_destroy(struct ct_cgroup *cg)
{
  if (!cg_exists(cg))
    return 0;
  cg_kill_all(cg);
  char *d[CG_NDIRS];
  dirs(cg, d);
  int rc = 0;
  for (int i = 0; i < CG_NDIRS; i++) {
    if (!d[i])
      continue;
    if (rmdir_wait(d[i]) < 0) {
      rc = -1;
      continue;
    }
    /* The shared parent goes with the last container (EBUSY otherwise). */
    cleanup_free char *parent = strdup(d[i]);
    *strrchr(parent, '/') = 0;
    rmdir(parent);
  }
  return rc;
}

int cg_freeze(const struct ct_cgroup *cg, bool frozen)
{
  if (cg->mode != CG_UNIFIED) {
    cleanup_free char *st = cg_file(cg->freezer, "freezer.state");
    if (write_file(st, frozen ? "FROZEN" : "THAWED") < 0)
      return -1;
    for (int i = 0; i < 2000; i++) {  /* FREEZING -> FROZEN can take a moment */
      char buf[32];
      if (read_file(st, buf, sizeof buf) < 0)
        return -1;
      if (strncmp(buf, frozen ? "FROZEN" : "THAWED", frozen ? 6 : 6) == 0)
        return 0;
      struct timespec ts = {0, 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    return ct_fail(0, "%s: timed out waiting for %s", st, frozen ? "FROZEN" : "THAWED");
  }
  if (cg_write(cg->unified, "cgroup.freeze", frozen ? "1" : "0") < 0)
    return -1;
  cleanup_free char *ev = cg_file(cg->unified, "cgroup.events");
  for (int i = 0; i < 2000; i++) {
    uint64_t v;
    if (read_keyed_u64(ev, "frozen", &v) < 0)
      return -1;
    if (v == (frozen ? 1u : 0u))
      return 0;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return ct_fail(0, "%s: timed out waiting for frozen %d", ev, frozen);
}

int cg_is_frozen(const struct ct_cgroup *cg, bool *frozen)
{
  if (cg->mode != CG_UNIFIED) {
    char buf[32];
    cleanup_free char *st = cg_file(cg->freezer, "freezer.state");
    if (read_file(st, buf, sizeof buf) < 0)
      return -1;
    *frozen = strncmp(buf, "THAWED", 6) != 0;
    return 0;
  }
  uint64_t v;
  cleanup_free char *ev = cg_file(cg->unified, "cgroup.events");
  if (read_keyed_u64(ev, "frozen", &v) < 0)
    return -1;
  *frozen = v != 0;
  return 0;
}

int cg_oom_kills(const struct ct_cgroup *cg, uint64_t *kills)
{
  if (cg->mode == CG_UNIFIED) {
    cleanup_free char *ev = cg_file(cg->unified, "memory.events");
    return read_keyed_u64(ev, "oom_kill", kills);
  }
  cleanup_free char *oc = cg_file(cg->memory, "memory.oom_control");
  return read_keyed_u64(oc, "oom_kill", kills);
}

int cg_memory(const struct ct_cgroup *cg, uint64_t *usage, uint64_t *limit)
{
  const char *dir = cg->mode == CG_UNIFIED ? cg->unified : cg->memory;
  cleanup_free char *u = cg_file(dir, cg->mode == CG_UNIFIED ? "memory.current" : "memory.usage_in_bytes");
  cleanup_free char *l = cg_file(dir, cg->mode == CG_UNIFIED ? "memory.max" : "memory.limit_in_bytes");
  if (read_u64_file(u, usage) < 0 || read_u64_file(l, limit) < 0)
    return -1;
  if (*limit >= (UINT64_MAX >> 2))  /* v1 "unlimited" is PAGE_COUNTER_MAX pages */
    *limit = UINT64_MAX;
  return 0;
}

int cg_swap_usage(const struct ct_cgroup *cg, uint64_t *swap)
{
  if (cg->mode == CG_UNIFIED) {
    cleanup_free char *s = cg_file(cg->unified, "memory.swap.current");
    return read_u64_file(s, swap);
  }
  cleanup_free char *s = cg_file(cg->memory, "memory.stat");
  return read_keyed_u64(s, "swap", swap);
}
