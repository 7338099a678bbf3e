/* Container launch (see launch.h): parent side writes cgroups and id maps,
 * child side sets up namespaces, rootfs, console and privileges. */
#include "launch.h"
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "error.h"
#include "rootfs.h"
#include "util.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

int ct_loopback_up(void)
{
  cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return ct_fail(errno, "socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
    return ct_fail(errno, "get flags of lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
    return ct_fail(errno, "bring lo up");
  return 0;
}

/* --read-only: the root mount read-only, a tmpfs on /tmp (as podman's
 * --read-only-tmpfs) so programs still find a scratch directory. The flags
 * the mount already has (nodev, nosuid) stay: a user namespace must keep them. */
static int readonly_root(void)
{
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k") < 0)
    return ct_fail(errno, "mount tmpfs on /tmp");
  struct statvfs sv;
  if (statvfs("/", &sv) < 0)
    return ct_fail(errno, "statvfs /");
  unsigned long keep = (sv.f_flag & ST_NODEV ? MS_NODEV : 0) | (sv.f_flag & ST_NOSUID ? MS_NOSUID : 0) |
                       (sv.f_flag & ST_NOEXEC ? MS_NOEXEC : 0) | (sv.f_flag & ST_NOATIME ? MS_NOATIME : 0);
  if (mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | keep, NULL) < 0)
    return ct_fail(errno, "remount / read-only");
  return 0;
}

static int send_fd(int sock, char tag, int fd)
{
  struct iovec iov = {&tag, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0)
    return ct_fail(errno, "send to the %s", tag == 'P' ? "monitor" : "container");
  return 0;
}

/* The pty lives in the container's own devpts, so `tty` inside names it. */
static int setup_console(int sock)
{
  cleanup_close int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0)
    return ct_fail(errno, "open /dev/ptmx");
  char name[64];
  if (unlockpt(master) < 0 || ptsname_r(master, name, sizeof name) != 0)
    return ct_fail(errno, "unlock pty");
  int slave = open(name, O_RDWR | O_NOCTTY);
  if (slave < 0)
    return ct_fail(errno, "open %s", name);
  for (int fd = 0; fd < 3; fd++)
    if (dup2(slave, fd) < 0)
      return ct_fail(errno, "dup2 pty");
  if (slave > 2)
    close(slave);
  if (ioctl(0, TIOCSCTTY, 0) < 0)
    return ct_fail(errno, "set controlling terminal");
  return send_fd(sock, 'P', master);
}

static void child_fail_tag(int sock, char tag)
{
  char msg[1100];
  int n = snprintf(msg, sizeof msg, "%c%s", tag, ct_error());
  if (send(sock, msg, (size_t)n, MSG_NOSIGNAL) < 0) {
    /* nothing left to report through */
  }
  _exit(127);
}

static void child_fail(int sock) { child_fail_tag(sock, 'E'); }
static void report_exec_failure(int sock) { child_fail_tag(sock, 'X'); }

/* The parent's "go"; with FD, also the id-mapped rootfs it mounted for us. */
static int recv_go(int sock, int *fd)
{
  char tag;
  struct iovec iov = {&tag, 1};
  union {
    struct cmsghdr h;
    char c[CMSG_SPACE(sizeof(int))];
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
                       .msg_controllen = sizeof u.c};
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1 || tag != 'g')
    return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (fd && c && c->cmsg_type == SCM_RIGHTS)
    memcpy(fd, CMSG_DATA(c), sizeof(int));
  return 0;
}

/* The child's clones of the --volume trees, between open and attach. */
static int volume_fds[CT_MAX_VOLUMES];

/* Everything that makes the container's view of the system: mounts, pivot,
 * hostname, loopback. Needs no cgroup, so without a user namespace it runs
 * while the parent is still writing our cgroups (that write can wait for an
 * RCU grace period). */
static void enter_system_view(const struct ct_launch *l, int sock)
{
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
    ct_fail(errno, "make / private");
    child_fail(sock);
  }
  /* With a user namespace the parent puts an id-mapped rootfs on top of
   * ours (it needs host privileges for that); our mounts are private now,
   * so it cannot leak to the host. */
  int rootfd = -1;
  if (l->userns && (write(sock, "R", 1) != 1 || recv_go(sock, &rootfd) < 0 || rootfd < 0))
    _exit(127);
  if (rootfs_enter(l->rootfs, rootfd, l->userns, l->net != CT_NET_HOST) < 0)
    child_fail(sock);
  if (l->vol && ct_volumes_attach(l->vol, volume_fds) < 0)
    child_fail(sock);
  if (sethostname(l->hostname, strlen(l->hostname)) < 0) {
    ct_fail(errno, "sethostname %s", l->hostname);
    child_fail(sock);
  }
  if (l->net != CT_NET_HOST && ct_loopback_up() < 0)
    child_fail(sock);
}

