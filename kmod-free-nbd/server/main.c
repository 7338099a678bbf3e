/* ploop-nbd: serves ploop disks over NBD (unix socket, TCP, stdin/stdout or
 * systemd socket activation), with a control socket per disk for online
 * snapshot/merge/resize and an optional FUSE export of the live disk. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "../fuse/fuse-export.h"
#include "server.h"
#include "ploop-tls.h"

/* fuse/ is written separately; until it links in, --fuse reports that. */
#pragma weak ploop_fuse_export_start
#pragma weak ploop_fuse_export_stop

struct server_config g_cfg = {.max_workers = 16, .fuse_name = "disk"};
atomic_bool g_stopping;

#define MAX_LISTEN 16
#define MAX_CONNECTIONS 256u
static int listen_fds[MAX_LISTEN];
static size_t nlisten;
static int done_fd = -1; /* eventfd: the stdio client has left */
static int status_fd = -1; /* daemon mode: tells the waiting parent how startup went */

void nbd_log(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ploop-nbd: %s\n", buf);
}

void nbd_debug(const char *fmt, ...) {
  if (!g_cfg.verbose) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ploop-nbd: debug: %s\n", buf);
}

/* A startup error: one line on stderr (or to the waiting parent), exit 1. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (status_fd >= 0) {
    if (write(status_fd, buf, strlen(buf)) < 0) {
    }
  } else {
    fprintf(stderr, "ploop-nbd: %s\n", buf);
  }
  exit(1);
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: ploop-nbd [OPTIONS] [NAME=]DIR...\n"
          "Serves ploop disks (directories with DiskDescriptor.xml) over NBD.\n"
          "Exports: NAME (default: basename of DIR; \"\" = the first disk) read-write,\n"
          "and NAME@UUID read-only for every snapshot.\n\n"
          "  -U, --unix PATH         listen on a unix socket\n"
          "  -p, --port PORT         listen on TCP PORT\n"
          "  -b, --bind ADDR         TCP address to bind (default: loopback)\n"
          "  -s, --stdio             serve one client on stdin/stdout\n"
          "                          (LISTEN_FDS socket activation is used when set)\n"
          "  -d, --daemon            run in the background once serving\n"
          "  -P, --pid-file FILE     write the server's pid to FILE\n"
          "      --ready-fd FD       as -d without forking, for a caller that forked:\n"
          "                          \"ok\" or the startup error on FD, then close it\n"
          "  -t, --threads N         request threads per connection (default 16)\n"
          "      --max-inflight-bytes SIZE  payload memory of one connection's requests\n"
          "                          (default 64M); past it, its requests wait unread\n"
          "      --max-total-bytes SIZE     the same for all connections (default 512M)\n"
          "      --idle-timeout SECONDS     disconnect a client that sends no request (or\n"
          "                          takes no reply data) for that long (default: never)\n"
          "      --tls=off|on|require  TLS (STARTTLS): off (default); on: the client\n"
          "                          chooses; require: nothing but STARTTLS before TLS\n"
          "      --tls-psk FILE      pre-shared keys, psktool's IDENTITY:HEXKEY lines\n"
          "      --tls-certificates DIR  X.509: ca-cert.pem, server-cert.pem, server-key.pem\n"
          "      --tls-verify-peer   require a client certificate signed by ca-cert.pem\n"
          "  -r, --readonly          serve every disk read-only (no control socket)\n"
          "      --snapshot GUID     serve that snapshot of the disk read-only (implies -r)\n"
          "      --standby           start with the disk released (another host holds it):\n"
          "                          I/O fails until the control command ACQUIRE\n"
          "      --fuse MOUNTPOINT   also export the first disk as a file via FUSE\n"
          "      --fuse-name FILE    name of that file (default: disk)\n"
          "      --ctl-path          print the control socket path of DIR and exit\n"
          "      --ctl DIR CMD...    send one control command (SNAPSHOT, MERGE, RESIZE,\n"
          "                          INFO, DIRTY ...) to the server of DIR, print the reply\n"
          "  -v, --verbose           log every connection and rejected request\n"
          "  -h, --help              this text\n"
          "  -V, --version           print the version\n");
}

/* NAME=DIR or DIR: the realpath of the disk directory and its export name. */
static void add_disk(const char *arg) {
  /* rbd:POOL/NAME[?conf=PATH] is a disk in Ceph (its '=' is no NAME=). */
  const char *eq = strncmp(arg, "rbd:", 4) ? strchr(arg, '=') : NULL;
  const char *path = eq ? eq + 1 : arg;
  char real[PATH_MAX];
  bool in_ceph = !strncmp(path, "rbd:", 4);
  if (in_ceph) {
    if (strlen(path) >= sizeof real) die("%s: name too long", path);
    snprintf(real, sizeof real, "%s", path);
  } else if (!realpath(path, real)) {
    die("%s: %s", path, strerror(errno));
  }
  struct stat st;
  if (!in_ceph && stat(real, &st) == 0 && S_ISREG(st.st_mode)) {
    char *slash = strrchr(real, '/');
    if (slash && slash != real) *slash = 0;
  }
  char name[256];
  if (eq) {
    if (eq == arg || (size_t)(eq - arg) >= sizeof name) die("%s: bad export name", arg);
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
  } else {
    const char *base = strrchr(real, '/');
    base = base && base[1] ? base + 1 : real;
    size_t bl = in_ceph ? strcspn(base, "?") : strlen(base);
    if (bl >= sizeof name) die("%s: directory name too long for an export name", real);
    memcpy(name, base, bl);
    name[bl] = 0;
  }
  if (strchr(name, '@')) die("export name '%s' must not contain '@'", name);
  for (size_t i = 0; i < g_cfg.ndisks; i++) {
    if (strcmp(g_cfg.disks[i].name, name) == 0) die("two disks named '%s'; use NAME=DIR", name);
    if (strcmp(g_cfg.disks[i].dir, real) == 0) die("%s given twice", real);
  }
  struct disk_export *d = realloc(g_cfg.disks, (g_cfg.ndisks + 1) * sizeof *d);
  if (!d) die("out of memory");
  g_cfg.disks = d;
  memset(&d[g_cfg.ndisks], 0, sizeof *d);
  d[g_cfg.ndisks].name = strdup(name);
  d[g_cfg.ndisks].dir = strdup(real);
  g_cfg.ndisks++;
}

