/* Checkpoint of a running container with CRIU, and finding a CRIU that
 * works (see criu.h). What CRIU cannot see for itself is written to
 * ploop-container.meta in the images directory: the cgroup limits and the
 * host files behind the container's standard streams, which restore
 * (criu-restore.c) hands back as the restore host's own console.log. */
#include "criu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "config.h"
#include "container.h"
#include "criu-internal.h"
#include "error.h"
#include "util.h"

uint64_t criu_cpu_ns(const struct rusage *ru)
{
  return (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000u +
         (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000u;
}

void criu_child_setup(void)
{
  /* CRIU keeps what it learnt of the kernel (~0.15 s of probing per run,
   * half of a restore) in /run/criu.kdat, but only when /run is a tmpfs
   * (so a reboot drops it). Where it is not, a directory on the /dev/shm
   * tmpfs stands in for /run, in a mount namespace of this process only. */
  struct statfs sf;
  if (statfs("/run", &sf) == 0 && sf.f_type == TMPFS_MAGIC)
    return;
  if (statfs("/dev/shm", &sf) < 0 || sf.f_type != TMPFS_MAGIC)
    return;
  if (mkdir(CRIU_RUNDIR, 0700) < 0 && errno != EEXIST)
    return;
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return;
  mount(CRIU_RUNDIR, "/run", NULL, MS_BIND, NULL);
}

int criu_run(char *const *argv, char *out, size_t outlen, uint64_t *cpu_ns)
{
  int pfd[2] = {-1, -1};
  if (out && pipe2(pfd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    if (out) {
      close(pfd[0]);
      close(pfd[1]);
    }
    return ct_fail(saved, "fork");
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    int sink = out ? pfd[1] : devnull;
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(sink, 1) < 0 || dup2(sink, 2) < 0)
      _exit(127);
    criu_child_setup();
    execvp(argv[0], argv);
    _exit(127);
  }
  size_t got = 0;
  if (out) {
    close(pfd[1]);
    for (;;) {
      char buf[4096];
      ssize_t n = read(pfd[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      size_t take = (size_t)n < outlen - 1 - got ? (size_t)n : outlen - 1 - got;
      memcpy(out + got, buf, take);
      got += take;
    }
    close(pfd[0]);
    out[got] = 0;
  }
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0) {
    if (errno != EINTR)
      return ct_fail(errno, "wait for %s", argv[0]);
  }
  if (cpu_ns)
    *cpu_ns = criu_cpu_ns(&ru);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* "Version: 4.2.1" -> 0 when at least the minimum. */
static int version_ok(const char *out, char *ver, size_t verlen)
{
  const char *v = strstr(out, "Version:");
  unsigned major = 0, minor = 0;
  if (!v || sscanf(v, "Version: %u.%u", &major, &minor) != 2) {
    snprintf(ver, verlen, "unknown");
    return -1;
  }
  snprintf(ver, verlen, "%u.%u", major, minor);
  return major > CT_CRIU_MIN_MAJOR || (major == CT_CRIU_MIN_MAJOR && minor >= CT_CRIU_MIN_MINOR) ? 0 : -1;
}

/* The last line of OUT that says something (CRIU's harmless rlimit line
 * on hosts without CAP_SYS_RESOURCE skipped). */
static void last_line(const char *out, char *line, size_t len)
{
  line[0] = 0;
  const char *p = out;
  while (*p) {
    const char *e = strchrnul(p, '\n');
    if (e > p && !memmem(p, (size_t)(e - p), "RLIMIT_NOFILE", 13) &&
        !memmem(p, (size_t)(e - p), "Hardware breakpoints", 20))
      snprintf(line, len, "%.*s", (int)(e - p), p);
    p = *e ? e + 1 : e;
  }
}

static int criu_works(const char *bin, char *why, size_t whylen)
{
  char out[8192], ver[32];
  char *vargv[] = {(char *)bin, "--version", NULL};
  int rc = criu_run(vargv, out, sizeof out, NULL);
  if (rc < 0)
    return -1;
  if (rc == 127 && !out[0]) {
    snprintf(why, whylen, "%s cannot be run", bin);
    return -1;
  }
  if (version_ok(out, ver, sizeof ver) < 0) {
    snprintf(why, whylen, "%s is CRIU %s; %d.%d or later is needed (scripts/install-criu.sh provides it)",
             bin, ver, CT_CRIU_MIN_MAJOR, CT_CRIU_MIN_MINOR);
    return -1;
  }
  char *cargv[] = {(char *)bin, "check", NULL};
  rc = criu_run(cargv, out, sizeof out, NULL);
  if (rc < 0)
    return -1;
  if (rc != 0 || !strstr(out, "Looks good")) {
    char line[512];
    last_line(out, line, sizeof line);
    snprintf(why, whylen, "%s (CRIU %s) fails `criu check` on this kernel: %s", bin, ver,
             line[0] ? line : "no reason given");
    return -1;
  }
  return 0;
}

static char *on_path(const char *prog)
{
  const char *path = getenv("PATH");
  if (!path)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const char *p = path; *p;) {
    const char *e = strchrnul(p, ':');
    char *cand = xasprintf("%.*s/%s", (int)(e - p), p, prog);
    if (e > p && access(cand, X_OK) == 0)
      return cand;
    free(cand);
    p = *e ? e + 1 : e;
  }
  return NULL;
}

int ct_criu_find(const char *opt_path, char **bin, char *why, size_t whylen)
{
  *bin = NULL;
  why[0] = 0;
  if (opt_path) {
    if (access(opt_path, X_OK) < 0)
      snprintf(why, whylen, "--criu %s: %s", opt_path, strerror(errno));
    else if (criu_works(opt_path, why, whylen) == 0)
      *bin = strdup(opt_path);
    return *bin ? 0 : ct_fail(0, "%s", why);
  }
  if (access(CT_CRIU_WRAPPER, X_OK) == 0 && criu_works(CT_CRIU_WRAPPER, why, whylen) == 0) {
    *bin = strdup(CT_CRIU_WRAPPER);
    return 0;
  }
  cleanup_free char *wrapper_why = why[0] ? strdup(why) : NULL;
  cleanup_free char *path = on_path("criu");
  if (path && criu_works(path, why, whylen) == 0) {
    *bin = steal_ptr(path);
    return 0;
  }
  if (wrapper_why && path) {
    cleanup_free char *w = strdup(why);
    snprintf(why, whylen, "no working CRIU: %s; %s", wrapper_why, w);
  }
  else if (wrapper_why)
    snprintf(why, whylen, "no working CRIU: %s", wrapper_why);
  else if (!path) {
    snprintf(why, whylen, "no CRIU found (neither %s nor criu on PATH; run scripts/install-criu.sh)",
             CT_CRIU_WRAPPER);
  } else {
    cleanup_free char *w = strdup(why);
    snprintf(why, whylen, "no working CRIU: %s", w);
  }
  return ct_fail(0, "%s", why);
}

void criu_log_error(const char *log, char *line, size_t len)
{
  char buf[65536];
  line[0] = 0;
  int fd = open(log, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  off_t size = lseek(fd, 0, SEEK_END);
  off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)sizeof buf + 1 : 0;
  ssize_t n = pread(fd, buf, sizeof buf - 1, from);
  close(fd);
  if (n <= 0)
    return;
  buf[n] = 0;
  /* The first real error says why; what follows is mostly its echo. The
   * noise: no CAP_SYS_RESOURCE, no iptables binaries (nothing to lock or
   * save for a netns with only lo). */
  for (char *p = buf; *p;) {
    char *e = strchrnul(p, '\n');
    char saved = *e;
    *e = 0;
    char *err = strstr(p, "Error (");
    if (err && !strstr(p, "RLIMIT_NOFILE") && !strstr(p, "tables") && !strstr(p, "execvp") &&
        !strstr(p, "exited, status=")) {
      char *msg = strstr(err, "): ");
      snprintf(line, len, "%s", msg ? msg + 3 : err);
      return;
    }
    *e = saved;
    p = *e ? e + 1 : e;
  }
}

/* Group of the container relative to its hierarchy's root: the last two
 * components of the cgroup directory (ploop-container[-hash]/NAME). */
char *criu_cgroup_group(const char *dir)
{
  const char *p = dir + strlen(dir);
  int slashes = 0;
  while (p > dir && slashes < 2)
    if (*--p == '/')
      slashes++;
  return strdup(p);
}

static int mount_id_of(pid_t pid, int fd, int *mnt_id)
{
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", (int)pid, fd);
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  const char *m = strstr(buf, "mnt_id:");
  if (!m || sscanf(m, "mnt_id: %d", mnt_id) != 1)
    return ct_fail(0, "no mnt_id in %s", path);
  return 0;
}

static bool mount_in_container(pid_t pid, int mnt_id)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mountinfo", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    int id;
    found = sscanf(line, "%d ", &id) == 1 && id == mnt_id;
  }
  fclose(f);
  return found;
}

/* PID 1's standard streams come from the monitor (console.log, /dev/null,
 * or the pipes of whoever ran `run`): host objects CRIU cannot reopen in
 * the container's mounts. Each becomes an external resource whose key
 * restore maps to the restore host's own console.log or /dev/null. */
static int stdio_externals(pid_t pid, struct criu_meta *m)
{
  m->nstdio = 0;
  for (int fd = 0; fd < 3; fd++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    struct stat st;
    if (stat(path, &st) < 0) {
      if (errno == ENOENT)
        continue;  /* closed */
      return ct_fail(errno, "stat %s", path);
    }
    char key[64];
    if (S_ISFIFO(st.st_mode)) {
      snprintf(key, sizeof key, "pipe:[%" PRIu64 "]", (uint64_t)st.st_ino);
    } else if (S_ISSOCK(st.st_mode)) {
      return ct_fail(0, "standard stream %d of the container is a socket: CRIU cannot hand it back", fd);
    } else if (S_ISCHR(st.st_mode) && (major(st.st_rdev) == 5 || (major(st.st_rdev) >= 136 && major(st.st_rdev) <= 143))) {
      return ct_fail(0, "the container runs on a terminal (`run` on a tty): checkpoint one started with `start`");
    } else {
      int mnt_id;
      if (mount_id_of(pid, fd, &mnt_id) < 0)
        return -1;
      if (mount_in_container(pid, mnt_id))
        continue;  /* PID 1 reopened it inside: CRIU's own business */
      snprintf(key, sizeof key, "file[%x:%" PRIx64 "]", (unsigned)mnt_id, (uint64_t)st.st_ino);
    }
    int i;
    for (i = 0; i < m->nstdio; i++)
      if (strcmp(m->stdio[i].key, key) == 0)
        break;
    if (i == m->nstdio) {
      snprintf(m->stdio[i].key, sizeof m->stdio[i].key, "%s", key);
      m->stdio[i].output = false;
      m->stdio[i].is_file = key[0] == 'f';
      m->nstdio++;
    }
    if (fd > 0)
      m->stdio[i].output = true;
  }
  return 0;
}

int criu_meta_save(const char *dir, const struct criu_meta *m)
{
  char buf[2048];
  int n = snprintf(buf, sizeof buf,
                   "ploop-container-checkpoint=1\nmemory=%" PRIu64 "\nswap=%" PRIu64 "\npids=%" PRIu64
                   "\nnet=%s\ndev=%s\nshm=%s\n",
                   m->memory, m->swap, m->pids, m->net_host ? "host" : "none",
                   m->ext_dev ? "external" : "images", m->ext_shm ? "external" : "images");
  for (int i = 0; i < m->nstdio; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "stdio=%s %s\n", m->stdio[i].key,
                  m->stdio[i].output ? "console" : "null");
  cleanup_free char *path = xasprintf("%s/%s", dir, CRIU_META);
  return write_file_atomic(path, buf, (size_t)n, false);
}

int criu_meta_load(const char *dir, struct criu_meta *m)
{
  memset(m, 0, sizeof *m);
  cleanup_free char *path = xasprintf("%s/%s", dir, CRIU_META);
  char buf[4096];
  if (access(path, F_OK) < 0)
    return ct_fail(0, "%s holds no ploop-container checkpoint (no %s)", dir, CRIU_META);
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  if (strncmp(buf, "ploop-container-checkpoint=1\n", 29) != 0)
    return ct_fail(0, "%s: not a checkpoint description of this version", path);
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char key[64], role[16];
    if (sscanf(line, "memory=%" SCNu64, &m->memory) == 1 || sscanf(line, "swap=%" SCNu64, &m->swap) == 1 ||
        sscanf(line, "pids=%" SCNu64, &m->pids) == 1)
      continue;
    if (strcmp(line, "net=host") == 0) {
      m->net_host = true;
    } else if (strcmp(line, "dev=external") == 0) {
      m->ext_dev = true;
    } else if (strcmp(line, "shm=external") == 0) {
      m->ext_shm = true;
    } else if (sscanf(line, "stdio=%63s %15s", key, role) == 2) {
      if (m->nstdio == 3 || (strcmp(role, "console") != 0 && strcmp(role, "null") != 0) ||
          (strncmp(key, "file[", 5) != 0 && strncmp(key, "pipe:[", 6) != 0))
        return ct_fail(0, "%s: bad line '%s'", path, line);
      snprintf(m->stdio[m->nstdio].key, sizeof m->stdio[0].key, "%s", key);
      m->stdio[m->nstdio].output = strcmp(role, "console") == 0;
      m->stdio[m->nstdio].is_file = key[0] == 'f';
      m->nstdio++;
    }
  }
  return 0;
}

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* After a dump that ended the processes: the monitor unmounts the disk and
 * removes the cgroups, then drops the lock. */
