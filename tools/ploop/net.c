/* TCP ends of `ploop send --to` and `ploop receive --listen`: one
 * connection each, resolved with getaddrinfo (numeric or named hosts). */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common.h"

static int split(const char *opt, const char *addr, char *host, size_t hlen, const char **port)
{
  const char *colon = strrchr(addr, ':');
  if (!colon || !colon[1])
    return cli_usage_error("%s: '%s' is not HOST:PORT", opt, addr);
  const char *h = addr;
  size_t n = (size_t)(colon - addr);
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  if (n == 0 || n >= hlen)
    return cli_usage_error("%s: '%s' is not HOST:PORT", opt, addr);
  memcpy(host, h, n);
  host[n] = 0;
  *port = colon + 1;
  return 0;
}

static int resolve(const char *opt, const char *addr, bool passive, struct addrinfo **res)
{
  char host[256];
  const char *port = NULL;
  int rc = split(opt, addr, host, sizeof host, &port);
  if (rc)
    return rc;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  int e = getaddrinfo(host, port, &hints, res);
  if (e)
    return cli_error(EXIT_USAGE, "%s: %s: %s", opt, addr, gai_strerror(e));
  return 0;
}

/* Big socket buffers: a stream is a bulk transfer. */
static void tune(int fd)
{
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int net_connect(const char *opt, const char *addr, int *fd)
{
  struct addrinfo *res;
  int rc = resolve(opt, addr, false, &res);
  if (rc)
    return rc;
  int err = 0;
  *fd = -1;
  for (struct addrinfo *a = res; a && *fd < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    tune(s);
    if (connect(s, a->ai_addr, a->ai_addrlen) == 0) {
      *fd = s;
      break;
    }
    err = errno;
    close(s);
  }
  freeaddrinfo(res);
  if (*fd < 0)
    return cli_error(EXIT_IO, "%s: connect to %s: %s", opt, addr, strerror(err));
  return 0;
}

int net_accept_one(const char *opt, const char *addr, int *fd)
{
  struct addrinfo *res;
  int rc = resolve(opt, addr, true, &res);
  if (rc)
    return rc;
  int ls = -1, err = 0;
  for (struct addrinfo *a = res; a && ls < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    tune(s);
    if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 1) == 0) {
      ls = s;
      break;
    }
    err = errno;
    close(s);
  }
  freeaddrinfo(res);
  if (ls < 0)
    return cli_error(EXIT_IO, "%s: listen on %s: %s", opt, addr, strerror(err));
  do
    *fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
  while (*fd < 0 && errno == EINTR);
  err = errno;
  close(ls);
  if (*fd < 0)
    return cli_error(EXIT_IO, "%s: accept on %s: %s", opt, addr, strerror(err));
  return 0;
}

bool net_tls_option(struct net_tls *t, int c, const char *arg)
{
  switch (c) {
  case NET_OPT_TLS_PSK:
    t->o.psk_file = arg;
    return true;
  case NET_OPT_TLS_CERTS:
    t->o.cert_dir = arg;
    return true;
  case NET_OPT_TLS_VERIFY:
    t->o.verify_peer = true;
    return true;
  default:
    return false;
  }
}

int net_tls_check(struct net_tls *t, bool server, const char *net_opt)
{
  bool any = t->o.psk_file || t->o.cert_dir || t->o.verify_peer;
  if (any && !net_opt)
    return cli_usage_error("TLS options need %s", server ? "--listen" : "--to");
  if (t->o.psk_file && t->o.cert_dir)
    return cli_usage_error("--tls-psk and --tls-certificates are exclusive");
  if (t->o.verify_peer && (!server || !t->o.cert_dir))
    return cli_usage_error("--tls-verify-peer is for 'receive --listen' with --tls-certificates");
  if (!t->o.psk_file && !t->o.cert_dir)
    return 0;
  /* Loaded now: a bad file must fail before we wait for a peer. */
  char err[1024];
  t->creds = ploop_tls_creds_new(&t->o, server, err, sizeof err);
  if (!t->creds)
    return cli_error(EXIT_USAGE, "%s", err);
  return 0;
}

/* The handshake may not wait forever for a silent peer. */
#define TLS_HANDSHAKE_TIMEOUT_SEC 30
/* After our close_notify, how long the peer gets to close its side. */
#define TLS_CLOSE_WAIT_SEC 30

int net_tls_start(struct net_tls *t, bool server, const char *opt, const char *addr, int *fd)
{
  t->net_fd = -1;
  if (!t->o.psk_file && !t->o.cert_dir)
    return 0;
  char err[1024], host[256];
  const char *port;
  int rc = split(opt, addr, host, sizeof host, &port);
  if (rc)
    return rc;
  struct ploop_tls_creds *cr = t->creds;
  struct timeval tv = {.tv_sec = TLS_HANDSHAKE_TIMEOUT_SEC}, zero = {0};
  setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct ploop_tls *s = server ? ploop_tls_server(cr, *fd, *fd, err, sizeof err)
                               : ploop_tls_client(cr, *fd, host, err, sizeof err);
  setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
  if (!s)
    return cli_error(EXIT_IO, "%s %s: %s", opt, addr, err);
  int plain;
  t->relay = ploop_tls_relay_start(s, *fd, &plain, err, sizeof err);
  if (!t->relay) {
    ploop_tls_free(s);
    return cli_error(EXIT_GENERIC, "%s", err);
  }
  t->net_fd = *fd;
  *fd = plain;
  return 0;
}

int net_tls_finish(struct net_tls *t, const char *opt, int plain_fd)
{
  if (!t->relay)
    return 0;
  char err[512];
  /* Whatever the caller wrote is already queued in the pair. */
  shutdown(plain_fd, SHUT_RDWR);
  int r = ploop_tls_relay_finish(t->relay, TLS_CLOSE_WAIT_SEC, err, sizeof err);
  t->relay = NULL;
  ploop_tls_creds_free(t->creds);
  t->creds = NULL;
  close(plain_fd);
  close(t->net_fd);
  t->net_fd = -1;
  if (r < 0 && !opt)
    return EXIT_IO;
  return r < 0 ? cli_error(EXIT_IO, "%s: %s", opt, err) : 0;
}
