/* run (the monitor), recovery after a dead monitor, stop and exec. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "container.h"
#include "disk.h"
#include "error.h"
#include "launch.h"
#include "monitor.h"
#include "oom.h"
#include "runargs.h"
#include "util.h"

/* PLOOP_CONTAINER_TIMING=1: one stderr line with the time of each phase of
 * run, so the launch can be measured apart from the disk attach. */
static struct {
  bool on;
  uint64_t last;
  char line[512];
} timing;

static void phase(const char *name)
{
  if (!timing.on)
    return;
  uint64_t t = now_ns();
  if (name) {
    size_t n = strlen(timing.line);
    snprintf(timing.line + n, sizeof timing.line - n, " %s=%.2fms", name, (double)(t - timing.last) / 1e6);
  }
  timing.last = t;
}

static void ready(int fd, const char *msg)
{
  if (fd < 0)
    return;
  if (write(fd, msg, strlen(msg)) < 0) {
    /* `start` went away: nobody left to tell */
  }
  close(fd);
}

int container_recover(const char *name)
{
  struct ct_state st;
  int have = ct_state_load(name, &st);
  if (have < 0)
    return -1;
  /* Lock free but PID 1 alive: its monitor died. Only `stop` may end it. */
  if (have && ct_state_running(&st)) {
    ct_fail(0, "container %s is running (pid %d) without its monitor: stop it first", name,
            (int)st.init_pid);
    ct_set_error_code(CT_EXIT_BUSY);
    return -1;
  }
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  int rc = cg_destroy(&cg);  /* kills anything a dead monitor left running */
  cg_free(&cg);
  if (rc < 0)
    return ct_wrap("clean up %s", name);
  if (have && !st.kept_mounted) {
    cleanup_free char *diskdir = ct_path(name, "disk");
    cleanup_free char *mnt = ct_path(name, "rootfs");
    if (disk_is_mounted(mnt) && disk_umount(diskdir, mnt) < 0)
      return ct_wrap("clean up %s", name);
  }
  ct_state_remove(name);
  return 0;
}

/* What `list` shows of the last run. OOM_INIT: PID 1 itself was the
 * kernel's victim (not merely SIGKILLed after one of its children was). */
static void save_last_exit(const char *name, int status, uint64_t oom, bool oom_init, const char *victims)
{
  cleanup_free char *p = ct_path(name, "last-exit");
  cleanup_free char *s = xasprintf("status=%d\noom_kills=%" PRIu64 "\noom_pid1=%d\noom_victims=%s\n",
                                   status, oom, oom_init, victims);
  write_file_atomic(p, s, strlen(s), false);
}

int container_supervise(const char *name, struct ct_cgroup *cg, pid_t pid, int pty_master,
                        bool kept, const struct ct_run_opts *o, int ready_fd)
{
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  ready(ready_fd, "ok");
  uint64_t started = process_start_time(pid);
  int status = monitor_wait(pid, pty_master);
  phase("run");
  if (pty_master >= 0)
    close(pty_master);
  uint64_t oom = 0;
  cg_oom_kills(cg, &oom);
  /* The counter says how many; the kernel log says who. Without the log
   * (unreadable), a PID 1 killed by SIGKILL is taken as the victim. */
  bool oom_init = oom && status == 128 + SIGKILL;
  char victims[256] = "";
  if (oom && ct_oom_victims(cg, started, pid, &oom_init, victims, sizeof victims) <= 0)
    oom_init = status == 128 + SIGKILL;
  save_last_exit(name, status, oom, oom_init, victims);
  if (oom) {
    char m[32], s[32];
    format_size(o->memory, m, sizeof m);
    format_size(o->swap, s, sizeof s);
    fprintf(stderr, "ploop-container: %s: out of memory: the kernel OOM-killed %" PRIu64
                    " process(es)%s%s%s (limit %s RAM + %s swap)\n", name, oom,
            victims[0] ? ": " : "", victims, oom_init ? ", PID 1 among them" : "", m, s);
  }
  int rc = status;
  if (cg_destroy(cg) < 0) {
    fprintf(stderr, "ploop-container: %s\n", ct_error());
    rc = rc ? rc : 1;
  }
  ct_state_remove(name);
  phase("cleanup");
  if (!kept && disk_umount(diskdir, mnt) < 0) {
    fprintf(stderr, "ploop-container: %s\n", ct_error());
    rc = rc ? rc : 1;
  }
  phase("detach");
  if (timing.on)
    fprintf(stderr, "ploop-container: timing:%s\n", timing.line);
  cg_free(cg);
  return rc;
}