static void listen_unix(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) die("%s: socket path too long", path);
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket: %s", strerror(errno));
  /* Replace a stale socket, never a live one. */
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) die("%s: already in use", path);
  close(fd);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0)
    die("%s: %s", path, strerror(errno));
  listen_fds[nlisten++] = fd;
}

static void listen_tcp(const char *addr, const char *port) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai;
  int r = getaddrinfo(addr ? addr : "localhost", port, &hints, &ai);
  if (r != 0) die("%s:%s: %s", addr ? addr : "localhost", port, gai_strerror(r));
  for (struct addrinfo *a = ai; a && nlisten < MAX_LISTEN; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 128) < 0) {
      int e = errno;
      close(fd);
      if (e == EADDRNOTAVAIL || e == EAFNOSUPPORT) continue; /* e.g. no IPv6 */
      freeaddrinfo(ai);
      die("bind port %s: %s", port, strerror(e));
    }
    listen_fds[nlisten++] = fd;
  }
  freeaddrinfo(ai);
  if (nlisten == 0) die("could not listen on port %s", port);
}

/* A disk served in the clear to a network beyond this host can be read and
 * written by anyone on the path: say so, once. */
static void warn_if_exposed(void) {
  if (g_cfg.tls != TLS_OFF) return;
  for (size_t i = 0; i < nlisten; i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(listen_fds[i], (struct sockaddr *)&ss, &len) < 0) continue;
    bool exposed = false;
    char host[INET6_ADDRSTRLEN] = "?", port[16] = "?";
    if (ss.ss_family == AF_INET) {
      const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
      exposed = (ntohl(a->sin_addr.s_addr) >> 24) != 127;
    } else if (ss.ss_family == AF_INET6) {
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
      exposed = !IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) &&
                !(IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
    }
    if (!exposed) continue;
    getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    nbd_log("warning: serving %s port %s without TLS: anyone on the network can read and write "
            "the disks (use --tls=require)", host, port);
    return;
  }
}

