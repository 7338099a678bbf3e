/* Local attach: spawn ploop-nbd with a FUSE export, bind a loop device with
 * direct I/O to the FUSE file, mount the filesystem; and the reverse.  Each
 * attachment's state is a small key=value file under PLOOP_ATTACH_RUN_DIR. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach-internal.h"
#include "control.h"

#define DAEMON_START_TIMEOUT_MS 15000
#define DAEMON_STOP_TIMEOUT_MS 60000

/* ---- small helpers ---------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t fnv1a(const char *s, uint64_t h)
{
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

/* Resolves DIR_OR_XML to the absolute directory of its DiskDescriptor.xml. */
static int resolve_disk_dir(const char *dir_or_xml, char *out)
{
  char tmp[PATH_MAX];
  struct stat st;
  if (!strncmp(dir_or_xml, "rbd:", 4)) { /* a disk in Ceph: its name is its identity */
    if (strlen(dir_or_xml) >= PATH_MAX)
      return ploop_set_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%.64s...: name too long", dir_or_xml);
    snprintf(out, PATH_MAX, "%s", dir_or_xml);
    return 0;
  }
  if (stat(dir_or_xml, &st) < 0)
    return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "%s: %s", dir_or_xml, strerror(errno));
  snprintf(tmp, sizeof(tmp), "%s", dir_or_xml);
  const char *dir = S_ISDIR(st.st_mode) ? tmp : dirname(tmp);
  if (!realpath(dir, out))
    return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "%s: %s", dir_or_xml, strerror(errno));
  char xml[PATH_MAX + 32];
  snprintf(xml, sizeof(xml), "%s/%s", out, PLOOP_DESCRIPTOR_NAME);
  if (access(xml, R_OK) < 0)
    return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "%s: no %s there", out, PLOOP_DESCRIPTOR_NAME);
  return 0;
}

struct paths {
  char id[17];
  char state[PATH_MAX];
  char fuse_dir[PATH_MAX];
  char nbd_socket[PATH_MAX];
  char control_socket[PATH_MAX];
  char pid_file[PATH_MAX];
  char log[PATH_MAX];
};

static void make_paths(const char *disk_dir, const char *guid, struct paths *p)
{
  uint64_t h = fnv1a(guid, fnv1a("\n", fnv1a(disk_dir, 0xcbf29ce484222325ull)));
  snprintf(p->id, sizeof(p->id), "%016llx", (unsigned long long)h);
  snprintf(p->state, sizeof(p->state), "%s/%s.state", PLOOP_ATTACH_RUN_DIR, p->id);
  snprintf(p->fuse_dir, sizeof(p->fuse_dir), "%s/%s.fuse", PLOOP_ATTACH_RUN_DIR, p->id);
  snprintf(p->pid_file, sizeof(p->pid_file), "%s/%s.pid", PLOOP_ATTACH_RUN_DIR, p->id);
  snprintf(p->log, sizeof(p->log), "%s/%s.log", PLOOP_ATTACH_RUN_DIR, p->id);
  snprintf(p->nbd_socket, sizeof(p->nbd_socket), "%s/%s.nbd", PLOOP_ATTACH_RUN_DIR, p->id);
  /* The daemon of the live top answers on the disk's well-known control
   * socket, which `ploop snapshot DIR` and friends find by the disk dir. */
  if (guid[0] || ploop_ctl_socket_path(disk_dir, p->control_socket, sizeof(p->control_socket)) < 0)
    p->control_socket[0] = 0;
}

/* True when MOUNT_POINT is the root of a filesystem on DEVICE (and not
 * whatever may be mounted there since a crash). */
static bool mounted_from(const char *mount_point, const char *device)
{
  struct stat m, d;
  char type[32];
  attach_mounted_fstype(mount_point, type, sizeof(type));
  return type[0] && stat(device, &d) == 0 && S_ISBLK(d.st_mode) && stat(mount_point, &m) == 0 &&
         m.st_dev == d.st_rdev;
}

/* ---- the daemon ------------------------------------------------------- */

/* $PLOOP_NBD (tests, odd installs), else ploop-nbd next to the running
 * binary (one build tree, one install), else the PATH. */
static void daemon_path(char *out, size_t len)
{
  const char *env = getenv("PLOOP_NBD");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return;
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    snprintf(out, len, "%s/ploop-nbd", dirname(self));
    if (access(out, X_OK) == 0)
      return;
  }
  snprintf(out, len, "ploop-nbd");
}

