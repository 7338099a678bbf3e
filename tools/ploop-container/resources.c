/* CPU, cpuset and I/O limits (see resources.h). Scales: --cpu-weight and
 * --io-weight take the cgroup v2 range 1-10000 (100 = the kernel default);
 * v1 gets the value scaled so that 100 is its own default too (cpu.shares
 * 1024, blkio.weight 500). */
#include "resources.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "cgroup.h"
#include "config.h"
#include "error.h"
#include "util.h"

#define CFS_PERIOD_US 100000u

static const char *const io_key[CT_IO_N] = {"io_read_bps", "io_write_bps", "io_read_iops",
                                            "io_write_iops"};

/* "0.5", "2", "1.25": thousandths of a CPU. */
static int parse_cpus(const char *s, uint32_t *milli)
{
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0) || v > 4096)
    return ct_usage("--cpus: '%s' is not a number of CPUs (like 0.5 or 2)", s);
  *milli = (uint32_t)(v * 1000 + 0.5);
  if (v > 0 && *milli < 10)
    return ct_usage("--cpus %s is below the 0.01 minimum", s);
  return 0;
}

static int parse_weight(const char *what, const char *s, uint32_t *w)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > 10000)
    return ct_usage("%s: '%s' is not a weight from 1 to 10000 (100 is the default)", what, s);
  *w = (uint32_t)v;
  return 0;
}

static int parse_cpuset(const char *s, char *out, size_t len)
{
  if (strlen(s) >= len || s[strspn(s, "0123456789,-")] != 0)
    return ct_usage("--cpuset: '%s' is not a CPU list (like 0-1,3)", s);
  snprintf(out, len, "%s", s);
  return 0;
}

/* --io-limit read|write RATE: RATE is bytes per second (10M) or "Niops";
 * 0 or "max" removes that limit. */
static int parse_io(const char *dir, const char *rate, struct ct_res *r)
{
  bool rd = strcmp(dir, "read") == 0;
  if (!rd && strcmp(dir, "write") != 0)
    return ct_usage("--io-limit: '%s' is not read or write", dir);
  if (!rate)
    return ct_usage("--io-limit %s needs a rate (like 10M or 500iops)", dir);
  size_t n = strlen(rate);
  bool iops = n > 4 && strcmp(rate + n - 4, "iops") == 0;
  uint64_t v = 0;
  if (strcmp(rate, "max") == 0) {
    v = 0;
  } else if (iops) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(rate, &end, 10);
    if (errno || end == rate || end != rate + n - 4 || rate[0] == '-')
      return ct_usage("--io-limit %s: '%s' is not a number of operations per second", dir, rate);
    v = x;
  } else if (parse_size_arg("--io-limit", rate, &v) < 0) {
    ct_set_error_code(CT_EXIT_USAGE);
    return -1;
  }
  int k = iops ? (rd ? CT_IO_RIOPS : CT_IO_WIOPS) : (rd ? CT_IO_RBPS : CT_IO_WBPS);
  if (strcmp(rate, "max") == 0) {  /* removes both kinds for that direction */
    int other = rd ? CT_IO_RIOPS : CT_IO_WIOPS;
    r->io[other] = 0;
    r->set |= CT_RES_IO << other;
  }
  r->io[k] = v;
  r->set |= CT_RES_IO << k;
  return 0;
}

int ct_res_opt(int opt, const char *arg, int argc, char **argv, struct ct_res *r)
{
  switch (opt) {
  case 0x100:
    r->set |= CT_RES_CPUS;
    return parse_cpus(arg, &r->cpus_milli) < 0 ? -1 : 1;
  case 0x101:
    r->set |= CT_RES_CPU_WEIGHT;
    return parse_weight("--cpu-weight", arg, &r->cpu_weight) < 0 ? -1 : 1;
  case 0x102:
    r->set |= CT_RES_CPUSET;
    return parse_cpuset(arg, r->cpuset, sizeof r->cpuset) < 0 ? -1 : 1;
  case 0x103:
    r->set |= CT_RES_IO_WEIGHT;
    return parse_weight("--io-weight", arg, &r->io_weight) < 0 ? -1 : 1;
  case 0x104: {
    const char *rate = optind < argc ? argv[optind] : NULL;
    if (rate)
      optind++;
    return parse_io(arg, rate, r) < 0 ? -1 : 1;
  }
  }
  return 0;
}

