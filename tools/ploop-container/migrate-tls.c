/* TLS of migration connections (migrate-tls.h): options, the handshake on
 * either side, and the table that maps a relay's plain end to its socket. */
#include "migrate-tls.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "migrate-proto.h"

enum mode { TLS_OFF, TLS_ON, TLS_REQUIRE };

/* Process-wide on purpose: set once by the verb from its options, used by
 * every connection the migration code opens or accepts, so the protocol
 * code keeps passing plain fds around.  A process has at most a few links
 * (one migration, a resolve); a receiver serves each in its own child. */
static struct {
  enum mode mode;
  bool server;
  struct ploop_tls_creds *creds;
} cfg;

#define MAX_LINKS 4
static struct link {
  int plain, net;
  struct ploop_tls_relay *relay;
} links[MAX_LINKS] = {{-1, -1, NULL}, {-1, -1, NULL}, {-1, -1, NULL}, {-1, -1, NULL}};

/* After our close_notify, how long the peer gets to close its side. */
#define CLOSE_WAIT_SEC 2
/* A TLS record starts with its content type: 22 is a handshake. */
#define TLS_HANDSHAKE_RECORD 0x16

bool mig_tls_option(struct mig_tls_args *a, int c, const char *arg)
{
  switch (c) {
  case MIG_OPT_TLS:
    a->mode = arg;
    return true;
  case MIG_OPT_TLS_PSK:
    a->o.psk_file = arg;
    return true;
  case MIG_OPT_TLS_CERTS:
    a->o.cert_dir = arg;
    return true;
  case MIG_OPT_TLS_VERIFY:
    a->o.verify_peer = true;
    return true;
  default:
    return false;
  }
}

int mig_tls_setup(const struct mig_tls_args *a, bool server)
{
  bool creds = a->o.psk_file || a->o.cert_dir;
  enum mode m = creds ? TLS_REQUIRE : TLS_OFF;
  if (a->mode) {
    if (!strcmp(a->mode, "off"))
      m = TLS_OFF;
    else if (!strcmp(a->mode, "on"))
      m = TLS_ON;
    else if (!strcmp(a->mode, "require"))
      m = TLS_REQUIRE;
    else
      return ct_usage("--tls: expected off, on or require, got '%s'", a->mode);
  }
  if (m == TLS_OFF && (creds || a->o.verify_peer))
    return ct_usage("TLS credentials given with --tls=off");
  if (m != TLS_OFF && !creds)
    return ct_usage("--tls=%s needs --tls-psk FILE or --tls-certificates DIR", a->mode);
  if (a->o.psk_file && a->o.cert_dir)
    return ct_usage("--tls-psk and --tls-certificates exclude each other");
  if (a->o.verify_peer && (!server || !a->o.cert_dir))
    return ct_usage("--tls-verify-peer is for `receive` with --tls-certificates (migrate always "
                    "checks the destination's certificate)");
  cfg.mode = m;
  cfg.server = server;
  if (m == TLS_OFF)
    return 0;
  char err[1024];
  cfg.creds = ploop_tls_creds_new(&a->o, server, err, sizeof err);
  if (!cfg.creds)
    return ct_usage("%s", err);
  return 0;
}

static struct link *find(int fd)
{
  for (int i = 0; fd >= 0 && i < MAX_LINKS; i++)
    if (links[i].plain == fd)
      return &links[i];
  return NULL;
}

int mig_tls_net_fd(int fd)
{
  struct link *l = find(fd);
  return l ? l->net : fd;
}

const char *mig_tls_link_error(int fd)
{
  struct link *l = find(fd);
  return l ? ploop_tls_relay_error(l->relay) : NULL;
}