int container_run(const char *name, int lockfd, const struct ct_run_opts *o, char *const *argv,
                  int ready_fd)
{
  (void)lockfd;  /* held for our whole life; released by exit */
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  cleanup_free char *ctdir = ct_path(name, NULL);
  struct ct_cgroup cg = {0};
  bool mounted = false, cg_made = false, exec_failed = false;
  sigset_t fwd, old;
  monitor_signals(&fwd);
  sigprocmask(SIG_BLOCK, &fwd, &old);
  timing.on = getenv("PLOOP_CONTAINER_TIMING") != NULL;
  phase(NULL);
  if (container_recover(name) < 0)
    goto fail;
  phase("recover");
  /* adopt_mount: a migration mounted the disk for this run; it is ours to undo. */
  bool kept = disk_is_mounted(mnt) && !o->adopt_mount;
  mounted = o->adopt_mount;
  if (!kept && !mounted) {
    if (disk_mount(diskdir, mnt) < 0)
      goto fail;
    mounted = true;
  }
  /* Never start on the bare mountpoint: that would be the host's disk. */
  struct stat st_mnt, st_dir;
  if (stat(mnt, &st_mnt) < 0 || stat(ctdir, &st_dir) < 0 || st_mnt.st_dev == st_dir.st_dev) {
    ct_fail(0, "the disk of %s is not mounted on %s (attach reported success)", name, mnt);
    goto fail;
  }
  phase("attach");
  if (cg_init(&cg, name) < 0)
    goto fail;
  if (!o->res.set)
    cg_skip_optional(&cg);  /* no CPU or I/O limit: `update` makes them if asked */
  if (cg_create(&cg, o->memory, o->swap, o->pids) < 0)
    goto fail;
  cg_made = true;
  if (cg_res_apply(&cg, &o->res, st_mnt.st_dev) < 0)
    goto fail;
  phase("cgroup");
  struct ct_launch l = {
      .rootfs = mnt, .argv = argv, .hostname = o->hostname[0] ? o->hostname : name,
      .net = o->net, .userns = o->userns, .tty = !o->detach && isatty(0) && isatty(1), .cg = &cg,
      .sec = o->sec, .netcfg = &o->netcfg, .vol = &o->vol, .init = o->init,
  };
  l.sec.userns = o->userns;
  struct ct_process p;
  if (ct_launch(&l, &p) < 0) {
    exec_failed = p.exec_failed;
    goto fail;
  }
  struct ct_state st = {.monitor_pid = getpid(), .init_pid = p.pid,
                        .init_start = process_start_time(p.pid), .userns = o->userns,
                        .kept_mounted = kept, .memory = o->memory, .swap = o->swap, .pids = o->pids};
  if (ct_state_save(name, &st) < 0 || ct_res_save(name, "state", &o->res, false) < 0 ||
      ct_sec_save(name, "state", &l.sec) < 0 ||
      (o->netcfg.set && ct_net_save(name, &o->netcfg) < 0)) {
    kill(p.pid, SIGKILL);
    waitpid(p.pid, NULL, 0);
    goto fail;
  }
  ct_runargs_save(name, o, argv);  /* for migrate; a run goes on without it */
  phase("launch");
  int rc = container_supervise(name, &cg, p.pid, p.pty_master, kept, o, ready_fd);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
fail:
  ct_wrap("run %s", name);
  if (cg_made)
    cg_destroy(&cg);
  cg_free(&cg);
  if (mounted)
    disk_umount(diskdir, mnt);
  /* No state of ours to remove: it is written only once PID 1 runs. */
  if (ready_fd >= 0) {
    char msg[1100];
    snprintf(msg, sizeof msg, "E%s", ct_error());
    ready(ready_fd, msg);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (exec_failed) {
    save_last_exit(name, 127, 0, false, "");  /* a run, if a short one */
    ct_set_error_code(127);
  }
  return -1;
}

static int running_state(const char *name, struct ct_state *st)
{
  if (ct_require(name) < 0)
    return -1;
  int have = ct_state_load(name, st);
  if (have < 0)
    return -1;
  if (!have || !ct_state_running(st))
    return ct_state_fail(CT_EXIT_STOPPED, "container %s is not running", name);
  return 0;
}

static bool alive(const struct ct_state *st) { return ct_state_running(st); }

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int container_stop(const char *name, unsigned timeout_s)
{
  struct ct_state st;
  if (running_state(name, &st) < 0)
    return -1;
  /* stop thaws first: in a migration's in-doubt window that would run a
   * second copy, if only for its SIGTERM handler */
  cleanup_free char *mig = ct_path(name, "migration");
  char rec[512];
  if (access(mig, F_OK) == 0 && read_file(mig, rec, sizeof rec) > 0 && strstr(rec, "phase=committing"))
    return ct_usage("%s is in doubt after a migration: settle it with `migrate --resolve %s`", name, name);
  struct ct_cgroup cg;
  if (cg_init(&cg, name) < 0)
    return -1;
  bool frozen = false;
  if (cg_is_frozen(&cg, &frozen) == 0 && frozen)
    cg_freeze(&cg, false);  /* a frozen task cannot act on SIGTERM */
  kill(st.init_pid, SIGTERM);
  for (unsigned i = 0; i < timeout_s * 100 && alive(&st); i++)
    sleep_ms(10);
  if (alive(&st)) {
    /* Said, as vzctl and docker do: the processes had no chance to clean up. */
    fprintf(stderr, "ploop-container: %s still running %u s after SIGTERM: "
                    "sending SIGKILL to all its processes\n", name, timeout_s);
    cg_kill_all(&cg);
    kill(st.init_pid, SIGKILL);
    for (int i = 0; i < 500 && alive(&st); i++)  /* SIGKILL is not instant */
      sleep_ms(10);
  }
  cg_free(&cg);
  /* The monitor cleans up and then drops the lock; wait for that. */
  cleanup_free char *lockpath = ct_path(name, "lock");
  cleanup_close int fd = open(lockpath, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "open %s", lockpath);
  for (int i = 0; i < 3000; i++) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return container_recover(name);  /* no-op unless the monitor died */
    sleep_ms(10);
  }
  return ct_fail(0, "container %s: monitor (pid %d) did not finish cleaning up", name,
                 (int)st.monitor_pid);
}