static int wait_monitor_done(const char *name, pid_t monitor)
{
  cleanup_free char *lockpath = ct_path(name, "lock");
  cleanup_close int fd = open(lockpath, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "open %s", lockpath);
  for (int i = 0; i < 3000; i++) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return container_recover(name);  /* no-op unless the monitor died */
    sleep_ms(2);
  }
  return ct_fail(0, "monitor (pid %d) did not finish cleaning up", (int)monitor);
}

/* What CRIU cannot reopen itself, looked at while the container is frozen. */
static int describe(const struct ct_state *st, struct criu_meta *m, uint64_t *netns_ino)
{
  char netns[64];
  snprintf(netns, sizeof netns, "/proc/%d/ns/net", (int)st->init_pid);
  struct stat a, b;
  if (stat(netns, &a) < 0 || stat("/proc/self/ns/net", &b) < 0)
    return ct_fail(errno, "stat %s", netns);
  *netns_ino = a.st_ino;
  m->net_host = a.st_ino == b.st_ino;
  m->ext_dev = criu_dev_is_default(st->init_pid);
  m->ext_shm = criu_shm_is_empty(st->init_pid);
  return stdio_externals(st->init_pid, m);
}

static int criu_dump(const char *criu_bin, const char *dir, const struct ct_state *st,
                     const struct ct_cgroup *cg, const struct criu_meta *m, uint64_t netns_ino,
                     bool leave_running, uint64_t *cpu)
{
  char pid[16];
  snprintf(pid, sizeof pid, "%d", (int)st->init_pid);
  char *argv[48];
  int n = 0;
  argv[n++] = (char *)criu_bin;
  argv[n++] = "dump";
  argv[n++] = "--tree";
  argv[n++] = pid;
  argv[n++] = "--images-dir";
  argv[n++] = (char *)dir;
  argv[n++] = "--log-file";
  argv[n++] = "dump.log";
  if (getenv("PLOOP_CONTAINER_CRIU_VERBOSE"))
    argv[n++] = "-v4";
  /* The cgroup freezer stops the whole tree at once; CRIU leaves it as it
   * found it (frozen). */
  argv[n++] = "--freeze-cgroup";
  argv[n++] = cg->mode == CG_UNIFIED ? cg->unified : cg->freezer;
  argv[n++] = "--manage-cgroups";
  /* Only the hierarchies the container has groups in: the others hold it
   * in their root, and CRIU would record every busy group below that
   * root, other containers' included, and fail to restore them. */
  if (cg->mode != CG_UNIFIED) {
    static char *ctl[] = {"memory", "pids", "freezer"};
    for (int i = 0; i < 3; i++) {
      argv[n++] = "--cgroup-dump-controller";
      argv[n++] = ctl[i];
    }
  }
  if (cg->unified) {
    argv[n++] = "--cgroup-dump-controller";
    argv[n++] = "unified";
  }
  argv[n++] = "--file-locks";
  argv[n++] = "--tcp-established";
  /* Nothing outside can reach a netns with only lo: no iptables lock needed. */
  argv[n++] = "--network-lock";
  argv[n++] = "skip";
  if (leave_running)
    argv[n++] = "--leave-running";
  /* A netns with only lo holds nothing worth CRIU's ip/iptables runs (a
   * third of a restore): restore hands it a fresh one with lo up. */
  char netext[64];
  if (!m->net_host) {
    snprintf(netext, sizeof netext, "net[%" PRIu64 "]:%s", netns_ino, CRIU_NET_KEY);
    argv[n++] = "--external";
    argv[n++] = netext;
  }
  if (m->ext_dev) {
    argv[n++] = "--external";
    argv[n++] = "mnt[/dev]:" CRIU_DEV_KEY;
  }
  if (m->ext_shm) {
    argv[n++] = "--external";
    argv[n++] = "mnt[/dev/shm]:" CRIU_SHM_KEY;
  }
  char ext[3][64];
  for (int i = 0; i < m->nstdio; i++) {
    if (!m->stdio[i].is_file)
      continue;  /* pipes are dumped as such and replaced by --inherit-fd */
    snprintf(ext[i], sizeof ext[i], "%s", m->stdio[i].key);
    argv[n++] = "--external";
    argv[n++] = ext[i];
  }
  argv[n] = NULL;
  int rc = criu_run(argv, NULL, 0, cpu);
  if (rc > 0) {
    char line[512];
    cleanup_free char *log = xasprintf("%s/dump.log", dir);
    criu_log_error(log, line, sizeof line);
    return ct_fail(0, "criu dump failed: %s (log: %s)", line[0] ? line : "no error logged", log);
  }
  return rc;
}