static void log_last_line(const char *log, char *msg, size_t len)
{
  msg[0] = 0;
  int fd = open(log, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  char buf[4096];
  off_t size = lseek(fd, 0, SEEK_END);
  off_t from = size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0;
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
  close(fd);
  if (n <= 0)
    return;
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
    n--;
  buf[n] = 0;
  char *start = strrchr(buf, '\n');
  attach_copy_field(msg, len, start ? start + 1 : buf);
}

/* The FUSE file is ready when it is a regular file on a filesystem other
 * than the one holding the (still empty) mount point directory. */
static bool fuse_ready(const char *fuse_dir, dev_t parent_dev)
{
  char file[PATH_MAX + 16];
  struct stat st;
  snprintf(file, sizeof(file), "%s/%s", fuse_dir, PLOOP_ATTACH_FUSE_FILE);
  return stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev != parent_dev;
}

/* Waits up to MS for PID to end, woken by its pidfd the moment it does
 * (a 10-20 ms sleep loop cost a whole step per attach and per detach).
 * Returns 1 when it ended, 0 on timeout, -1 when pidfds are unavailable or
 * PID is gone already (the caller then checks as before). */
static int pid_wait_exit(pid_t pid, unsigned ms)
{
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0)
    return -1;
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int r;
  while ((r = poll(&pfd, 1, (int)ms)) < 0 && errno == EINTR) {
  }
  close(fd);
  return r > 0 ? 1 : r == 0 ? 0 : -1;
}

/* Stops the daemon: SIGTERM lets it flush and clear the in-use mark. */
static int daemon_stop(pid_t pid, const char *fuse_dir)
{
  if (!attach_daemon_alive(pid, fuse_dir))
    return 0;
  if (kill(pid, SIGTERM) < 0 && errno != ESRCH)
    return ploop_set_error(PLOOP_ERR_GENERIC, errno, "stop ploop-nbd (pid %d): %s", (int)pid,
                       strerror(errno));
  /* pidfd readable: the process has exited (a zombie, if it is our own child). */
  if (pid_wait_exit(pid, DAEMON_STOP_TIMEOUT_MS) == 1)
    waitpid(pid, NULL, WNOHANG);
  for (unsigned waited = 0; waited < DAEMON_STOP_TIMEOUT_MS; waited += 20) {
    /* Reap it if it is our own child (attach and umount in one process). */
    waitpid(pid, NULL, WNOHANG);
    if (!attach_daemon_alive(pid, fuse_dir))
      return 0;
    sleep_ms(20);
  }
  kill(pid, SIGKILL);
  return ploop_set_error(PLOOP_ERR_BUSY, ETIMEDOUT,
                     "ploop-nbd (pid %d) did not stop in %d s; killed, run `ploop check -F -d`",
                     (int)pid, DAEMON_STOP_TIMEOUT_MS / 1000);
}