/* The base environment with EO's entries on top (same key: EO's wins). */
static char **exec_env(const struct ct_exec_opts *eo)
{
  static char *const base[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME=/root", "container=ploop-container"};
  size_t nb = sizeof base / sizeof base[0], n = 0;
  char **env = calloc(nb + eo->nenv + 1, sizeof *env);
  if (!env)
    abort();
  for (size_t i = 0; i < nb + eo->nenv; i++) {
    char *kv = i < nb ? base[i] : eo->env[i - nb];
    size_t kl = strcspn(kv, "=") + 1;
    size_t j = 0;
    while (j < n && strncmp(env[j], kv, kl) != 0)
      j++;
    env[j] = kv;
    n += j == n;
  }
  return env;
}

int container_exec(const char *name, char *const *argv, const struct ct_exec_opts *eo)
{
  struct ct_state st;
  if (running_state(name, &st) < 0)
    return -1;
  static const char *order[] = {"user", "cgroup", "ipc", "uts", "net", "pid", "mnt"};
  int fds[7];
  for (int i = 0; i < 7; i++) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/%s", (int)st.init_pid, order[i]);
    fds[i] = (i == 0 && !st.userns) ? -1 : open(p, O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0 && !(i == 0 && !st.userns)) {
      int saved = errno;
      for (int j = 0; j < i; j++)
        if (fds[j] >= 0)
          close(fds[j]);
      return ct_fail(saved, "open %s", p);
    }
  }
  struct ct_sec sec;  /* what PID 1 got, so the new process gets the same */
  struct ct_cgroup cg = {0};
  int rc = ct_sec_load(name, "state", &sec) < 0 ? -1 : cg_init(&cg, name);
  bool frozen = false;
  if (rc == 0 && cg_is_frozen(&cg, &frozen) == 0 && frozen)
    rc = ct_state_fail(CT_EXIT_BUSY, "container %s is frozen: thaw it first (a new process would freeze too)", name);
  if (rc == 0)
    rc = cg_attach(&cg, 0);  /* host paths: before we enter the mount namespace */
  cg_free(&cg);
  for (int i = 0; i < 7; i++) {
    if (rc == 0 && fds[i] >= 0 && setns(fds[i], 0) < 0)
      rc = ct_fail(errno, "enter %s namespace of %s", order[i], name);
    if (fds[i] >= 0)
      close(fds[i]);
  }
  if (rc < 0)
    return -1;
  /* Host root is unmapped in the container's user namespace: become its root. */
  if (st.userns && (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
    return ct_fail(errno, "become root in the user namespace of %s", name);
  sigset_t fwd;
  monitor_signals(&fwd);
  sigprocmask(SIG_BLOCK, &fwd, NULL);
  /* On a terminal the new process gets a pty of the container's own devpts
   * (we are in its mount namespace now), never our terminal: a process in
   * the container must not be able to push input into the host's (TIOCSTI). */
  cleanup_close int master = -1;
  char slave[64] = "";
  if (isatty(0) && isatty(1)) {
    master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || unlockpt(master) < 0 || ptsname_r(master, slave, sizeof slave) != 0)
      return ct_fail(errno, "pty in container %s", name);
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  pid_t pid = fork();  /* the pid namespace applies to children only */
  if (pid < 0)
    return ct_fail(errno, "fork");
  if (pid == 0) {
    close(pipefd[0]);
    if (slave[0]) {
      int fd = setsid() < 0 ? -1 : open(slave, O_RDWR);
      if (fd < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 ||
          ioctl(0, TIOCSCTTY, 0) < 0) {
        dprintf(pipefd[1], "pty %s: %s", slave, strerror(errno));
        _exit(127);
      }
      if (fd > 2)
        close(fd);
    }
    const char *cwd = eo->cwd ? eo->cwd : "/";
    if (chdir(cwd) < 0) {
      dprintf(pipefd[1], "--cwd %s: %s", cwd, strerror(errno));
      _exit(127);
    }
    sec.user_set = eo->user_set;
    sec.uid = eo->uid;
    sec.gid = eo->gid;
    if (ct_drop_privileges(&sec) < 0) {
      dprintf(pipefd[1], "%s", ct_error());
      _exit(127);
    }
    environ = exec_env(eo);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(argv[0], argv);
    dprintf(pipefd[1], "exec %s: %s", argv[0], strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  char err[1024];
  ssize_t n = read(pipefd[0], err, sizeof err - 1);
  close(pipefd[0]);
  if (n > 0) {
    err[n] = 0;
    waitpid(pid, NULL, 0);
    ct_fail(0, "%s", err);
    ct_set_error_code(127);  /* as a shell: command not found / not runnable */
    return -1;
  }
  return monitor_wait(pid, master);
}