/* systemd socket activation: fds 3.. when LISTEN_PID is us. */
static bool socket_activation(void) {
  const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
  if (!pid || !fds || atol(pid) != (long)getpid()) return false;
  long n = atol(fds);
  if (n < 1 || n > MAX_LISTEN) die("LISTEN_FDS=%s: expected 1..%d", fds, MAX_LISTEN);
  for (long i = 0; i < n; i++) {
    int fd = 3 + (int)i;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    listen_fds[nlisten++] = fd;
  }
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  return true;
}

static void *stdio_thread(void *arg) {
  (void)arg;
  conn_serve(0, 1);
  uint64_t one = 1;
  if (write(done_fd, &one, sizeof one) < 0) {
  }
  return NULL;
}

/* Forks; the parent waits until the child serves (exit 0) or reports why
 * it could not (its message, exit 1).  Open files and locks stay with the
 * child, which opens the disks after the fork. */
static void daemonize(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) die("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid > 0) {
    close(p[1]);
    char msg[1024];
    ssize_t n, total = 0;
    while ((n = read(p[0], msg + total, sizeof msg - 1 - (size_t)total)) > 0) total += n;
    msg[total] = 0;
    if (total == 0) die("server exited during startup");
    if (strcmp(msg, "ok") == 0) exit(0);
    fprintf(stderr, "ploop-nbd: %s\n", msg);
    exit(1);
  }
  close(p[0]);
  status_fd = p[1];
  setsid();
  /* Startup errors travel through the status pipe: let go of the caller's
   * stdin/stdout now, and of a piped stderr, so a caller reading them to
   * the end (`out=$(ploop-nbd -d ...)`) is never held open by the daemon,
   * even if startup stalls after the parent gave up waiting. */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    struct stat st;
    dup2(null, 0);
    dup2(null, 1);
    if (fstat(2, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
      dup2(null, 2);
    close(null);
  }
}

/* --ctl DIR CMD...: a client of the control socket for scripts and tests;
 * DIRTY GET prints the bitmap as the indexes of dirty clusters. */
static int control_command(int argc, char **argv) {
  if (argc < 2) die("--ctl needs a disk directory and a command");
  char line[PLOOP_CTL_MAX_LINE + 1] = "";
  size_t len = 0;
  for (int i = 1; i < argc; i++) {
    int n = snprintf(line + len, sizeof line - len, "%s%s", i > 1 ? " " : "", argv[i]);
    if (n < 0 || (size_t)n >= sizeof line - len) die("control command too long");
    len += (size_t)n;
  }
  if (strncmp(line, "DIRTY GET", 9) == 0) {
    uint8_t *bm;
    size_t bytes;
    uint64_t cluster;
    if (ploop_ctl_dirty_get(argv[0], strstr(line, "CLEAR") != NULL, &bm, &bytes, &cluster) < 0)
      die("%s", ploop_ctl_error());
    printf("cluster_size %llu\n", (unsigned long long)cluster);
    for (size_t i = 0; i < bytes * 8; i++)
      if (bm[i / 8] & (1u << (i % 8))) printf("%zu\n", i);
    free(bm);
    return 0;
  }
  static char reply[1 << 20];
  if (ploop_ctl_command(argv[0], line, reply, sizeof reply) < 0) die("%s", ploop_ctl_error());
  if (reply[0]) printf("%s\n", reply);
  return 0;
}

static void noop_handler(int sig) { (void)sig; }

