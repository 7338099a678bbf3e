/* Unit tests of tls/ (the GnuTLS module shared by ploop-nbd, ploop and
 * ploop-container): key files are checked at load with a line number, a
 * PSK session over a socket pair carries gathered and large writes intact,
 * a wrong key fails both ends, close_notify reads as EOF, and the relay
 * moves a stream both ways between two plain fds. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* tls/ needs nothing beyond GnuTLS: compiled in here. */
#include "../../tls/ploop-tls.c"
#include "../../tls/tls-relay.c"

static char dir[64];

static const char *write_file(const char *name, const char *text)
{
  static char path[128];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/ploop-tls-test.XXXXXX");
    cr_assert(mkdtemp(dir));
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static void remove_dir(void)
{
  if (dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert(system(cmd) == 0);
  }
}

static const char *KEY = "alice:00112233445566778899aabbccddeeff\n";
static const char *OTHER = "alice:ffeeddccbbaa99887766554433221100\n";

static struct ploop_tls_creds *creds(const char *text, bool server)
{
  char err[512];
  struct ploop_tls_opts o = {.psk_file = write_file(server ? "s.psk" : "c.psk", text)};
  struct ploop_tls_creds *cr = ploop_tls_creds_new(&o, server, err, sizeof err);
  cr_assert(cr, "%s", err);
  return cr;
}

Test(tls, key_files_checked_at_load, .fini = remove_dir)
{
  char err[512];
  struct ploop_tls_opts o = {.psk_file = "/nonexistent/keys.psk"};
  cr_assert_null(ploop_tls_creds_new(&o, true, err, sizeof err));
  cr_assert(strstr(err, "/nonexistent/keys.psk"), "%s", err);
  o.psk_file = write_file("bad.psk", "alice:0011\nbob:xyz\n");
  cr_assert_null(ploop_tls_creds_new(&o, true, err, sizeof err));
  cr_assert(strstr(err, "bad.psk:2"), "%s", err);
  o.psk_file = write_file("empty.psk", "\n");
  cr_assert_null(ploop_tls_creds_new(&o, false, err, sizeof err));
  o.psk_file = write_file("two.psk", "alice:00112233445566778899aabbccddeeff\nbob:2233445566778899aabbccddeeff0011\n");
  o.psk_identity = "carol";
  cr_assert_null(ploop_tls_creds_new(&o, false, err, sizeof err));
  cr_assert(strstr(err, "carol"), "%s", err);
  o.psk_identity = "bob";
  struct ploop_tls_creds *cr = ploop_tls_creds_new(&o, false, err, sizeof err);
  cr_assert(cr, "%s", err);
  cr_assert(ploop_tls_creds_psk(cr));
  ploop_tls_creds_free(cr);
  struct ploop_tls_opts none = {0};
  cr_assert_null(ploop_tls_creds_new(&none, true, err, sizeof err));
  struct ploop_tls_opts x = {.cert_dir = dir};
  cr_assert_null(ploop_tls_creds_new(&x, true, err, sizeof err)); /* no server-cert.pem */
}

struct side {
  struct ploop_tls_creds *cr;
  int fd;
  struct ploop_tls *t;
  char err[512];
};

static void *server_side(void *arg)
{
  struct side *s = arg;
  s->t = ploop_tls_server(s->cr, s->fd, s->fd, s->err, sizeof s->err);
  if (!s->t)
    shutdown(s->fd, SHUT_RDWR); /* as a real server closes: the client must not wait */
  return NULL;
}

/* Handshakes both ends of a socket pair; false if either failed. */
static bool pair(struct side *srv, struct side *cli)
{
  int sp[2];
  cr_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
  srv->fd = sp[0];
  cli->fd = sp[1];
  pthread_t th;
  pthread_create(&th, NULL, server_side, srv);
  cli->t = ploop_tls_client(cli->cr, cli->fd, NULL, cli->err, sizeof cli->err);
  if (!cli->t)
    shutdown(cli->fd, SHUT_RDWR); /* the server must not wait for us */
  pthread_join(th, NULL);
  return srv->t && cli->t;
}

static void read_exact(struct ploop_tls *t, uint8_t *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = ploop_tls_read(t, buf, len);
    cr_assert(n > 0, "read: %zd", n);
    buf += n;
    len -= (size_t)n;
  }
}

struct writer {
  struct ploop_tls *t;
  const uint8_t *data;
};