void ct_res_merge(struct ct_res *dst, const struct ct_res *src)
{
  if (src->set & CT_RES_CPUS)
    dst->cpus_milli = src->cpus_milli;
  if (src->set & CT_RES_CPU_WEIGHT)
    dst->cpu_weight = src->cpu_weight;
  if (src->set & CT_RES_CPUSET)
    memcpy(dst->cpuset, src->cpuset, sizeof dst->cpuset);
  if (src->set & CT_RES_IO_WEIGHT)
    dst->io_weight = src->io_weight;
  for (int i = 0; i < CT_IO_N; i++)
    if (src->set & (CT_RES_IO << i))
      dst->io[i] = src->io[i];
  dst->set |= src->set;
}

size_t ct_res_kv(const struct ct_res *r, char *kv[CT_RES_KV_MAX])
{
  size_t n = 0;
  if (r->set & CT_RES_CPUS)
    kv[n++] = xasprintf("cpus=%u.%03u", r->cpus_milli / 1000, r->cpus_milli % 1000);
  if (r->set & CT_RES_CPU_WEIGHT)
    kv[n++] = xasprintf("cpu_weight=%u", r->cpu_weight);
  if (r->set & CT_RES_CPUSET)
    kv[n++] = xasprintf("cpuset=%s", r->cpuset[0] ? r->cpuset : "all");
  if (r->set & CT_RES_IO_WEIGHT)
    kv[n++] = xasprintf("io_weight=%u", r->io_weight);
  for (int i = 0; i < CT_IO_N; i++)
    if (r->set & (CT_RES_IO << i))
      kv[n++] = xasprintf("%s=%" PRIu64, io_key[i], r->io[i]);
  return n;
}

int ct_res_set_key(struct ct_res *r, const char *key, const char *v)
{
  if (!strcmp(key, "cpus")) {
    r->set |= CT_RES_CPUS;
    return parse_cpus(v, &r->cpus_milli) < 0 ? -1 : 1;
  }
  if (!strcmp(key, "cpu_weight")) {
    r->set |= CT_RES_CPU_WEIGHT;
    return parse_weight("cpu_weight", v, &r->cpu_weight) < 0 ? -1 : 1;
  }
  if (!strcmp(key, "cpuset")) {
    r->set |= CT_RES_CPUSET;
    if (!strcmp(v, "all")) {
      r->cpuset[0] = 0;
      return 1;
    }
    return parse_cpuset(v, r->cpuset, sizeof r->cpuset) < 0 ? -1 : 1;
  }
  if (!strcmp(key, "io_weight")) {
    r->set |= CT_RES_IO_WEIGHT;
    return parse_weight("io_weight", v, &r->io_weight) < 0 ? -1 : 1;
  }
  for (int i = 0; i < CT_IO_N; i++)
    if (!strcmp(key, io_key[i])) {
      char *end;
      errno = 0;
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || end == v || *end || v[0] == '-')
        return ct_usage("%s: '%s' is not a number", key, v);
      r->io[i] = x;
      r->set |= CT_RES_IO << i;
      return 1;
    }
  return 0;
}

const char *const ct_res_keys[] = {"cpus", "cpu_weight", "cpuset", "io_weight", "io_read_bps",
                                   "io_write_bps", "io_read_iops", "io_write_iops", NULL};

int ct_res_save(const char *name, const char *file, const struct ct_res *r, bool durable)
{
  char *kv[CT_RES_KV_MAX];
  size_t n = ct_res_kv(r, kv);
  int rc = n ? ct_kv_set(name, file, (const char *const *)kv, n, durable) : 0;
  for (size_t i = 0; i < n; i++)
    free(kv[i]);
  return rc;
}

int ct_res_load(const char *name, const char *file, struct ct_res *r)
{
  memset(r, 0, sizeof *r);
  char v[160];
  for (int i = 0; ct_res_keys[i]; i++) {
    int got = ct_kv_get(name, file, ct_res_keys[i], v, sizeof v);
    if (got < 0)
      return -1;
    if (got && ct_res_set_key(r, ct_res_keys[i], v) < 0)
      return ct_wrap("%s", file);
  }
  return 0;
}

void ct_res_format(const struct ct_res *r, char *buf, size_t len)
{
  size_t n = 0;
  buf[0] = 0;
#define ADD(...) n += (size_t)snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__)
  if (r->set & CT_RES_CPUS)
    ADD("%scpus=%u.%03u", n ? " " : "", r->cpus_milli / 1000, r->cpus_milli % 1000);
  if (r->set & CT_RES_CPU_WEIGHT)
    ADD("%scpu_weight=%u", n ? " " : "", r->cpu_weight);
  if (r->set & CT_RES_CPUSET)
    ADD("%scpuset=%s", n ? " " : "", r->cpuset[0] ? r->cpuset : "all");
  if (r->set & CT_RES_IO_WEIGHT)
    ADD("%sio_weight=%u", n ? " " : "", r->io_weight);
  for (int i = 0; i < CT_IO_N; i++)
    if (r->set & (CT_RES_IO << i))
      ADD("%s%s=%" PRIu64, n ? " " : "", io_key[i], r->io[i]);
#undef ADD
}

