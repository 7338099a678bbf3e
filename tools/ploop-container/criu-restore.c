/* Restore of a checkpointed container (see criu.h): a detached monitor, as
 * `start` makes, mounts the disk and makes the cgroups; `criu restore`
 * runs as its child with --restore-sibling, so the restored PID 1 is the
 * monitor's own child (runc's "RstSibling") and the monitor supervises it
 * exactly as one it launched. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "config.h"
#include "container.h"
#include "criu-internal.h"
#include "criu.h"
#include "disk.h"
#include "error.h"
#include "launch.h"
#include "monitor.h"
#include "util.h"

static void tell(int fd, const char *msg)
{
  if (fd >= 0 && write(fd, msg, strlen(msg)) < 0) {
    /* the restoring process went away: nobody left to tell */
  }
}

/* What the checkpoint declared external, opened on this host: its
 * standard streams, then its network namespace. */
struct stdio_fds {
  int fd[4];
  char arg[4][96];
};

int criu_new_netns(void)
{
  cleanup_close int old = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (old < 0)
    return ct_fail(errno, "open /proc/self/ns/net");
  if (unshare(CLONE_NEWNET) < 0)
    return ct_fail(errno, "new network namespace");
  int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int rc = fd < 0 ? ct_fail(errno, "open the new network namespace") : ct_loopback_up();
  if (setns(old, CLONE_NEWNET) < 0)
    abort();  /* stuck in the container's netns: nothing safe to do */
  if (rc < 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

static int open_stdio(const char *name, const struct criu_meta *m, struct stdio_fds *s)
{
  cleanup_free char *console = ct_path(name, "console.log");
  for (int i = 0; i < 4; i++)
    s->fd[i] = -1;
  for (int i = 0; i < m->nstdio; i++) {
    s->fd[i] = m->stdio[i].output ? open(console, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)
                                  : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->fd[i] < 0)
      return ct_fail(errno, "open %s", m->stdio[i].output ? console : "/dev/null");
    snprintf(s->arg[i], sizeof s->arg[i], "fd[%d]:%s", s->fd[i], m->stdio[i].key);
  }
  if (!m->net_host) {
    if ((s->fd[3] = criu_new_netns()) < 0)
      return -1;
    snprintf(s->arg[3], sizeof s->arg[3], "fd[%d]:%s", s->fd[3], CRIU_NET_KEY);
  }
  return 0;
}

/* The child that becomes `criu restore`. --root must be a mount point
 * whose parent is not over-mounted: the rootfs is bound to ROOT/NAME/
 * criu-root in a mount namespace of the child's own, which goes away with
 * it (the restored tree gets a copy of it, pivoted into the bind). */
static void criu_child(char *const *argv, const char *mnt, const char *criu_root,
                       const char *dev, const char *shm, const struct stdio_fds *s,
                       const sigset_t *mask)
{
  criu_child_setup();
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount(mnt, criu_root, NULL, MS_BIND | MS_REC, NULL) < 0) {
    fprintf(stderr, "ploop-container: restore: bind %s on %s: %s\n", mnt, criu_root, strerror(errno));
    _exit(126);
  }
  if ((dev && criu_make_dev(dev) < 0) || (shm && criu_make_shm(shm) < 0)) {
    fprintf(stderr, "ploop-container: restore: %s\n", ct_error());
    _exit(126);
  }
  for (int i = 0; i < 4; i++)
    if (s->fd[i] >= 0)
      fcntl(s->fd[i], F_SETFD, 0);
  int null = open("/dev/null", O_RDWR);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
    _exit(126);
  sigprocmask(SIG_SETMASK, mask, NULL);
  execvp(argv[0], argv);
  _exit(127);
}

/* Post-copy: the processes run as soon as their state is back and their
 * memory comes from the images on first touch (userfaultfd) or in the
 * background. The daemon is double-forked so init reaps it when done. */
static int start_lazy_pages(const char *criu_bin, const char *dir, const sigset_t *mask)
{
  cleanup_free char *sock = xasprintf("%s/lazy-pages.socket", dir);
  cleanup_free char *pidfile = xasprintf("%s/%s", dir, CRIU_LAZY_PID);
  unlink(sock);
  unlink(pidfile);
  pid_t pid = fork();
  if (pid < 0)
    return ct_fail(errno, "fork");
  if (pid == 0) {
    if (fork() != 0)
      _exit(0);
    setsid();
    char me[16];
    snprintf(me, sizeof me, "%d", (int)getpid());
    if (write_file_atomic(pidfile, me, strlen(me), false) < 0)
      _exit(126);
    char *argv[] = {(char *)criu_bin, "lazy-pages", "--images-dir", (char *)dir, "--log-file", "lazy-pages.log",
                    getenv("PLOOP_CONTAINER_CRIU_VERBOSE") ? "-v4" : NULL, NULL};
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
      _exit(126);
    criu_child_setup();
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(argv[0], argv);
    _exit(127);
  }
  waitpid(pid, NULL, 0);
  /* The daemon listens on the socket once it has read the images. */
  for (int i = 0; i < 2000 && access(sock, F_OK) < 0; i++) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (access(sock, F_OK) < 0)
    return ct_fail(0, "criu lazy-pages did not start (log: %s/lazy-pages.log)", dir);
  return 0;
}