static void set_rcvtimeo(int fd, unsigned seconds)
{
  struct timeval tv = {.tv_sec = seconds};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* The handshake is done on NET: the relay takes over.  The receive timeout
 * moves to the plain end, where the protocol waits for messages; the relay
 * reads the socket without one, since a migration link idles for seconds
 * while CRIU dumps or restores, and keepalive with the user timeout
 * (mig_set_timeout) finds a peer that is gone. */
static int start_relay(struct ploop_tls *t, int net, unsigned timeout_s)
{
  struct link *l = NULL;
  for (int i = 0; !l && i < MAX_LINKS; i++)
    if (links[i].plain < 0)
      l = &links[i];
  char err[512];
  int plain = -1;
  if (!l)
    err[0] = 0;
  struct ploop_tls_relay *r = l ? ploop_tls_relay_start(t, net, &plain, err, sizeof err) : NULL;
  if (!r) {
    ploop_tls_free(t);
    close(net);
    return ct_fail(0, "%s", err[0] ? err : "TLS: too many connections");
  }
  *l = (struct link){plain, net, r};
  set_rcvtimeo(net, 0);
  if (mig_set_timeout(plain, timeout_s) < 0) {
    mig_close(plain);
    return -1;
  }
  return plain;
}

int mig_tls_connect(int fd, const char *addr_port, unsigned timeout_s)
{
  if (cfg.mode == TLS_OFF || cfg.server)
    return fd;
  char host[256];
  const char *colon = strrchr(addr_port, ':');
  size_t n = colon ? (size_t)(colon - addr_port) : strlen(addr_port);
  const char *h = addr_port;
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  snprintf(host, sizeof host, "%.*s", (int)n, h);
  /* mig_connect's SO_RCVTIMEO bounds the handshake */
  char err[1024];
  struct ploop_tls *t = ploop_tls_client(cfg.creds, fd, host, err, sizeof err);
  if (!t) {
    close(fd);
    /* What the source can guess about a refusal it only sees the end of. */
    const char *hint = "";
    if (strstr(err, "alert") && ploop_tls_creds_psk(cfg.creds))
      hint = " (a key the destination does not hold?)";
    else if (!strstr(err, "alert") && !strstr(err, "certificate") && !strstr(err, "timed out"))
      hint = " (does the destination's receive use TLS?)";
    return ct_fail(0, "TLS with %s: %s%s", addr_port, err, hint);
  }
  return start_relay(t, fd, timeout_s);
}

/* Refusing a plain source: swallow what it sends for a moment after our
 * ERROR, so that our close does not reset the connection before it read it. */
static void drain_close(int fd)
{
  shutdown(fd, SHUT_WR);
  set_rcvtimeo(fd, 1);
  char buf[4096];
  time_t until = time(NULL) + 2;
  while (time(NULL) < until && read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
}

int mig_tls_accept(int fd, unsigned timeout_s)
{
  if (cfg.mode == TLS_OFF || !cfg.server)
    return fd;
  /* The first byte says which: a TLS record, or our frames' magic. */
  set_rcvtimeo(fd, timeout_s);
  unsigned char b = 0;
  ssize_t n;
  while ((n = recv(fd, &b, 1, MSG_PEEK)) < 0 && errno == EINTR) {
  }
  if (n < 0) {
    int e = errno == EAGAIN ? ETIMEDOUT : errno;
    close(fd);
    return ct_fail(e, "waiting for the source's first bytes");
  }
  if (n == 0 || b != TLS_HANDSHAKE_RECORD) {
    if (cfg.mode == TLS_ON)
      return fd; /* plain, as the source wants (or its EOF, for serve to see) */
    if (n == 0) {
      close(fd);
      return ct_fail(0, "the peer closed the connection before the TLS handshake");
    }
    ct_fail(0, "TLS required: the source connected without TLS (give migrate the same "
               "--tls-psk or --tls-certificates)");
    mig_send_error(fd, ct_error());
    drain_close(fd);
    return -1;
  }
  char err[1024];
  struct ploop_tls *t = ploop_tls_server(cfg.creds, fd, fd, err, sizeof err);
  if (!t) {
    drain_close(fd); /* the alert, not a reset, reaches the source */
    return ct_fail(0, "TLS with the source: %s", err);
  }
  return start_relay(t, fd, timeout_s);
}

void mig_close(int fd)
{
  struct link *l = find(fd);
  if (!l) {
    if (fd >= 0)
      close(fd);
    return;
  }
  /* What we wrote is queued in the pair: it goes out, then close_notify. */
  shutdown(fd, SHUT_WR);
  char err[512];
  ploop_tls_relay_finish(l->relay, CLOSE_WAIT_SEC, err, sizeof err);
  close(fd);
  close(l->net);
  *l = (struct link){-1, -1, NULL};
}
