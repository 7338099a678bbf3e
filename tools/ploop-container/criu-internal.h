/* Shared by criu.c (find, checkpoint) and criu-restore.c. */
#ifndef CT_CRIU_INTERNAL_H
#define CT_CRIU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What the checkpoint's images do not say, next to them. */
#define CRIU_META "ploop-container.meta"

struct criu_meta {
  uint64_t memory, swap, pids;  /* the container's limits (config.h ct_state) */
  bool net_host;                /* --net host: no netns of its own */
  bool ext_dev, ext_shm;        /* /dev, /dev/shm made anew at restore (criu-dev.c) */
  int nstdio;
  struct {
    char key[64];  /* CRIU's name: file[MNT:INO] or pipe:[INO] */
    bool output;   /* fd 1 or 2 uses it: console.log; else /dev/null */
    bool is_file;  /* declared --external at dump */
  } stdio[3];
};

/* The container's own netns, declared external at dump. */
#define CRIU_NET_KEY "ploop-container-net"
#define CRIU_DEV_KEY "ploop-container-dev"
#define CRIU_SHM_KEY "ploop-container-shm"
#define CRIU_LAZY_PID "lazy-pages.pid"
/* Stands in for /run where /run is not a tmpfs (criu_child_setup). */
#define CRIU_RUNDIR "/dev/shm/ploop-container-criu"

/* A new network namespace with lo up, as the launcher makes (fd, -1 on error). */
int criu_new_netns(void);

/* /dev as the launcher made it, nothing added; /dev/shm empty (PID 1's view). */
bool criu_dev_is_default(pid_t pid);
bool criu_shm_is_empty(pid_t pid);
/* Mount on DIR a tmpfs as the launcher's /dev (with its nodes), or /dev/shm. */
int criu_make_dev(const char *dir);
int criu_make_shm(const char *dir);

int criu_meta_save(const char *dir, const struct criu_meta *m);
int criu_meta_load(const char *dir, struct criu_meta *m);
/* Runs ARGV to its end: stdin /dev/null, stdout+stderr into OUT (NUL
 * terminated, truncated) or /dev/null; CPU_NS (may be NULL) gets its CPU
 * time. Returns the exit status (128+signal when killed) or -1. */
int criu_run(char *const *argv, char *out, size_t outlen, uint64_t *cpu_ns);
struct rusage;
uint64_t criu_cpu_ns(const struct rusage *ru);
/* In a child about to exec CRIU: lets CRIU keep its kernel-probe cache. */
void criu_child_setup(void);
/* The first error line of a CRIU log that is not this host's known noise. */
void criu_log_error(const char *log, char *line, size_t len);
/* ploop-container[-hash]/NAME from a cgroup directory, malloc'd. */
char *criu_cgroup_group(const char *dir);

#endif