/* A restore that failed leaves the daemon waiting for it. */
static void stop_lazy_pages(const char *dir)
{
  cleanup_free char *pidfile = xasprintf("%s/%s", dir, CRIU_LAZY_PID);
  char buf[16], cmd[4096], path[64];
  if (read_file(pidfile, buf, sizeof buf) < 0)
    return;
  snprintf(path, sizeof path, "/proc/%d/cmdline", atoi(buf));
  ssize_t n = read_file(path, cmd, sizeof cmd);
  if (n > 0 && memmem(cmd, (size_t)n, "lazy-pages", 10))
    kill(atoi(buf), SIGKILL);
  unlink(pidfile);
}

static int run_criu_restore(const char *name, const char *criu_bin, const char *dir,
                            const struct criu_meta *m, const struct ct_cgroup *cg,
                            const sigset_t *mask, bool lazy, pid_t *init, uint64_t *cpu_ns)
{
  cleanup_free char *mnt = ct_path(name, "rootfs");
  cleanup_free char *criu_root = ct_path(name, "criu-root");
  cleanup_free char *pidfile = ct_path(name, "criu.pid");
  cleanup_free char *dev = m->ext_dev ? ct_path(name, "criu-dev") : NULL;
  cleanup_free char *shm = m->ext_shm ? ct_path(name, "criu-shm") : NULL;
  const char *dirs[] = {criu_root, dev, shm};
  for (int i = 0; i < 3; i++)
    if (dirs[i] && mkdir(dirs[i], 0700) < 0 && errno != EEXIST)
      return ct_fail(errno, "mkdir %s", dirs[i]);
  cleanup_free char *ext_dev = dev ? xasprintf("mnt[%s]:%s", CRIU_DEV_KEY, dev) : NULL;
  cleanup_free char *ext_shm = shm ? xasprintf("mnt[%s]:%s", CRIU_SHM_KEY, shm) : NULL;
  unlink(pidfile);
  struct stdio_fds s;
  if (open_stdio(name, m, &s) < 0) {
    for (int i = 0; i < 4; i++)
      if (s.fd[i] >= 0)
        close(s.fd[i]);
    return -1;
  }
  /* The checkpoint's cgroups go under this host's group of the container
   * (another --root or host names them differently); only the
   * controllers we manage, the others stay where CRIU finds them. */
  cleanup_free char *group = criu_cgroup_group(cg->unified ? cg->unified : cg->memory);
  cleanup_free char *cg_mem = xasprintf("memory:/%s", group);
  cleanup_free char *cg_pids = xasprintf("pids:/%s", group);
  cleanup_free char *cg_frz = xasprintf("freezer:/%s", group);
  cleanup_free char *cg_v2 = xasprintf(":/%s", group);
  char *argv[48];
  int n = 0;
  argv[n++] = (char *)criu_bin;
  argv[n++] = "restore";
  argv[n++] = "--images-dir";
  argv[n++] = (char *)dir;
  argv[n++] = "--log-file";
  argv[n++] = "restore.log";
  if (getenv("PLOOP_CONTAINER_CRIU_VERBOSE"))
    argv[n++] = "-v4";
  argv[n++] = "--restore-detached";
  argv[n++] = "--restore-sibling";
  argv[n++] = "--root";
  argv[n++] = criu_root;
  argv[n++] = "--pidfile";
  argv[n++] = pidfile;
  argv[n++] = "--manage-cgroups";
  if (cg->mode != CG_UNIFIED) {
    char *roots[] = {cg_mem, cg_pids, cg_frz};
    for (int i = 0; i < 3; i++) {
      argv[n++] = "--cgroup-root";
      argv[n++] = roots[i];
    }
  }
  if (cg->unified) {
    argv[n++] = "--cgroup-root";
    argv[n++] = cg_v2;
  }
  argv[n++] = "--file-locks";
  argv[n++] = "--tcp-established";
  /* The standard streams come back as this host's console.log and
   * /dev/null, whatever the mode of the files they replace. */
  argv[n++] = "--skip-file-rwx-check";
  char *exts[] = {ext_dev, ext_shm};
  for (int i = 0; i < 2; i++) {
    if (!exts[i])
      continue;
    argv[n++] = "--external";
    argv[n++] = exts[i];
  }
  for (int i = 0; i < 4; i++) {
    if (s.fd[i] < 0)
      continue;
    argv[n++] = "--inherit-fd";
    argv[n++] = s.arg[i];
  }
  if (lazy) {
    argv[n++] = "--lazy-pages";
    if (start_lazy_pages(criu_bin, dir, mask) < 0)
      return -1;
  }
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid == 0)
    criu_child(argv, mnt, criu_root, dev, shm, &s, mask);
  int saved = errno;
  for (int i = 0; i < 4; i++)
    if (s.fd[i] >= 0)
      close(s.fd[i]);
  if (pid < 0)
    return ct_fail(saved, "fork");
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0)
    if (errno != EINTR)
      return ct_fail(errno, "wait for criu restore");
  *cpu_ns = criu_cpu_ns(&ru);
  cleanup_free char *log = xasprintf("%s/restore.log", dir);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (lazy)
      stop_lazy_pages(dir);
    char line[512];
    criu_log_error(log, line, sizeof line);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
      return ct_fail(0, "cannot run %s", criu_bin);
    return ct_fail(0, "criu restore failed: %s (log: %s)", line[0] ? line : "no error logged", log);
  }
  char buf[32];
  if (read_file(pidfile, buf, sizeof buf) < 0)
    return ct_wrap("criu restore wrote no pid");
  unlink(pidfile);
  *init = (pid_t)strtol(buf, NULL, 10);
  siginfo_t si;
  if (*init <= 0 || waitid(P_PID, (id_t)*init, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
    return ct_fail(0, "criu restore: pid %s is not the monitor's child", buf);
  return 0;
}

/* The monitor of a restored container. Returns its exit status, or -1
 * (with the error sent on READY_FD) when the restore failed. */
/* On a hybrid host CRIU puts the restored tree back into the groups of the
 * controllers it was told to manage (memory, pids, freezer) but leaves the
 * others and the controller-less v2 tree (where cgroup.kill and tracking
 * live) at the root. Frozen meanwhile, every task of the freezer group
 * joins all of the container's groups; a task forked meanwhile would else
 * stay behind. */
static int adopt_restored_tree(const struct ct_cgroup *cg)
{
  if (cg->mode != CG_HYBRID || !cg->freezer)
    return 0;
  if (cg_freeze(cg, true) < 0)
    return -1;
  char buf[65536];
  cleanup_free char *procs = xasprintf("%s/cgroup.procs", cg->freezer);
  int rc = read_file(procs, buf, sizeof buf);
  for (char *s = buf; rc >= 0 && *s;) {
    char *end;
    long pid = strtol(s, &end, 10);
    if (end == s)
      break;
    if (pid > 0 && cg_attach(cg, (pid_t)pid) < 0 && kill((pid_t)pid, 0) == 0)
      rc = -1;  /* a task that exited meanwhile is no failure */
    s = *end ? end + 1 : end;
  }
  if (cg_freeze(cg, false) < 0)
    rc = -1;
  return rc < 0 ? ct_wrap("move the restored processes into their cgroups") : 0;
}

static int restore_monitor(const char *name, const char *criu_bin, const char *dir, const struct criu_meta *m,
                           bool lazy, bool adopt, int ready_fd)
{
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  cleanup_free char *ctdir = ct_path(name, NULL);
  struct ct_cgroup cg = {0};
  bool mounted = false, cg_made = false;
  sigset_t fwd, old;
  monitor_signals(&fwd);
  sigprocmask(SIG_BLOCK, &fwd, &old);
  if (container_recover(name) < 0)
    goto fail;
  /* ADOPT: the caller mounted the disk for this run; it is ours to undo */
  bool kept = disk_is_mounted(mnt) && !adopt;
  mounted = adopt;
  if (!kept && !mounted) {
    if (disk_mount(diskdir, mnt) < 0)
      goto fail;
    mounted = true;
  }
  struct stat st_mnt, st_dir;
  if (stat(mnt, &st_mnt) < 0 || stat(ctdir, &st_dir) < 0 || st_mnt.st_dev == st_dir.st_dev) {
    ct_fail(0, "the disk of %s is not mounted on %s", name, mnt);
    goto fail;
  }
  if (cg_init(&cg, name) < 0 || cg_create(&cg, m->memory, m->swap, m->pids) < 0)
    goto fail;
  cg_made = true;
  uint64_t t0 = now_ns();
  pid_t init = -1;
  uint64_t cpu = 0;
  if (run_criu_restore(name, criu_bin, dir, m, &cg, &old, lazy, &init, &cpu) < 0)
    goto fail;
  if (adopt_restored_tree(&cg) < 0) {
    kill(init, SIGKILL);
    waitpid(init, NULL, 0);
    goto fail;
  }
  char msg[64];
  snprintf(msg, sizeof msg, "t%" PRIu64 " %" PRIu64 "\n", now_ns() - t0, cpu);
  tell(ready_fd, msg);
  struct ct_state st = {.monitor_pid = getpid(), .init_pid = init,
                        .init_start = process_start_time(init), .kept_mounted = kept,
                        .memory = m->memory, .swap = m->swap, .pids = m->pids};
  if (ct_state_save(name, &st) < 0) {
    kill(init, SIGKILL);
    waitpid(init, NULL, 0);
    goto fail;
  }
  struct ct_run_opts o = {.memory = m->memory, .swap = m->swap, .pids = m->pids,
                          .net = m->net_host ? CT_NET_HOST : CT_NET_NONE, .detach = true};
  int rc = container_supervise(name, &cg, init, -1, kept, &o, ready_fd);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
fail:
  ct_wrap("restore %s", name);
  if (cg_made)
    cg_destroy(&cg);  /* kills whatever a half-done restore left */
  cg_free(&cg);
  if (mounted)
    disk_umount(diskdir, mnt);
  char err[1100];
  snprintf(err, sizeof err, "E%s", ct_error());
  tell(ready_fd, err);
  close(ready_fd);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return -1;
}

static int restore(const char *name, const char *criu_bin, const char *images_dir, bool lazy_pages,
                   bool adopt, struct ct_criu_times *times)
{
  uint64_t t0 = now_ns();
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *dir = realpath(images_dir, NULL);
  if (!dir)
    return ct_fail(errno, "restore %s: %s", name, images_dir);
  struct criu_meta m;
  if (criu_meta_load(dir, &m) < 0)
    return ct_wrap("restore %s", name);
  cleanup_free char *inventory = xasprintf("%s/inventory.img", dir);
  if (access(inventory, F_OK) < 0)
    return ct_fail(0, "restore %s: %s holds no CRIU images (no inventory.img)", name, dir);
  cleanup_close int lock = ct_lock(name);
  if (lock < 0)
    return -1;
  cleanup_free char *log = ct_path(name, "console.log");
  int pfd[2];
  /* A caller's sockets (a migration's connection and listener) are not the
   * monitor's: kept open they would keep the peer's connection up. */
  pid_t pid = monitor_fork(name, lock, true, &pfd[0], &pfd[1]);
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int rc = restore_monitor(name, criu_bin, dir, &m, lazy_pages, adopt, pfd[1]);
    _exit(rc < 0 ? 1 : rc);
  }
  char msg[1200];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(pfd[0], msg + got, sizeof msg - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || (got += (size_t)n) == sizeof msg - 1)
      break;
    if (got >= 2 && memcmp(msg + got - 2, "ok", 2) == 0)
      break;  /* the monitor keeps the pipe until it exits */
  }
  close(pfd[0]);
  msg[got] = 0;
  uint64_t criu_ns = 0, cpu_ns = 0;
  char *p = msg;
  if (*p == 't') {
    criu_ns = strtoull(p + 1, &p, 10);
    cpu_ns = strtoull(p, &p, 10);
    if (*p == '\n')
      p++;
  }
  if (*p == 'E')
    return ct_fail(0, "%s", p + 1);
  if (strcmp(p, "ok") != 0)
    return ct_fail(0, "restore %s: the monitor died before the container ran (see %s)", name, log);
  if (times) {
    times->criu_ns = criu_ns;
    times->criu_cpu_ns = cpu_ns;
    times->total_ns = now_ns() - t0;
  }
  return 0;
}