int main(int argc, char **argv) {
  enum {
    OPT_FUSE = 256, OPT_FUSE_NAME, OPT_CTL_PATH, OPT_CTL, OPT_SNAPSHOT, OPT_MAX_INFLIGHT,
    OPT_MAX_TOTAL, OPT_IDLE_TIMEOUT, OPT_TLS, OPT_TLS_PSK, OPT_TLS_CERTS, OPT_TLS_VERIFY, OPT_READY_FD, OPT_STANDBY
  };
  static const struct option opts[] = {
      {"unix", required_argument, NULL, 'U'},   {"port", required_argument, NULL, 'p'},
      {"bind", required_argument, NULL, 'b'},   {"stdio", no_argument, NULL, 's'},
      {"daemon", no_argument, NULL, 'd'},       {"pid-file", required_argument, NULL, 'P'},
      {"threads", required_argument, NULL, 't'}, {"fuse", required_argument, NULL, OPT_FUSE},
      {"fuse-name", required_argument, NULL, OPT_FUSE_NAME},
      {"readonly", no_argument, NULL, 'r'},     {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
      {"ctl-path", no_argument, NULL, OPT_CTL_PATH}, {"ctl", no_argument, NULL, OPT_CTL}, {"verbose", no_argument, NULL, 'v'},
      {"max-inflight-bytes", required_argument, NULL, OPT_MAX_INFLIGHT},
      {"max-total-bytes", required_argument, NULL, OPT_MAX_TOTAL},
      {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
      {"tls", required_argument, NULL, OPT_TLS},
      {"tls-psk", required_argument, NULL, OPT_TLS_PSK},
      {"tls-certificates", required_argument, NULL, OPT_TLS_CERTS},
      {"tls-verify-peer", no_argument, NULL, OPT_TLS_VERIFY},
      {"standby", no_argument, NULL, OPT_STANDBY},
      {"ready-fd", required_argument, NULL, OPT_READY_FD},
      {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  const char *unix_path = NULL, *port = NULL, *bind_addr = NULL, *pid_file = NULL;
  bool use_stdio = false, daemon_mode = false, ctl_path = false, ctl = false;
  uint64_t max_inflight = BUDGET_DEFAULT_PER_CONN, max_total = BUDGET_DEFAULT_TOTAL;
  struct ploop_tls_opts tls = {0};
  bool tls_given = false;
  int ch;
  opterr = 0; /* one line of our own instead of getopt's */
  bool ready_fd_given = false;
  while ((ch = getopt_long(argc, argv, "U:p:b:sdP:t:rvhV", opts, NULL)) != -1) {
    switch (ch) {
    case 'U': unix_path = optarg; break;
    case 'p': port = optarg; break;
    case 'b': bind_addr = optarg; break;
    case 's': use_stdio = true; break;
    case 'd': daemon_mode = true; break;
    case 'P': pid_file = optarg; break;
    case OPT_READY_FD: {
      /* -d without its fork, for a caller that runs the server as a child
       * of its own: "ok" or the startup error on FD, then it is closed. */
      char *end;
      long n = strtol(optarg, &end, 10);
      if (*end || n < 3 || n > 1024 || fcntl((int)n, F_SETFD, FD_CLOEXEC) < 0)
        die("--ready-fd: expected an open descriptor above 2, got '%s'", optarg);
      status_fd = (int)n;
      ready_fd_given = true;
      break;
    }
    case 't': {
      char *end;
      long n = strtol(optarg, &end, 10);
      if (*end || n < 1 || n > 64) die("--threads: expected 1..64, got '%s'", optarg);
      g_cfg.max_workers = (unsigned)n;
      break;
    }
    case OPT_FUSE: {
      static char mnt[PATH_MAX];
      if (!realpath(optarg, mnt)) die("--fuse %s: %s", optarg, strerror(errno));
      g_cfg.fuse_mountpoint = mnt;
      break;
    }
    case OPT_FUSE_NAME: g_cfg.fuse_name = optarg; break;
    case OPT_CTL_PATH: ctl_path = true; break;
    case OPT_CTL: ctl = true; break;
    case 'r': g_cfg.readonly = true; break;
    case OPT_STANDBY: g_cfg.standby = true; break;
    case OPT_SNAPSHOT: {
      static char guid[PLOOP_UUID_LEN + 1];
      if (ploop_uuid_normalize(optarg, guid) < 0) die("--snapshot %s: not a UUID", optarg);
      g_cfg.snapshot = guid;
      g_cfg.readonly = true;
      break;
    }
    case OPT_MAX_INFLIGHT:
      if (ploop_parse_size(optarg, &max_inflight) < 0 || max_inflight == 0)
        die("--max-inflight-bytes: expected a size such as 64M, got '%s'", optarg);
      break;
    case OPT_MAX_TOTAL:
      /* At least one largest request must fit, or it would wait forever. */
      if (ploop_parse_size(optarg, &max_total) < 0 || max_total < NBD_MAX_PAYLOAD)
        die("--max-total-bytes: expected a size of at least %uM, got '%s'",
            NBD_MAX_PAYLOAD >> 20, optarg);
      break;
    case OPT_IDLE_TIMEOUT: {
      char *end;
      errno = 0;
      long n = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || n < 0 || n > 86400 * 365)
        die("--idle-timeout: expected seconds (0 = never), got '%s'", optarg);
      g_cfg.idle_timeout = (unsigned)n;
      break;
    }
    case OPT_TLS:
      tls_given = true;
      if (strcmp(optarg, "off") == 0) g_cfg.tls = TLS_OFF;
      else if (strcmp(optarg, "on") == 0) g_cfg.tls = TLS_ON;
      else if (strcmp(optarg, "require") == 0) g_cfg.tls = TLS_REQUIRE;
      else die("--tls: expected off, on or require, got '%s'", optarg);
      break;
    case OPT_TLS_PSK: tls.psk_file = optarg; break;
    case OPT_TLS_CERTS: tls.cert_dir = optarg; break;
    case OPT_TLS_VERIFY: tls.verify_peer = true; break;
    case 'v': g_cfg.verbose = true; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("ploop-nbd %s\n", PLOOP_VERSION_STRING); return 0;
    default:
      fprintf(stderr, "ploop-nbd: bad option or missing argument: '%s' (see --help)\n",
              argv[optind - 1]);
      return 2;
    }
  }
  if (ctl_path) {
    if (optind >= argc) die("--ctl-path needs a disk directory");
    for (int i = optind; i < argc; i++) {
      char path[PATH_MAX];
      if (ploop_ctl_socket_path(argv[i], path, sizeof path) < 0) die("%s", ploop_ctl_error());
      printf("%s\n", path);
    }
    return 0;
  }
  if (ctl) return control_command(argc - optind, argv + optind);
  if (optind >= argc) die("no disk given (usage: ploop-nbd [OPTIONS] [NAME=]DIR...)");
  for (int i = optind; i < argc; i++) add_disk(argv[i]);
  if (bind_addr && !port) die("--bind needs --port");
  budget_configure(max_inflight, max_total);
  if (g_cfg.standby && (g_cfg.readonly || g_cfg.ndisks > 1)) die("--standby serves one disk read-write");
  if (g_cfg.snapshot && g_cfg.ndisks > 1) die("--snapshot serves one disk; %zu given", g_cfg.ndisks);
  if (g_cfg.fuse_name && (strchr(g_cfg.fuse_name, '/') || !*g_cfg.fuse_name))
    die("--fuse-name must be a plain file name");
  bool activated = socket_activation();
  int modes = (unix_path != NULL) + (port != NULL) + (use_stdio && !activated);
  if (!activated && modes == 0) die("say where to listen: -U PATH, -p PORT or -s");
  if (modes > 1 || (activated && (unix_path || port)))
    die("choose one of -U, -p, -s (or socket activation)");
  if ((daemon_mode || ready_fd_given) && use_stdio && !activated) die("-d and -s do not go together");
  if (daemon_mode && ready_fd_given) die("-d and --ready-fd do not go together");
  if (g_cfg.tls != TLS_OFF) {
    if (!tls.psk_file && !tls.cert_dir) die("--tls=%s needs --tls-psk FILE or --tls-certificates DIR",
                                            g_cfg.tls == TLS_ON ? "on" : "require");
    if (tls.verify_peer && tls.psk_file)
      die("--tls-verify-peer checks certificates; a pre-shared key already authenticates the client");
    char terr[1024];
    g_cfg.tls_creds = ploop_tls_creds_new(&tls, true, terr, sizeof terr);
    if (!g_cfg.tls_creds) die("%s", terr);
  } else if (tls.psk_file || tls.cert_dir || tls.verify_peer) {
    die("TLS credentials given%s: add --tls=require (or --tls=on)", tls_given ? " with --tls=off" : "");
  }

  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = noop_handler}; /* no SA_RESTART: interrupts read() */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);

  if (daemon_mode) daemonize();
  /* Blocked before any thread exists, so only signalfd sees them. */
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  int sfd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (sfd < 0) die("signalfd: %s", strerror(errno));

  char err[1024];
  if (exports_open_all(err, sizeof err) < 0) {
    exports_close_all();
    die("%s", err);
  }
  if (activated) {
    /* listen fds already set */
  } else if (unix_path) {
    listen_unix(unix_path);
  } else if (port) {
    listen_tcp(bind_addr, port);
  }
  warn_if_exposed();
  /* FUSE first: a control command (RESIZE) may need it at once. */
  if (g_cfg.fuse_mountpoint) {
    struct disk_export *de = &g_cfg.disks[0];
    if (!ploop_fuse_export_start) {
      snprintf(err, sizeof err, "--fuse: this build has no FUSE export");
    } else {
      de->fuse = ploop_fuse_export_start(de->disk, g_cfg.fuse_mountpoint, g_cfg.fuse_name,
                                         ploop_disk_readonly(de->disk));
      if (!de->fuse) snprintf(err, sizeof err, "--fuse %s: %s", g_cfg.fuse_mountpoint,
                              ploop_get_error());
    }
    if (!de->fuse) {
      exports_close_all();
      die("%s", err);
    }
  }
  /* A read-only server changes nothing; the disk's control socket belongs
   * to the server of its read-write top, if any. */
  for (size_t i = 0; i < g_cfg.ndisks && !g_cfg.readonly; i++) {
    if (control_start(&g_cfg.disks[i], err, sizeof err) < 0) {
      for (size_t k = 0; k < i; k++) control_stop(&g_cfg.disks[k]);
      if (g_cfg.disks[0].fuse) ploop_fuse_export_stop(g_cfg.disks[0].fuse);
      exports_close_all();
      die("%s", err);
    }
    nbd_debug("%s: control socket %s", g_cfg.disks[i].name, g_cfg.disks[i].ctl_path);
  }
  if (pid_file) {
    FILE *f = fopen(pid_file, "w");
    if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
      die("%s: %s", pid_file, strerror(errno));
  }
  if (status_fd >= 0) {
    if (write(status_fd, "ok", 2) < 0) {
    }
    close(status_fd);
    status_fd = -1;
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      /* Logs stay in a file or on a terminal, but a pipe would keep a
       * caller that reads our stderr to its end waiting forever. */
      struct stat st;
      if (fstat(2, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) dup2(null, 2);
      if (null > 2) close(null);
    }
  }

  struct pollfd pfd[MAX_LISTEN + 2];
  size_t np = 0;
  pfd[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
  if (use_stdio && !activated) {
    done_fd = eventfd(0, EFD_CLOEXEC);
    pthread_t t;
    if (done_fd < 0 || pthread_create(&t, NULL, stdio_thread, NULL) != 0)
      die("cannot start the stdio connection");
    pthread_detach(t);
    pfd[np++] = (struct pollfd){.fd = done_fd, .events = POLLIN};
  }
  for (size_t i = 0; i < nlisten; i++) pfd[np++] = (struct pollfd){.fd = listen_fds[i], .events = POLLIN};

  for (bool run = true; run;) {
    if (poll(pfd, np, -1) < 0) {
      if (errno == EINTR) continue;
      nbd_log("poll: %s", strerror(errno));
      break;
    }
    for (size_t i = 0; i < np; i++) {
      if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      if (pfd[i].fd == sfd) {
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof si) > 0) nbd_debug("signal %u: stopping", si.ssi_signo);
        run = false;
      } else if (pfd[i].fd == done_fd) {
        run = false;
      } else {
        int fd = accept4(pfd[i].fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        /* Each client costs threads: a flood of them must not sink the server. */
        if (conns_active() >= MAX_CONNECTIONS) {
          nbd_debug("%u clients connected: refusing another", MAX_CONNECTIONS);
          close(fd);
          continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails on unix: fine */
        if (conn_spawn(fd) < 0) {
          nbd_log("cannot start a connection thread: %s", strerror(errno));
          close(fd);
        }
      }
    }
  }

  /* Stop taking clients, let in-flight requests finish, then flush and
   * close every disk (which clears the in-use mark).  Should that hang (a
   * stuck FUSE user), a second SIGTERM/SIGINT ends the process at once. */
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
  for (size_t i = 0; i < nlisten; i++) close(listen_fds[i]);
  if (unix_path) unlink(unix_path);
  conns_shutdown_and_wait();
  budget_cleanup();
  for (size_t i = 0; i < g_cfg.ndisks; i++) control_stop(&g_cfg.disks[i]);
  if (g_cfg.disks[0].fuse) ploop_fuse_export_stop(g_cfg.disks[0].fuse);
  exports_close_all();
  ploop_tls_creds_free(g_cfg.tls_creds);
  if (pid_file) unlink(pid_file);
  return 0;
}