static int daemon_start(const char *disk_dir, const struct paths *p, const char *guid,
                        bool readonly, bool standby, pid_t *pid_out)
{
  char exe[PATH_MAX];
  daemon_path(exe, sizeof(exe));
  struct stat parent;
  if (stat(p->fuse_dir, &parent) < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", p->fuse_dir, strerror(errno));
  unlink(p->pid_file);
  char *argv[20];
  int a = 0;
  argv[a++] = exe;
  argv[a++] = "--fuse";
  argv[a++] = (char *)p->fuse_dir;
  argv[a++] = "--fuse-name";
  argv[a++] = PLOOP_ATTACH_FUSE_FILE;
  argv[a++] = "-U";
  argv[a++] = (char *)p->nbd_socket;
  argv[a++] = "--pid-file";
  argv[a++] = (char *)p->pid_file;
  /* The daemon is our child (no fork of its own, no intermediate process
   * to wait out): it says "ok" or why it failed on fd 3. */
  argv[a++] = "--ready-fd";
  argv[a++] = "3";
  /* A read-only attach of the top is enforced by the read-only loop device
   * and mount; the daemon serves the top as usual (and keeps its control
   * socket for `ploop snapshot`).  Snapshots are served read-only. */
  (void)readonly;
  if (standby)
    argv[a++] = "--standby";
  if (guid[0]) {
    argv[a++] = "-r";
    argv[a++] = "--snapshot";
    argv[a++] = (char *)guid;
  }
  argv[a++] = (char *)disk_dir;
  argv[a] = NULL;

  int log = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", p->log, strerror(errno));
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) {
    int e = errno;
    close(log);
    return ploop_set_error(PLOOP_ERR_GENERIC, e, "pipe: %s", strerror(e));
  }
  pid_t child = fork();
  if (child < 0) {
    int e = errno;
    close(log);
    close(ready[0]);
    close(ready[1]);
    return ploop_set_error(PLOOP_ERR_GENERIC, e, "fork: %s", strerror(e));
  }
  if (child == 0) {
    /* Its own session: the daemon must outlive the CLI and its terminal.
     * Nor does it inherit the signals a caller blocks (a container's
     * monitor blocks SIGCHLD, SIGUSR1, ... for its signalfd). */
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0)
      dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    if (ready[1] == 3)
      fcntl(3, F_SETFD, 0);
    else
      dup2(ready[1], 3);
    execvp(argv[0], argv);
    dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(log);
  close(ready[1]);

  /* "ok" once the export is ready; else the reason, or EOF if it died. */
  char msg[512];
  size_t got = 0;
  bool timed_out = false;
  struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
  for (;;) {
    int r = poll(&pfd, 1, DAEMON_START_TIMEOUT_MS);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      timed_out = true;
      break;
    }
    ssize_t n = read(ready[0], msg + got, sizeof(msg) - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
    if (got == sizeof(msg) - 1)
      break;
  }
  close(ready[0]);
  msg[got] = 0;
  bool ok = got == 2 && memcmp(msg, "ok", 2) == 0;
  if (ok && fuse_ready(p->fuse_dir, parent.st_dev)) {
    *pid_out = child;
    return 0;
  }
  if (ok)
    daemon_stop(child, p->fuse_dir);  /* SIGTERM: it clears the in-use mark */
  else if (timed_out)
    kill(child, SIGKILL);
  waitpid(child, NULL, 0);  /* a failed start exits by itself */
  umount2(p->fuse_dir, MNT_DETACH);
  if (timed_out)
    return ploop_set_error(PLOOP_ERR_GENERIC, ETIMEDOUT, "ploop-nbd did not export %s in %d s",
                           disk_dir, DAEMON_START_TIMEOUT_MS / 1000);
  if (!got)
    log_last_line(p->log, msg, sizeof(msg));
  const char *why = strncmp(msg, "ploop-nbd: ", 11) == 0 ? msg + 11 : msg;
  return ploop_set_error(PLOOP_ERR_GENERIC, EIO, "ploop-nbd failed: %s",
                         why[0] ? why : "exited without a message");
}

/* ---- loop device ------------------------------------------------------ */

static int loop_attach(const char *file, bool readonly, const char *label, char *dev, size_t len)
{
  int ffd = open(file, (readonly ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC);
  if (ffd < 0)
    return ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", file, strerror(errno));
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) {
    int e = errno;
    close(ffd);
    return ploop_set_error(PLOOP_ERR_IO, e, "/dev/loop-control: %s", strerror(e));
  }
  int rc = -1;
  /* Another process may take the free device between GET_FREE and
   * CONFIGURE: then ask again. */
  for (int attempt = 0; attempt < 16 && rc < 0; attempt++) {
    int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (nr < 0) {
      ploop_set_error(PLOOP_ERR_IO, errno, "no free loop device: %s", strerror(errno));
      break;
    }
    snprintf(dev, len, "/dev/loop%d", nr);
    int lfd = open(dev, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (lfd < 0) {
      ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", dev, strerror(errno));
      break;
    }
    struct loop_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.fd = (unsigned)ffd;
    /* Direct I/O: the filesystem above has the page cache; the FUSE file
     * must not keep a second copy of every block. */
    cfg.info.lo_flags = LO_FLAGS_DIRECT_IO | (readonly ? LO_FLAGS_READ_ONLY : 0);
    attach_copy_field((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), label);
    if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
      rc = 0;
    } else if (errno != EBUSY) {
      ploop_set_error(PLOOP_ERR_IO, errno, "%s: attach %s: %s", dev, file, strerror(errno));
      close(lfd);
      break;
    }
    close(lfd);
  }
  close(ctl);
  close(ffd);
  return rc;
}

/* Each attachment tags its loop device (lo_file_name starts "ploop:ID ") so
 * that an umount long after a crash never detaches a device number that
 * another attachment has taken since. */