int ct_checkpoint(const char *name, const char *criu_bin, const char *images_dir,
                  bool leave_running, struct ct_criu_times *times)
{
  uint64_t t0 = now_ns();
  if (ct_require(name) < 0)
    return -1;
  struct ct_state st;
  int have = ct_state_load(name, &st);
  if (have < 0)
    return -1;
  if (!have || !ct_state_running(&st))
    return ct_usage("container %s is not running", name);
  if (st.userns)
    return ct_fail(0, "checkpoint %s: containers with --userns are not supported (CRIU cannot "
                      "restore their id-mapped rootfs)", name);
  if (mkdir_p(images_dir, 0700) < 0)
    return ct_wrap("checkpoint %s", name);
  cleanup_free char *dir = realpath(images_dir, NULL);
  if (!dir)
    return ct_fail(errno, "checkpoint %s: %s", name, images_dir);
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  /* Frozen by us first: CRIU polls the freezer in 100 ms steps, ours in
   * 1 ms; and what describe() sees stays true until the dump. */
  bool was_frozen = false;
  if (cg_is_frozen(&cg, &was_frozen) < 0 || (!was_frozen && cg_freeze(&cg, true) < 0)) {
    cg_free(&cg);
    return ct_wrap("checkpoint %s", name);
  }
  uint64_t t1 = now_ns(), cpu = 0, netns_ino = 0;
  struct criu_meta m = {.memory = st.memory, .swap = st.swap, .pids = st.pids};
  int rc = describe(&st, &m, &netns_ino);
  if (rc == 0)
    rc = criu_meta_save(dir, &m);
  if (rc == 0)
    rc = criu_dump(criu_bin, dir, &st, &cg, &m, netns_ino, leave_running, &cpu);
  uint64_t t2 = now_ns();
  if (rc == 0 && !leave_running) {
    /* Processes that CRIU killed die only once thawed; the monitor may
     * have removed the cgroup already. */
    cg_freeze(&cg, false);
  } else if (!was_frozen && cg_freeze(&cg, false) < 0 && rc == 0) {
    rc = ct_wrap("thaw");
  }
  cg_free(&cg);
  if (rc != 0)
    return ct_wrap("checkpoint %s", name);
  if (!leave_running && wait_monitor_done(name, st.monitor_pid) < 0)
    return ct_wrap("checkpoint %s", name);
  if (times) {
    times->criu_ns = t2 - t1;
    times->criu_cpu_ns = cpu;
    times->total_ns = now_ns() - t0;
  }
  return 0;
}