/* ---- cgroup files ---- */

static int put(const char *dir, const char *file, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put(const char *dir, const char *file, const char *what, const char *fmt, ...)
{
  if (!dir)
    return ct_fail(0, "%s: no cgroup controller for %s on this host", what, file);
  char v[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  if (write_file(p, v) < 0)
    return ct_wrap("%s", what);
  return 0;
}

static bool has_file(const char *dir, const char *file)
{
  cleanup_free char *p = dir ? xasprintf("%s/%s", dir, file) : NULL;
  return p && access(p, F_OK) == 0;
}

static int apply_v1(const struct ct_cgroup *cg, const struct ct_res *r, dev_t disk)
{
  if (r->set & CT_RES_CPUS) {
    if (put(cg->cpu, "cpu.cfs_period_us", "--cpus", "%u", CFS_PERIOD_US) < 0)
      return -1;
    long quota = r->cpus_milli ? (long)r->cpus_milli * (CFS_PERIOD_US / 1000) : -1;
    if (put(cg->cpu, "cpu.cfs_quota_us", "--cpus", "%ld", quota) < 0)
      return -1;
  }
  if (r->set & CT_RES_CPU_WEIGHT) {
    unsigned shares = r->cpu_weight * 1024u / 100u;
    shares = shares < 2 ? 2 : shares > 262144 ? 262144 : shares;
    if (put(cg->cpu, "cpu.shares", "--cpu-weight", "%u", shares) < 0)
      return -1;
  }
  if (r->set & CT_RES_CPUSET) {
    char all[128] = "";
    if (!r->cpuset[0]) {  /* back to every CPU the parent has */
      cleanup_free char *parent = cg->cpuset ? strdup(cg->cpuset) : NULL;
      if (parent) {
        *strrchr(parent, '/') = 0;
        cleanup_free char *pf = xasprintf("%s/cpuset.cpus", parent);
        if (read_file(pf, all, sizeof all) > 0)
          all[strcspn(all, "\n")] = 0;
      }
    }
    if (put(cg->cpuset, "cpuset.cpus", "--cpuset", "%s", r->cpuset[0] ? r->cpuset : all) < 0)
      return -1;
  }
  if (r->set & CT_RES_IO_WEIGHT) {
    const char *f = has_file(cg->blkio, "blkio.bfq.weight") ? "blkio.bfq.weight" : "blkio.weight";
    if (cg->blkio && !has_file(cg->blkio, f))
      return ct_fail(0, "--io-weight: this host's blkio controller has no weight (blkio.weight "
                        "needs the BFQ I/O scheduler)");
    unsigned w = r->io_weight * 5;
    w = w < 10 ? 10 : w > 1000 ? 1000 : w;
    if (put(cg->blkio, f, "--io-weight", "%u", w) < 0)
      return -1;
  }
  static const char *const files[CT_IO_N] = {
      "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"};
  for (int i = 0; i < CT_IO_N; i++)
    if ((r->set & (CT_RES_IO << i)) &&
        put(cg->blkio, files[i], "--io-limit", "%u:%u %" PRIu64, major(disk), minor(disk), r->io[i]) < 0)
      return -1;
  return 0;
}

static int apply_v2(const struct ct_cgroup *cg, const struct ct_res *r, dev_t disk)
{
  const char *d = cg->unified;
  if ((r->set & CT_RES_CPUS) && !r->cpus_milli &&
      put(d, "cpu.max", "--cpus", "max %u", CFS_PERIOD_US) < 0)
    return -1;
  if ((r->set & CT_RES_CPUS) && r->cpus_milli &&
      put(d, "cpu.max", "--cpus", "%u %u", r->cpus_milli * (CFS_PERIOD_US / 1000), CFS_PERIOD_US) < 0)
    return -1;
  if ((r->set & CT_RES_CPU_WEIGHT) && put(d, "cpu.weight", "--cpu-weight", "%u", r->cpu_weight) < 0)
    return -1;
  if ((r->set & CT_RES_CPUSET) && put(d, "cpuset.cpus", "--cpuset", "%s", r->cpuset) < 0)
    return -1;
  if (r->set & CT_RES_IO_WEIGHT) {
    const char *f = has_file(d, "io.bfq.weight") ? "io.bfq.weight" : "io.weight";
    if (put(d, f, "--io-weight", "default %u", r->io_weight) < 0)
      return -1;
  }
  if (r->set & (((1 << CT_IO_N) - 1) * CT_RES_IO)) {
    static const char *const k[CT_IO_N] = {"rbps", "wbps", "riops", "wiops"};
    char line[256];
    int n = snprintf(line, sizeof line, "%u:%u", major(disk), minor(disk));
    for (int i = 0; i < CT_IO_N; i++) {
      if (!(r->set & (CT_RES_IO << i)))
        continue;
      if (r->io[i])
        n += snprintf(line + n, sizeof line - (size_t)n, " %s=%" PRIu64, k[i], r->io[i]);
      else
        n += snprintf(line + n, sizeof line - (size_t)n, " %s=max", k[i]);
    }
    if (put(d, "io.max", "--io-limit", "%s", line) < 0)
      return -1;
  }
  return 0;
}

int cg_res_apply(const struct ct_cgroup *cg, const struct ct_res *r, dev_t disk)
{
  return cg->mode == CG_UNIFIED ? apply_v2(cg, r, disk) : apply_v1(cg, r, disk);
}

int cg_set_memory(const struct ct_cgroup *cg, uint64_t memory, uint64_t swap)
{
  char m[32], ms[32];
  if (cg->mode == CG_UNIFIED) {
    snprintf(m, sizeof m, memory ? "%" PRIu64 : "max", memory);
    snprintf(ms, sizeof ms, memory ? "%" PRIu64 : "max", swap);
    if (put(cg->unified, "memory.max", "--memory", "%s", m) < 0)
      return -1;
    if (!has_file(cg->unified, "memory.swap.max"))
      return swap ? ct_fail(0, "--swap: no swap accounting in cgroup v2 (memory.swap.max missing)") : 0;
    return put(cg->unified, "memory.swap.max", "--swap", "%s", ms);
  }
  snprintf(m, sizeof m, memory ? "%" PRIu64 : "-1", memory);
  snprintf(ms, sizeof ms, memory ? "%" PRIu64 : "-1", memory + swap);
  bool memsw = has_file(cg->memory, "memory.memsw.limit_in_bytes");
  if (!memsw && swap)
    return ct_fail(0, "--swap: no swap accounting (boot with swapaccount=1)");
  /* memsw may never be below the RAM limit: shrinking goes RAM first,
   * growing memsw first (crun: retry after EINVAL the other way round). */
  if (put(cg->memory, "memory.limit_in_bytes", "--memory", "%s", m) == 0)
    return memsw ? put(cg->memory, "memory.memsw.limit_in_bytes", "--swap", "%s", ms) : 0;
  if (!memsw || put(cg->memory, "memory.memsw.limit_in_bytes", "--swap", "%s", ms) < 0)
    return -1;
  return put(cg->memory, "memory.limit_in_bytes", "--memory", "%s", m);
}

int cg_cpuset_inherit(const char *dir)
{
  cleanup_free char *parent = strdup(dir);
  char *slash = strrchr(parent, '/');
  *slash = 0;
  /* Our shared parent first (it may be new too), then DIR. */
  const char *levels[] = {parent, dir};
  for (int i = 0; i < 2; i++) {
    cleanup_free char *up = strdup(levels[i]);
    *strrchr(up, '/') = 0;
    static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
    for (int f = 0; f < 2; f++) {
      char cur[256], val[256];
      cleanup_free char *here = xasprintf("%s/%s", levels[i], files[f]);
      cleanup_free char *there = xasprintf("%s/%s", up, files[f]);
      if (read_file(here, cur, sizeof cur) < 0)
        return -1;
      if (cur[0] && cur[0] != '\n')
        continue;
      if (read_file(there, val, sizeof val) < 0 || write_file(here, val) < 0)
        return ct_wrap("cpuset");
    }
  }
  return 0;
}

int cg_cpu_usage(const struct ct_cgroup *cg, uint64_t *ns)
{
  if (cg->mode == CG_UNIFIED) {
    cleanup_free char *p = xasprintf("%s/cpu.stat", cg->unified);
    uint64_t us;
    if (read_keyed_u64(p, "usage_usec", &us) < 0)
      return -1;
    *ns = us * 1000;
    return 0;
  }
  const char *d = cg->cpuacct ? cg->cpuacct : cg->cpu;
  if (!d)
    return ct_fail(0, "no cpuacct controller on this host");
  cleanup_free char *p = xasprintf("%s/cpuacct.usage", d);
  return read_u64_file(p, ns);
}