static void loop_tag(const struct paths *p, const char *disk_dir, char *out, size_t len)
{
  snprintf(out, len, "ploop:%s %s", p->id, disk_dir);
}

static bool loop_is_ours(int fd, const struct paths *p)
{
  struct loop_info64 li;
  if (ioctl(fd, LOOP_GET_STATUS64, &li) < 0)
    return false; /* ENXIO: nothing bound */
  char want[32];
  int n = snprintf(want, sizeof(want), "ploop:%s ", p->id);
  return strncmp((const char *)li.lo_file_name, want, (size_t)n) == 0;
}

static bool loop_device_is_ours(const char *dev, const struct paths *p)
{
  int fd = open(dev, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool ours = loop_is_ours(fd, p);
  close(fd);
  return ours;
}

static int loop_detach(const char *dev, const struct paths *p)
{
  int fd = open(dev, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : ploop_set_error(PLOOP_ERR_IO, errno, "%s: %s", dev, strerror(errno));
  if (!loop_is_ours(fd, p)) {
    close(fd);
    return 0;
  }
  int rc = 0;
  /* ENXIO: nothing bound any more (already detached). */
  for (int attempt = 0; ioctl(fd, LOOP_CLR_FD) < 0 && errno != ENXIO; attempt++) {
    if (errno != EBUSY || attempt == 50) {
      rc = ploop_set_error(PLOOP_ERR_BUSY, errno, "%s: detach: %s", dev, strerror(errno));
      break;
    }
    sleep_ms(20);
  }
  close(fd);
  return rc;
}

/* The loop device bound to our FUSE file, found by its backing file: an
 * attach killed between binding it and recording it left it unnamed. */
static void loop_find_bound(const struct paths *p, char *dev, size_t len)
{
  char want[PATH_MAX + 16];
  snprintf(want, sizeof(want), "%s/%s", p->fuse_dir, PLOOP_ATTACH_FUSE_FILE);
  DIR *d = opendir("/sys/block");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "loop", 4) != 0)
      continue;
    char path[300], back[PATH_MAX + 16];
    snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, back, sizeof(back) - 1);
    close(fd);
    if (n <= 0)
      continue;
    back[n] = 0;
    back[strcspn(back, "\n")] = 0;
    if (strcmp(back, want) == 0) {
      snprintf(dev, len, "/dev/%.40s", e->d_name);
      break;
    }
  }
  closedir(d);
}

/* ---- mount ------------------------------------------------------------ */

/* mount(8)-style options: the generic ones are MS_* flags for mount(2), the
 * rest is the filesystem's data string. */
static const struct {
  const char *name;
  unsigned long set, clear;
} generic_opts[] = {
    {"ro", MS_RDONLY, 0},          {"rw", 0, MS_RDONLY},
    {"nosuid", MS_NOSUID, 0},      {"suid", 0, MS_NOSUID},
    {"nodev", MS_NODEV, 0},        {"dev", 0, MS_NODEV},
    {"noexec", MS_NOEXEC, 0},      {"exec", 0, MS_NOEXEC},
    {"sync", MS_SYNCHRONOUS, 0},   {"async", 0, MS_SYNCHRONOUS},
    {"dirsync", MS_DIRSYNC, 0},    {"noatime", MS_NOATIME, 0},
    {"atime", 0, MS_NOATIME},      {"nodiratime", MS_NODIRATIME, 0},
    {"diratime", 0, MS_NODIRATIME}, {"relatime", MS_RELATIME, 0},
    {"norelatime", 0, MS_RELATIME}, {"strictatime", MS_STRICTATIME, 0},
    {"lazytime", MS_LAZYTIME, 0},  {"nolazytime", 0, MS_LAZYTIME},
    {"defaults", 0, 0},
};

static void split_mount_options(const char *in, unsigned long *flags, char *data, size_t len)
{
  data[0] = 0;
  if (!in)
    return;
  char *copy = strdup(in), *save = NULL;
  if (!copy)
    return;
  size_t used = 0;
  for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
    bool generic = false;
    for (size_t k = 0; k < sizeof(generic_opts) / sizeof(generic_opts[0]) && !generic; k++) {
      if (strcmp(o, generic_opts[k].name) == 0) {
        *flags = (*flags | generic_opts[k].set) & ~generic_opts[k].clear;
        generic = true;
      }
    }
    if (!generic && used + strlen(o) + 2 < len)
      used += (size_t)snprintf(data + used, len - used, "%s%s", used ? "," : "", o);
  }
  free(copy);
}