int ct_restore_lazy_wait(const char *images_dir, unsigned timeout_ms)
{
  cleanup_free char *pidfile = xasprintf("%s/%s", images_dir, CRIU_LAZY_PID);
  char buf[16];
  if (access(pidfile, F_OK) < 0 || read_file(pidfile, buf, sizeof buf) < 0)
    return 0;  /* not a lazy restore */
  char cmdline[64];
  snprintf(cmdline, sizeof cmdline, "/proc/%d/cmdline", atoi(buf));
  for (unsigned i = 0; i < timeout_ms; i++) {
    char cmd[4096];
    ssize_t n = read_file(cmdline, cmd, sizeof cmd);
    if (n < 0 || !memmem(cmd, (size_t)n, "lazy-pages", 10)) {
      unlink(pidfile);
      return 0;
    }
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return ct_fail(0, "criu lazy-pages (pid %s) still copying memory after %u ms", buf, timeout_ms);
}

int ct_restore(const char *name, const char *criu_bin, const char *images_dir, bool lazy_pages,
               struct ct_criu_times *times)
{
  return restore(name, criu_bin, images_dir, lazy_pages, false, times);
}

int ct_restore_adopt(const char *name, const char *criu_bin, const char *images_dir)
{
  return restore(name, criu_bin, images_dir, false, true, NULL);
}
