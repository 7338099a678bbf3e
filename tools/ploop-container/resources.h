/* CPU, cpuset and disk I/O limits of a container (--cpus, --cpu-weight,
 * --cpuset, --io-weight, --io-limit), shared by run/start and update: parsing,
 * their "key=value" form in the config and state files, and writing them to
 * the cgroups (v1 cpu/cpuset/blkio, v2 cpu.max/cpu.weight/cpuset.cpus/io.max). */
#ifndef CT_RESOURCES_H
#define CT_RESOURCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum ct_io { CT_IO_RBPS, CT_IO_WBPS, CT_IO_RIOPS, CT_IO_WIOPS, CT_IO_N };

/* Bits of ct_res.set: which fields were given (0 in a given field = "no limit"). */
enum {
  CT_RES_CPUS = 1 << 0,
  CT_RES_CPU_WEIGHT = 1 << 1,
  CT_RES_CPUSET = 1 << 2,
  CT_RES_IO_WEIGHT = 1 << 3,
  CT_RES_IO = 1 << 4,  /* CT_RES_IO << CT_IO_x for each of io[] */
};

struct ct_res {
  unsigned set;
  uint32_t cpus_milli;   /* thousandths of a CPU; 0 = no quota */
  uint32_t cpu_weight;   /* 1-10000, the cgroup v2 scale (100 = default) */
  char cpuset[128];      /* "0-1,3"; "" = all */
  uint32_t io_weight;    /* 1-10000 (100 = default) */
  uint64_t io[CT_IO_N];  /* bytes or operations per second; 0 = none */
};

/* getopt_long entries for the flags above (ids 0x100..0x104). */
#define CT_RES_LONGOPTS                                                          \
  {"cpus", required_argument, NULL, 0x100},                                      \
      {"cpu-weight", required_argument, NULL, 0x101},                            \
      {"cpuset", required_argument, NULL, 0x102},                                \
      {"io-weight", required_argument, NULL, 0x103},                             \
      {"io-limit", required_argument, NULL, 0x104}
#define CT_RES_USAGE                                                             \
  "[--cpus N.N] [--cpu-weight 1-10000] [--cpuset LIST] [--io-weight 1-10000]\n"  \
  "      [--io-limit read|write BPS|Niops]..."

/* Handles option OPT of getopt_long (ARG its argument; --io-limit takes a
 * second word from ARGV[optind]). Returns 1 when it was ours, 0 when not,
 * -1 on a bad value (usage error set). */
int ct_res_opt(int opt, const char *arg, int argc, char **argv, struct ct_res *r);
/* Fields set in SRC replace those of DST. */
void ct_res_merge(struct ct_res *dst, const struct ct_res *src);
/* The set fields as "key=value" strings (malloc'd), the keys of the config
 * file; and back, one key at a time: 1 ours, 0 not, -1 bad value. */
#define CT_RES_KV_MAX (4 + CT_IO_N)
size_t ct_res_kv(const struct ct_res *r, char *kv[CT_RES_KV_MAX]);
int ct_res_set_key(struct ct_res *r, const char *key, const char *value);
extern const char *const ct_res_keys[]; /* NULL-terminated */
/* Saves the set fields in ROOT/NAME/FILE (config or state); loads them back. */
int ct_res_save(const char *name, const char *file, const struct ct_res *r, bool durable);
int ct_res_load(const char *name, const char *file, struct ct_res *r);
/* One line for humans: "cpus=0.5 io_write_bps=10485760 ...". */
void ct_res_format(const struct ct_res *r, char *buf, size_t len);

struct ct_cgroup;
/* Writes the set fields to the container's cgroups; DISK is the device the
 * container's root filesystem is on (the I/O limits apply there). */
int cg_res_apply(const struct ct_cgroup *cg, const struct ct_res *r, dev_t disk);
/* Changes the RAM and swap limits of a live cgroup (0 RAM = none), in the
 * order the kernel accepts whether they grow or shrink. */
int cg_set_memory(const struct ct_cgroup *cg, uint64_t memory, uint64_t swap);
/* v1 cpuset groups start empty: give DIR (and its parents below the
 * hierarchy's root) the cpus and mems of their parent. */
int cg_cpuset_inherit(const char *dir);
/* CPU time used by the container, in nanoseconds. */
int cg_cpu_usage(const struct ct_cgroup *cg, uint64_t *ns);

#endif