static int fs_mount(const char *dev, const char *mp, const char *fstype, bool readonly,
                    unsigned long extra, const char *options)
{
  unsigned long flags = extra;
  char data[1024];
  split_mount_options(options, &flags, data, sizeof(data));
  if (readonly)
    flags |= MS_RDONLY;
  if (mount(dev, mp, fstype, flags, data) == 0)
    return 0;
  int e = errno;
  readonly = flags & MS_RDONLY;
  /* A read-only device cannot replay a journal: mount without it (a
   * snapshot taken under FIFREEZE has a clean journal anyway). XFS also
   * refuses a second filesystem with the UUID of a mounted one: a snapshot
   * of a mounted XFS has it, hence nouuid. */
  if (readonly && (e == EROFS || e == EINVAL || e == EACCES)) {
    const char *skip = strncmp(fstype, "ext", 3) == 0 ? "noload"
                       : strcmp(fstype, "xfs") == 0   ? "norecovery,nouuid"
                                                      : NULL;
    if (skip) {
      char opts[sizeof(data) + 32];
      int n = snprintf(opts, sizeof(opts), "%s%s%s", data, *data ? "," : "", skip);
      if (n > 0 && (size_t)n < sizeof(opts) && mount(dev, mp, fstype, flags, opts) == 0)
        return 0;
    }
  }
  return ploop_set_error(e == EBUSY ? PLOOP_ERR_BUSY : PLOOP_ERR_IO, e, "mount %s (%s) on %s: %s", dev,
                     fstype, mp, strerror(e));
}

/* ---- attach / umount -------------------------------------------------- */

/* The pid ploop-nbd wrote in its pid file, or -1. */
static pid_t read_pid_file(const char *path)
{
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  int pid = -1;
  if (fscanf(f, "%d", &pid) != 1)
    pid = -1;
  fclose(f);
  return pid;
}

/* Undoes what INFO records, newest step first.  Keeps going after a failed
 * step so that as much as possible is released; returns the first error. */
static int teardown(struct ploop_attach_info *i, const struct paths *p)
{
  int rc = 0;
  /* Recorded before its daemon and device were (an attach killed half-way):
   * find them by the daemon's pid file and the device's backing file. */
  if (i->daemon_pid <= 0)
    i->daemon_pid = read_pid_file(p->pid_file);
  if (!i->device[0])
    loop_find_bound(p, i->device, sizeof(i->device));
  /* After a crash and a manual cleanup the device number may belong to
   * another attachment now: then neither it nor its mount is ours. */
  if (i->device[0] && !loop_device_is_ours(i->device, p)) {
    i->device[0] = 0;
    i->mount_point[0] = 0;
  }
  if (i->mount_point[0] && mounted_from(i->mount_point, i->device)) {
    if (umount2(i->mount_point, 0) < 0)
      return ploop_set_error(errno == EBUSY ? PLOOP_ERR_BUSY : PLOOP_ERR_IO, errno,
                         "umount %s: %s", i->mount_point, strerror(errno));
  }
  i->mount_point[0] = 0;
  if (i->device[0] && loop_detach(i->device, p) < 0)
    return -1;
  i->device[0] = 0;
  i->daemon_alive = i->daemon_pid <= 0 || attach_daemon_alive(i->daemon_pid, i->fuse_dir);
  if (i->daemon_pid > 0 && daemon_stop(i->daemon_pid, i->fuse_dir) < 0 && rc == 0)
    rc = -1;
  /* A daemon that died leaves its FUSE mount behind ("transport endpoint
   * is not connected"); a detached unmount always succeeds. */
  if (i->fuse_dir[0]) {
    umount2(i->fuse_dir, MNT_DETACH);
    rmdir(i->fuse_dir);
  }
  unlink(p->pid_file);
  /* A daemon killed by a signal leaves its NBD socket behind. */
  if (i->nbd_socket[0])
    unlink(i->nbd_socket);
  /* The log of a daemon that died is kept for the post-mortem. */
  struct stat log_st;
  if (!i->daemon_alive && stat(p->log, &log_st) == 0 && log_st.st_size > 0) {
    char dead[PATH_MAX + 8];
    snprintf(dead, sizeof(dead), "%s.dead", p->log);
    rename(p->log, dead);
  }
  unlink(p->log);
  unlink(p->state);
  return rc;
}