/* A header, a large payload and a small trailer, as the server's replies. */
static void *write_side(void *arg)
{
  struct writer *w = arg;
  struct iovec iov[3] = {{(void *)w->data, 20}, {(void *)(w->data + 20), (1 << 20) - 30},
                         {(void *)(w->data + (1 << 20) - 10), 10}};
  cr_assert(ploop_tls_writev(w->t, iov, 3) == 0);
  cr_assert(ploop_tls_bye(w->t) == 0);
  return NULL;
}

Test(tls, psk_session_carries_bytes_intact, .fini = remove_dir)
{
  struct side srv = {.cr = creds(KEY, true)}, cli = {.cr = creds(KEY, false)};
  cr_assert(pair(&srv, &cli), "%s / %s", srv.err, cli.err);
  cr_assert_str_eq(ploop_tls_peer(srv.t), "psk:alice");
  uint8_t *data = malloc(1 << 20), *got = malloc(1 << 20);
  for (size_t i = 0; i < (1u << 20); i++)
    data[i] = (uint8_t)(i * 7 + (i >> 12));
  struct writer w = {cli.t, data};
  pthread_t th;
  pthread_create(&th, NULL, write_side, &w);
  read_exact(srv.t, got, 1 << 20);
  cr_assert(memcmp(got, data, 1 << 20) == 0);
  pthread_join(th, NULL);
  uint8_t b;
  cr_assert_eq(ploop_tls_read(srv.t, &b, 1), 0, "close_notify is EOF");
  ploop_tls_free(srv.t);
  ploop_tls_free(cli.t);
  ploop_tls_creds_free(srv.cr);
  ploop_tls_creds_free(cli.cr);
  free(data);
  free(got);
}

Test(tls, wrong_key_fails_both_ends, .fini = remove_dir)
{
  struct side srv = {.cr = creds(KEY, true)}, cli = {.cr = creds(OTHER, false)};
  cr_assert_not(pair(&srv, &cli));
  cr_assert_null(srv.t);
  cr_assert_null(cli.t);
  cr_assert(strstr(srv.err, "TLS handshake"), "%s", srv.err);
  ploop_tls_creds_free(srv.cr);
  ploop_tls_creds_free(cli.cr);
}

Test(tls, relay_moves_a_stream_both_ways, .fini = remove_dir)
{
  struct side srv = {.cr = creds(KEY, true)}, cli = {.cr = creds(KEY, false)};
  cr_assert(pair(&srv, &cli), "%s / %s", srv.err, cli.err);
  char err[256];
  int ps, pc;
  struct ploop_tls_relay *rs = ploop_tls_relay_start(srv.t, srv.fd, &ps, err, sizeof err);
  struct ploop_tls_relay *rc = ploop_tls_relay_start(cli.t, cli.fd, &pc, err, sizeof err);
  cr_assert(rs && rc, "%s", err);
  static uint8_t data[3 << 20], got[3 << 20];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (uint8_t)(i ^ (i >> 9));
  /* Client -> server: 3 MiB, then the client closes its side. */
  size_t off = 0, in = 0;
  while (off < sizeof data) {
    ssize_t n = write(pc, data + off, sizeof data - off < 65536 ? sizeof data - off : 65536);
    cr_assert(n > 0);
    off += (size_t)n;
    /* Drain as we go: the pair holds only so much. */
    while (in < off) {
      ssize_t m = read(ps, got + in, sizeof got - in);
      cr_assert(m > 0);
      in += (size_t)m;
    }
  }
  shutdown(pc, SHUT_WR);
  uint8_t b;
  cr_assert_eq(read(ps, &b, 1), 0, "the client's close reaches the server as EOF");
  cr_assert(memcmp(got, data, sizeof data) == 0);
  /* Server -> client: an answer after the client's EOF still arrives. */
  cr_assert_eq(write(ps, "ok", 2), 2);
  shutdown(ps, SHUT_WR);
  char ans[3] = "";
  cr_assert_eq(read(pc, ans, 2), 2);
  cr_assert_str_eq(ans, "ok");
  cr_assert_eq(ploop_tls_relay_finish(rs, 5, err, sizeof err), 0, "%s", err);
  cr_assert_eq(ploop_tls_relay_finish(rc, 5, err, sizeof err), 0, "%s", err);
  close(ps);
  close(pc);
  close(srv.fd);
  close(cli.fd);
  ploop_tls_creds_free(srv.cr);
  ploop_tls_creds_free(cli.cr);
}
