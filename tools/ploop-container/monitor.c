/* Signal forwarding and pty relay (see monitor.h); crun's wait_for_process
 * in miniature: signalfd + epoll. */
#include "monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "util.h"

void monitor_signals(sigset_t *set)
{
  static const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                             SIGUSR2, SIGWINCH, SIGCONT, SIGALRM, SIGPIPE};
  sigemptyset(set);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaddset(set, sigs[i]);
}

static void copy_winsize(int from, int to)
{
  struct winsize ws;
  if (ioctl(from, TIOCGWINSZ, &ws) == 0)
    ioctl(to, TIOCSWINSZ, &ws);
}

static int write_all(int fd, const char *buf, size_t len)
{
  while (len) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Returns false when the master is done (EOF/EIO: the last slave closed). */
static bool relay(int from, int to)
{
  char buf[16384];
  ssize_t n = read(from, buf, sizeof buf);
  if (n <= 0)
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  write_all(to, buf, (size_t)n);
  return true;
}

static int status_of(int st)
{
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  if (WIFSIGNALED(st))
    return 128 + WTERMSIG(st);
  return 255;
}

int monitor_wait(pid_t pid, int master)
{
  sigset_t set;
  monitor_signals(&set);
  cleanup_close int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  cleanup_close int ep = epoll_create1(EPOLL_CLOEXEC);
  struct termios saved;
  bool raw = false, stdin_open = master >= 0;
  if (sfd < 0 || ep < 0) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return status_of(st);
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = sfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
  if (master >= 0) {
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    ev.data.fd = master;
    epoll_ctl(ep, EPOLL_CTL_ADD, master, &ev);
    ev.data.fd = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev) < 0)
      stdin_open = false;  /* e.g. /dev/null cannot be polled */
    if (isatty(0) && tcgetattr(0, &saved) == 0) {
      struct termios t = saved;
      cfmakeraw(&t);
      raw = tcsetattr(0, TCSANOW, &t) == 0;
      copy_winsize(0, master);
    }
  }
  int status = -1;
  while (status < 0) {
    struct epoll_event evs[4];
    int n = epoll_wait(ep, evs, 4, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == sfd) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si) {
          if (si.ssi_signo == SIGCHLD) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid)
              status = status_of(st);
          } else if (si.ssi_signo == SIGWINCH && master >= 0) {
            copy_winsize(0, master);
          } else if (si.ssi_signo != SIGPIPE) {
            kill(pid, (int)si.ssi_signo);
          }
        }
      } else if (fd == master) {
        if (!relay(master, 1)) {
          epoll_ctl(ep, EPOLL_CTL_DEL, master, NULL);
        }
      } else if (fd == 0 && stdin_open) {
        if (!relay(0, master)) {
          epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);
          stdin_open = false;
        }
      }
    }
  }
  if (master >= 0) {  /* what PID 1 wrote just before exiting */
    char buf[16384];
    ssize_t got;
    while ((got = read(master, buf, sizeof buf)) > 0)
      write_all(1, buf, (size_t)got);
  }
  if (raw)
    tcsetattr(0, TCSANOW, &saved);
  return status < 0 ? 255 : status;
}

pid_t monitor_fork(const char *name, int lock, bool close_others, int *report_in, int *report)
{
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return ct_fail(errno, "pipe");
  cleanup_free char *log = ct_path(name, "console.log");
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pfd[0]);
    close(pfd[1]);
    return ct_fail(e, "fork");
  }
  if (pid == 0) {
    close(pfd[0]);
    setsid();
    int in = open("/dev/null", O_RDONLY);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
      _exit(1);
    close(in);
    close(out);
    if (close_others)
      for (int fd = 3; fd < 1024; fd++)
        if (fd != lock && fd != pfd[1])
          close(fd);
    *report = pfd[1];
    return 0;
  }
  close(pfd[1]);
  *report_in = pfd[0];
  return pid;
}

int monitor_started(const char *name, int fd)
{
  char msg[1200];
  ssize_t n;
  while ((n = read(fd, msg, sizeof msg - 1)) < 0 && errno == EINTR) {
  }
  close(fd);
  if (n <= 0) {
    cleanup_free char *log = ct_path(name, "console.log");
    return ct_fail(0, "start %s: the monitor died before the container started (see %s)", name, log);
  }
  msg[n] = 0;
  if (msg[0] == 'E')
    return ct_fail(0, "%s", msg + 1);
  return 0;
}