int ploop_attach_mount(const char *disk_dir_arg, const struct ploop_attach_opts *o,
                       struct ploop_attach_info *out)
{
  static const struct ploop_attach_opts defaults;
  if (!o)
    o = &defaults;
  struct ploop_attach_info i;
  memset(&i, 0, sizeof(i));
  if (!disk_dir_arg)
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "mount: no disk given");
  if (resolve_disk_dir(disk_dir_arg, i.disk_dir) < 0)
    return -1;
  if (o->snapshot_guid && ploop_uuid_normalize(o->snapshot_guid, i.snapshot_guid) < 0)
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "'%s' is not a snapshot UUID", o->snapshot_guid);
  i.readonly = o->readonly || i.snapshot_guid[0];
  if (o->standby && (i.readonly || o->mount_point))
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "a standby attach is of the read-write top, unmounted");
  if (o->mount_point) {
    struct stat st;
    if (!realpath(o->mount_point, i.mount_point) || stat(i.mount_point, &st) < 0)
      return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "mount point %s: %s", o->mount_point,
                         strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return ploop_set_error(PLOOP_ERR_PARAM, ENOTDIR, "mount point %s is not a directory",
                         o->mount_point);
  }
  snprintf(i.kind, sizeof(i.kind), "fuse+loop");
  struct paths p;
  make_paths(i.disk_dir, i.snapshot_guid, &p);
  snprintf(i.fuse_dir, sizeof(i.fuse_dir), "%s", p.fuse_dir);
  snprintf(i.control_socket, sizeof(i.control_socket), "%s", p.control_socket);
  snprintf(i.nbd_socket, sizeof(i.nbd_socket), "%s", p.nbd_socket);

  int lock = attach_lock();
  if (lock < 0)
    return -1;
  struct ploop_attach_info old;
  if (access(p.state, F_OK) == 0 && attach_state_read(p.state, &old) == 0) {
    attach_unlock(lock);
    if (old.daemon_alive)
      return ploop_set_error(PLOOP_ERR_BUSY, EBUSY, "%s%s%s is already attached as %s%s%s",
                         i.disk_dir, i.snapshot_guid[0] ? " snapshot " : "", i.snapshot_guid,
                         old.device, old.mount_point[0] ? " on " : "", old.mount_point);
    return ploop_set_error(PLOOP_ERR_BUSY, EBUSY,
                       "%s: a previous attach died (daemon gone); run `ploop umount %s` first",
                       i.disk_dir, i.disk_dir);
  }
  /* From here on, every step is recorded in I so teardown() can undo it. */
  int rc = -1;
  if (mkdir(p.fuse_dir, 0700) < 0 && errno != EEXIST) {
    ploop_set_error(PLOOP_ERR_IO, errno, "mkdir %s: %s", p.fuse_dir, strerror(errno));
    goto fail;
  }
  char want_mp[PATH_MAX];
  snprintf(want_mp, sizeof(want_mp), "%s", i.mount_point);
  i.mount_point[0] = 0;
  /* On record before anything runs: an attach killed at any step leaves a
   * state that `ploop umount DISK` (teardown) undoes. */
  if (attach_state_write(p.state, &i) < 0)
    goto fail;
  if (daemon_start(i.disk_dir, &p, i.snapshot_guid, i.readonly, o->standby, &i.daemon_pid) < 0)
    goto fail;
  if (attach_state_write(p.state, &i) < 0)
    goto fail;
  char file[PATH_MAX + 16];
  snprintf(file, sizeof(file), "%s/%s", p.fuse_dir, PLOOP_ATTACH_FUSE_FILE);
  char tag[PATH_MAX + 32];
  loop_tag(&p, i.disk_dir, tag, sizeof(tag));
  if (loop_attach(file, i.readonly, tag, i.device, sizeof(i.device)) < 0) {
    i.device[0] = 0;
    goto fail;
  }
  if (attach_state_write(p.state, &i) < 0)
    goto fail;
  if (want_mp[0]) {
    if (o->fstype)
      snprintf(i.fstype, sizeof(i.fstype), "%s", o->fstype);
    else if (ploop_fs_probe(i.device, i.fstype, sizeof(i.fstype)) < 0)
      goto fail;
    if (fs_mount(i.device, want_mp, i.fstype, i.readonly, o->mount_flags, o->mount_data) < 0)
      goto fail;
    snprintf(i.mount_point, sizeof(i.mount_point), "%s", want_mp);
    if (attach_state_write(p.state, &i) < 0)
      goto fail;
  }
  rc = 0;
  i.daemon_alive = true;
  if (out)
    *out = i;
  attach_unlock(lock);
  return rc;