static void child_main(const struct ct_launch *l, int sock)
{
  /* Host paths are still ours to read (in a new user namespace too: no id
   * change yet), and nothing is private yet. */
  if (l->vol && ct_volumes_open(l->vol, volume_fds) < 0)
    child_fail(sock);
  if (!l->userns)
    enter_system_view(l, sock);
  if (recv_go(sock, NULL) < 0)
    _exit(127);  /* parent gave up */
  if (l->userns && (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)) {
    ct_fail(errno, "become root in the user namespace");
    child_fail(sock);
  }
  /* Only now, inside its cgroup, so the namespace's root is that cgroup. */
  if (unshare(CLONE_NEWCGROUP) < 0) {
    ct_fail(errno, "unshare cgroup namespace");
    child_fail(sock);
  }
  if (setsid() < 0) {
    ct_fail(errno, "setsid");
    child_fail(sock);
  }
  /* In a user namespace nothing can be mounted before the id maps exist. */
  if (l->userns)
    enter_system_view(l, sock);
  if (l->tty && setup_console(sock) < 0)
    child_fail(sock);
  /* Nothing of the monitor's may leak in; the sync socket goes at exec. */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    ct_fail(errno, "close_range");
    child_fail(sock);
  }
  if (l->sec.readonly && readonly_root() < 0)
    child_fail(sock);
  if (ct_drop_privileges(&l->sec) < 0)
    child_fail(sock);
  const char *term = getenv("TERM");
  char *termv = term && l->tty ? xasprintf("TERM=%s", term) : NULL;
  char *hostv = xasprintf("HOSTNAME=%s", l->hostname);
  char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "HOME=/root", "container=ploop-container", hostv, termv, NULL};
  environ = envp;
  if (l->init)
    ct_init_run(l->argv, sock, report_exec_failure);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(l->argv[0], l->argv);
  ct_fail(errno, "exec %s", l->argv[0]);
  child_fail_tag(sock, 'X');
}

/* Mounts, inside the child's (already private) mount namespace, a copy of
 * the rootfs that shows host uid/gid N as container N: files stay owned by 0
 * on disk yet belong to the container's root. Needs host privileges over
 * the filesystem, so the parent does it. */
static int mount_idmapped_rootfs(const char *rootfs, pid_t pid, int sock)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
  cleanup_close int userns = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
  cleanup_close int theirs = open(path, O_RDONLY | O_CLOEXEC);
  cleanup_close int ours = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (userns < 0 || theirs < 0 || ours < 0)
    return ct_fail(errno, "open namespaces of %d", (int)pid);
  cleanup_close int fd = open_tree(AT_FDCWD, rootfs, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "clone the mount of %s", rootfs);
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns};
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
    return ct_fail(errno, "id-map the mount of %s", rootfs);
  if (setns(theirs, CLONE_NEWNS) < 0)
    return ct_fail(errno, "enter the container's mount namespace");
  int rc = move_mount(fd, "", AT_FDCWD, rootfs, MOVE_MOUNT_F_EMPTY_PATH);
  int saved = errno;
  if (setns(ours, CLONE_NEWNS) < 0)
    abort();  /* stuck in the container's namespace: nothing safe to do */
  if (rc < 0)
    return ct_fail(saved, "attach the id-mapped rootfs");
  /* The tree's fd now names the attached mount's root: the child cannot walk
   * the host path to it (our state dirs are 0700 to host root), so it gets
   * the directory itself. */
  return send_fd(sock, 'g', fd);
}

static int write_id_maps(pid_t pid)
{
  char path[64], map[64];
  snprintf(map, sizeof map, "0 %u %u\n", CT_USERNS_HOST_BASE, CT_USERNS_SIZE);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
  if (write_file(path, map) < 0)
    return -1;
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  return write_file(path, map);
}

/* Reads the child's messages until exec closes the socket. */
static int wait_child_ready(int sock, const struct ct_launch *l, struct ct_process *p)
{
  for (;;) {
    char buf[1200];
    struct iovec iov = {buf, sizeof buf - 1};
    union {
      struct cmsghdr h;
      char c[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
                         .msg_controllen = sizeof u.c};
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ct_fail(errno, "read from the container");
    if (n == 0)
      return 0;  /* exec happened */
    buf[n] = 0;
    if (buf[0] == 'R') {
      if (mount_idmapped_rootfs(l->rootfs, p->pid, sock) < 0)
        return -1;
      continue;
    }
    if (buf[0] == 'E' || buf[0] == 'X') {
      p->exec_failed = buf[0] == 'X';
      return ct_fail(0, "%s", buf + 1);
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (buf[0] == 'P' && c && c->cmsg_type == SCM_RIGHTS)
      memcpy(&p->pty_master, CMSG_DATA(c), sizeof(int));
  }
}

int ct_launch(const struct ct_launch *l, struct ct_process *p)
{
  p->pid = -1;
  p->pty_master = -1;
  p->exec_failed = false;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return ct_fail(errno, "socketpair");
  unsigned long flags = SIGCHLD | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;
  if (l->net != CT_NET_HOST)
    flags |= CLONE_NEWNET;
  if (l->userns)
    flags |= CLONE_NEWUSER;
  /* Raw clone with no stack behaves like fork: we are single-threaded. */
  pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
  if (pid < 0) {
    int saved = errno;
    close(sv[0]);
    close(sv[1]);
    return ct_fail(saved, "clone new namespaces");
  }
  if (pid == 0) {
    close(sv[0]);
    child_main(l, sv[1]);
  }
  close(sv[1]);
  cleanup_close int sock = sv[0];
  p->pid = pid;
  if (cg_attach(l->cg, pid) < 0 || (l->userns && write_id_maps(pid) < 0))
    goto fail;
  if (l->net == CT_NET_VETH && ct_net_setup(l->netcfg, pid) < 0)
    goto fail;
  /* EPIPE: the child already failed its setup; its message is waiting. */
  if (send(sock, "g", 1, MSG_NOSIGNAL) != 1 && errno != EPIPE) {
    ct_fail(errno, "start the container");
    goto fail;
  }
  if (wait_child_ready(sock, l, p) < 0)
    goto fail;
  return 0;
fail:
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  if (p->pty_master >= 0)
    close(p->pty_master);
  p->pty_master = -1;
  p->pid = -1;
  return -1;
}