fail: {
  /* Keep the first error: teardown may set its own. */
  char msg[1024];
  int status = ploop_get_status(), err = ploop_get_errno();
  snprintf(msg, sizeof(msg), "%s", ploop_get_error());
  teardown(&i, &p);
  rmdir(p.fuse_dir);
  ploop_set_error(status, err, "%s", msg);
}
  attach_unlock(lock);
  return rc;
}

int ploop_attach_umount(const char *what)
{
  if (!what)
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "umount: nothing given");
  int lock = attach_lock();
  if (lock < 0)
    return -1;
  struct ploop_attach_info i;
  if (attach_state_find(what, &i) < 0) {
    attach_unlock(lock);
    return -1;
  }
  struct paths p;
  make_paths(i.disk_dir, i.snapshot_guid, &p);
  int rc = teardown(&i, &p);
  if (rc < 0 && access(p.state, F_OK) == 0)
    attach_state_write(p.state, &i); /* what is left, for the next try */
  attach_unlock(lock);
  return rc;
}

int ploop_attach_mount_fs(const char *what, const struct ploop_attach_opts *o)
{
  if (!what || !o || !o->mount_point)
    return ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "mount: no attachment or mount point given");
  char mp[PATH_MAX];
  struct stat st;
  if (!realpath(o->mount_point, mp) || stat(mp, &st) < 0)
    return ploop_set_error(PLOOP_ERR_NOTFOUND, errno, "mount point %s: %s", o->mount_point, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return ploop_set_error(PLOOP_ERR_PARAM, ENOTDIR, "mount point %s is not a directory", o->mount_point);
  int lock = attach_lock();
  if (lock < 0)
    return -1;
  struct ploop_attach_info i;
  int rc = -1;
  if (attach_state_find(what, &i) < 0)
    goto out;
  if (!i.daemon_alive) {
    ploop_set_error(PLOOP_ERR_GENERIC, EIO, "%s: its ploop-nbd died; run `ploop umount %s`", i.disk_dir,
                    i.disk_dir);
    goto out;
  }
  if (i.mount_point[0]) {
    ploop_set_error(PLOOP_ERR_BUSY, EBUSY, "%s is mounted on %s already", i.device, i.mount_point);
    goto out;
  }
  if (o->fstype)
    snprintf(i.fstype, sizeof(i.fstype), "%s", o->fstype);
  else if (ploop_fs_probe(i.device, i.fstype, sizeof(i.fstype)) < 0)
    goto out;
  /* The mount point is recorded before the mount (the state is on tmpfs:
   * no cost): a caller killed right after the mount leaves a state that
   * `umount` finds by it, and teardown skips a recorded mount that is not
   * there. */
  snprintf(i.mount_point, sizeof(i.mount_point), "%s", mp);
  struct paths p;
  make_paths(i.disk_dir, i.snapshot_guid, &p);
  if (attach_state_write(p.state, &i) < 0)
    goto out;
  if (fs_mount(i.device, mp, i.fstype, i.readonly || o->readonly, o->mount_flags, o->mount_data) < 0) {
    i.mount_point[0] = 0;
    attach_state_write(p.state, &i);
    goto out;
  }
  rc = 0;
out:
  attach_unlock(lock);
  return rc;
}

int ploop_attach_format(const char *disk_dir, const char *fstype)
{
  return ploop_attach_format_opts(disk_dir, fstype, NULL);
}

int ploop_attach_format_opts(const char *disk_dir, const char *fstype, const struct ploop_fs_opts *o)
{
  struct ploop_attach_info i;
  if (ploop_attach_mount(disk_dir, NULL, &i) < 0)
    return -1;
  struct ploop_fs_opts fo = {0};
  if (o)
    fo = *o;
  fo.prezeroed = true;
  int rc = ploop_fs_make_opts(i.device, fstype, &fo);
  char msg[1024];
  int status = ploop_get_status(), err = ploop_get_errno();
  snprintf(msg, sizeof(msg), "%s", ploop_get_error());
  if (ploop_attach_umount(i.disk_dir) < 0)
    return -1;
  if (rc < 0)
    return ploop_set_error(status, err, "%s", msg);
  return 0;
}

