/* GnuTLS credentials and blocking sessions shared by ploop-nbd, ploop and
 * ploop-container (see ploop-tls.h); the relay that puts TLS beneath code
 * written for a plain fd is in tls-relay.c. */
#include "ploop-tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ploop_tls_creds {
  bool server, psk, verify_peer;
  gnutls_psk_server_credentials_t psk_server;
  gnutls_psk_client_credentials_t psk_client;
  gnutls_certificate_credentials_t x509;
};

struct ploop_tls {
  gnutls_session_t s;
  char peer[256];
  char read_err[200], write_err[200]; /* one per direction: each has its thread */
};

/* GnuTLS's words for R, with the alert's name when the peer sent one
 * ("certificate required" says more than "a fatal alert"). */
static void note_error(struct ploop_tls *t, char *buf, size_t len, ssize_t r, int sys_errno)
{
  if (r == GNUTLS_E_FATAL_ALERT_RECEIVED || r == GNUTLS_E_WARNING_ALERT_RECEIVED)
    snprintf(buf, len, "the peer's alert: %s", gnutls_alert_get_name(gnutls_alert_get(t->s)));
  else if ((r == GNUTLS_E_PULL_ERROR || r == GNUTLS_E_PUSH_ERROR) && sys_errno)
    snprintf(buf, len, "%s", strerror(sys_errno)); /* the socket's own reason */
  else
    snprintf(buf, len, "%s", gnutls_strerror((int)r));
}

const char *ploop_tls_last_error(struct ploop_tls *t, bool reading)
{
  const char *e = reading ? t->read_err : t->write_err;
  return e[0] ? e : NULL;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* A psktool file: "identity:hexkey" lines.  Checked here so a typo fails at
 * startup with a line number, not at the first client's handshake.  Takes
 * the line of IDENTITY (or the first) into ID and KEY when asked. */
static int psk_file_check(const char *path, const char *identity, char *id, size_t idlen, char *key,
                          size_t keylen, char *err, size_t errlen)
{
  FILE *f = fopen(path, "r");
  if (!f) {
    seterr(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  char line[1024];
  unsigned n = 0, entries = 0;
  bool found = false;
  int rc = 0;
  while (fgets(line, sizeof line, f)) {
    n++;
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0])
      continue;
    char *colon = strchr(line, ':');
    const char *hex = colon ? colon + 1 : "";
    size_t hl = strlen(hex);
    bool ok = colon && colon != line && hl >= 2 && hl % 2 == 0 && strspn(hex, "0123456789abcdefABCDEF") == hl;
    if (!ok) {
      seterr(err, errlen, "%s:%u: expected IDENTITY:HEXKEY (as psktool writes)", path, n);
      rc = -1;
      break;
    }
    *colon = 0;
    entries++;
    if (id && !found && (!identity || strcmp(identity, line) == 0)) {
      if (strlen(line) >= idlen || hl >= keylen) {
        seterr(err, errlen, "%s:%u: identity or key too long", path, n);
        rc = -1;
        break;
      }
      strcpy(id, line);
      strcpy(key, hex);
      found = true;
    }
  }
  fclose(f);
  if (rc == 0 && entries == 0) {
    seterr(err, errlen, "%s: no key in the file", path);
    rc = -1;
  } else if (rc == 0 && id && !found) {
    seterr(err, errlen, "%s: no key for identity '%s'", path, identity);
    rc = -1;
  }
  explicit_bzero(line, sizeof line);
  return rc;
}

static bool file_exists(const char *dir, const char *name, char *path, size_t len)
{
  snprintf(path, len, "%s/%s", dir, name);
  return access(path, R_OK) == 0;
}

static int load_x509(struct ploop_tls_creds *cr, const char *dir, char *err, size_t errlen)
{
  char ca[4096], cert[4096], key[4096];
  int r = gnutls_certificate_allocate_credentials(&cr->x509);
  if (r < 0) {
    seterr(err, errlen, "TLS credentials: %s", gnutls_strerror(r));
    return -1;
  }
  const char *cname = cr->server ? "server-cert.pem" : "client-cert.pem";
  const char *kname = cr->server ? "server-key.pem" : "client-key.pem";
  bool have_ca = file_exists(dir, "ca-cert.pem", ca, sizeof ca);
  bool have_cert = file_exists(dir, cname, cert, sizeof cert);
  bool have_key = file_exists(dir, kname, key, sizeof key);
  /* A client must check the server; a server checks clients only when asked. */
  if (!have_ca && (!cr->server || cr->verify_peer)) {
    seterr(err, errlen, "%s: %s", ca, strerror(errno));
    return -1;
  }
  if (have_ca) {
    r = gnutls_certificate_set_x509_trust_file(cr->x509, ca, GNUTLS_X509_FMT_PEM);
    if (r <= 0) {
      seterr(err, errlen, "%s: %s", ca, r < 0 ? gnutls_strerror(r) : "no certificate in the file");
      return -1;
    }
    char crl[4096];
    if (file_exists(dir, "ca-crl.pem", crl, sizeof crl) &&
        (r = gnutls_certificate_set_x509_crl_file(cr->x509, crl, GNUTLS_X509_FMT_PEM)) < 0) {
      seterr(err, errlen, "%s: %s", crl, gnutls_strerror(r));
      return -1;
    }
  }
  if (cr->server && (!have_cert || !have_key)) {
    seterr(err, errlen, "%s: %s", have_cert ? key : cert, strerror(ENOENT));
    return -1;
  }
  if (have_cert && have_key) {
    r = gnutls_certificate_set_x509_key_file(cr->x509, cert, key, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
      seterr(err, errlen, "%s, %s: %s", cert, key, gnutls_strerror(r));
      return -1;
    }
  }
  return 0;
}

struct ploop_tls_creds *ploop_tls_creds_new(const struct ploop_tls_opts *o, bool server, char *err,
                                            size_t errlen)
{
  struct ploop_tls_creds *cr = calloc(1, sizeof *cr);
  if (!cr) {
    seterr(err, errlen, "out of memory");
    return NULL;
  }
  cr->server = server;
  cr->verify_peer = o->verify_peer;
  int r = 0;
  if (o->psk_file) {
    cr->psk = true;
    if (server) {
      if (psk_file_check(o->psk_file, NULL, NULL, 0, NULL, 0, err, errlen) < 0)
        goto fail;
      if ((r = gnutls_psk_allocate_server_credentials(&cr->psk_server)) < 0 ||
          (r = gnutls_psk_set_server_credentials_file(cr->psk_server, o->psk_file)) < 0) {
        seterr(err, errlen, "%s: %s", o->psk_file, gnutls_strerror(r));
        goto fail;
      }
    } else {
      char id[512], hex[1024];
      if (psk_file_check(o->psk_file, o->psk_identity, id, sizeof id, hex, sizeof hex, err, errlen) < 0)
        goto fail;
      gnutls_datum_t key = {(unsigned char *)hex, (unsigned)strlen(hex)};
      if ((r = gnutls_psk_allocate_client_credentials(&cr->psk_client)) < 0 ||
          (r = gnutls_psk_set_client_credentials(cr->psk_client, id, &key, GNUTLS_PSK_KEY_HEX)) < 0) {
        seterr(err, errlen, "%s: %s", o->psk_file, gnutls_strerror(r));
        explicit_bzero(hex, sizeof hex);
        goto fail;
      }
      explicit_bzero(hex, sizeof hex);
    }
  } else if (o->cert_dir) {
    if (load_x509(cr, o->cert_dir, err, errlen) < 0)
      goto fail;
  } else {
    seterr(err, errlen, "TLS needs a pre-shared key file or a certificate directory");
    goto fail;
  }
  return cr;
fail:
  ploop_tls_creds_free(cr);
  return NULL;
}

void ploop_tls_creds_free(struct ploop_tls_creds *cr)
{
  if (!cr)
    return;
  if (cr->psk_server)
    gnutls_psk_free_server_credentials(cr->psk_server);
  if (cr->psk_client)
    gnutls_psk_free_client_credentials(cr->psk_client);
  if (cr->x509)
    gnutls_certificate_free_credentials(cr->x509);
  free(cr);
}

bool ploop_tls_creds_psk(const struct ploop_tls_creds *cr) { return cr->psk; }

static void peer_name(struct ploop_tls *t, bool psk)
{
  if (psk) {
    const char *u = gnutls_psk_server_get_username(t->s);
    snprintf(t->peer, sizeof t->peer, "psk:%s", u ? u : "?");
    return;
  }
  unsigned n = 0;
  const gnutls_datum_t *certs = gnutls_certificate_get_peers(t->s, &n);
  gnutls_x509_crt_t crt;
  snprintf(t->peer, sizeof t->peer, "x509:anonymous");
  if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0)
    return;
  size_t len = sizeof t->peer - 5;
  if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0 &&
      gnutls_x509_crt_get_dn(crt, t->peer + 5, &len) == 0)
    memcpy(t->peer, "x509:", 5);
  gnutls_x509_crt_deinit(crt);
}

/* GnuTLS reads and writes with recv()/send(), which pipes refuse (ploop-nbd
 * -s serves stdin/stdout): plain read()/write() there. */
static ssize_t fd_pull(gnutls_transport_ptr_t p, void *buf, size_t len)
{
  return read((int)(intptr_t)p, buf, len);
}

static ssize_t fd_push(gnutls_transport_ptr_t p, const void *buf, size_t len)
{
  return write((int)(intptr_t)p, buf, len);
}

static bool is_socket(int fd)
{
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static struct ploop_tls *session(struct ploop_tls_creds *cr, int rfd, int wfd, const char *hostname,
                                 char *err, size_t errlen)
{
  struct ploop_tls *t = calloc(1, sizeof *t);
  if (!t) {
    seterr(err, errlen, "out of memory");
    return NULL;
  }
  int r = gnutls_init(&t->s, (cr->server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_SIGNAL);
  if (r < 0) {
    free(t);
    seterr(err, errlen, "TLS session: %s", gnutls_strerror(r));
    return NULL;
  }
  const char *what = "TLS priorities";
  if (cr->psk) {
    r = gnutls_set_default_priority_append(t->s, "+ECDHE-PSK:+DHE-PSK:+PSK", NULL, 0);
    if (r == 0)
      r = gnutls_credentials_set(t->s, GNUTLS_CRD_PSK,
                                 cr->server ? (void *)cr->psk_server : (void *)cr->psk_client);
  } else {
    r = gnutls_set_default_priority(t->s);
    if (r == 0)
      r = gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, cr->x509);
    if (r == 0 && cr->server && cr->verify_peer)
      gnutls_certificate_server_set_request(t->s, GNUTLS_CERT_REQUIRE);
    /* Checked inside the handshake: a bad certificate fails it. */
    if (r == 0 && (!cr->server || cr->verify_peer))
      gnutls_session_set_verify_cert(t->s, cr->server ? NULL : hostname, 0);
  }
  if (r < 0) {
    seterr(err, errlen, "%s: %s", what, gnutls_strerror(r));
    ploop_tls_free(t);
    return NULL;
  }
  gnutls_transport_set_int2(t->s, rfd, wfd);
  if (!is_socket(rfd))
    gnutls_transport_set_pull_function(t->s, fd_pull);
  if (!is_socket(wfd))
    gnutls_transport_set_push_function(t->s, fd_push);
  gnutls_handshake_set_timeout(t->s, 0);
  do
    r = gnutls_handshake(t->s);
  while (r == GNUTLS_E_INTERRUPTED || (r < 0 && r != GNUTLS_E_AGAIN && !gnutls_error_is_fatal(r)));
  if (r < 0) {
    int e = errno;
    /* Tell the peer why, best effort: it reports the alert instead of a
     * connection that merely ended. */
    if (r != GNUTLS_E_AGAIN && r != GNUTLS_E_PULL_ERROR && r != GNUTLS_E_PUSH_ERROR &&
        r != GNUTLS_E_PREMATURE_TERMINATION)
      gnutls_alert_send_appropriate(t->s, r);
    if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
      unsigned status = gnutls_session_get_verify_cert_status(t->s);
      gnutls_datum_t out = {0};
      if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
        seterr(err, errlen, "TLS handshake: %s", out.data);
        gnutls_free(out.data);
        for (size_t n = strlen(err); n > 0 && err[n - 1] == ' ';)
          err[--n] = 0; /* the status print ends each sentence with a space */
      } else {
        seterr(err, errlen, "TLS handshake: %s", gnutls_strerror(r));
      }
    } else if (r == GNUTLS_E_AGAIN) {
      seterr(err, errlen, "TLS handshake: timed out");
    } else {
      char why[200];
      note_error(t, why, sizeof why, r, e);
      seterr(err, errlen, "TLS handshake: %s", why);
    }
    ploop_tls_free(t);
    return NULL;
  }
  peer_name(t, cr->psk && cr->server);
  if (cr->psk && !cr->server)
    snprintf(t->peer, sizeof t->peer, "psk");
  return t;
}

struct ploop_tls *ploop_tls_server(struct ploop_tls_creds *cr, int rfd, int wfd, char *err, size_t errlen)
{
  return session(cr, rfd, wfd, NULL, err, errlen);
}

struct ploop_tls *ploop_tls_client(struct ploop_tls_creds *cr, int fd, const char *hostname, char *err,
                                   size_t errlen)
{
  return session(cr, fd, fd, hostname, err, errlen);
}

const char *ploop_tls_peer(struct ploop_tls *t) { return t->peer; }

static int gnutls_errno(ssize_t r)
{
  switch (r) {
  case GNUTLS_E_INTERRUPTED:
    return EINTR;
  case GNUTLS_E_AGAIN:
    return EAGAIN;
  case GNUTLS_E_PUSH_ERROR:
  case GNUTLS_E_PULL_ERROR:
    return errno ? errno : ECONNRESET;
  default:
    return EPROTO;
  }
}

ssize_t ploop_tls_read(struct ploop_tls *t, void *buf, size_t len)
{
  for (;;) {
    ssize_t r = gnutls_record_recv(t->s, buf, len);
    if (r >= 0)
      return r;
    /* A peer that hangs up without close_notify has still ended the data:
     * every protocol above us frames its own messages. */
    if (r == GNUTLS_E_PREMATURE_TERMINATION)
      return 0;
    /* Warnings (a renegotiation refused, a key update) are no data yet. */
    if (r != GNUTLS_E_INTERRUPTED && r != GNUTLS_E_AGAIN && !gnutls_error_is_fatal((int)r))
      continue;
    errno = gnutls_errno(r);
    if (r != GNUTLS_E_INTERRUPTED && r != GNUTLS_E_AGAIN) {
      int e = errno;
      note_error(t, t->read_err, sizeof t->read_err, r, e);
      errno = e;
    }
    return -1;
  }
}

static int send_all(struct ploop_tls *t, const uint8_t *p, size_t len)
{
  while (len > 0) {
    ssize_t r = gnutls_record_send(t->s, p, len);
    if (r == GNUTLS_E_INTERRUPTED) {
      /* GnuTLS wants the same call again to finish the record it began. */
      continue;
    }
    if (r < 0) {
      errno = gnutls_errno(r);
      if (r != GNUTLS_E_AGAIN) {
        int e = errno;
        note_error(t, t->write_err, sizeof t->write_err, r, e);
        errno = e;
      }
      return -1;
    }
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

#define RECORD_MAX 16384u

int ploop_tls_writev(struct ploop_tls *t, const struct iovec *iov, int iovcnt)
{
  uint8_t stage[RECORD_MAX];
  size_t sl = 0;
  for (int i = 0; i < iovcnt; i++) {
    const uint8_t *p = iov[i].iov_base;
    size_t n = iov[i].iov_len;
    while (n > 0) {
      if (sl == 0 && n >= RECORD_MAX) {
        if (send_all(t, p, n) < 0)
          return -1;
        break;
      }
      size_t k = n < RECORD_MAX - sl ? n : RECORD_MAX - sl;
      memcpy(stage + sl, p, k);
      sl += k;
      p += k;
      n -= k;
      if (sl == RECORD_MAX) {
        if (send_all(t, stage, sl) < 0)
          return -1;
        sl = 0;
      }
    }
  }
  return sl ? send_all(t, stage, sl) : 0;
}

int ploop_tls_write(struct ploop_tls *t, const void *buf, size_t len)
{
  struct iovec iov = {(void *)buf, len};
  return ploop_tls_writev(t, &iov, 1);
}

size_t ploop_tls_pending(struct ploop_tls *t) { return gnutls_record_check_pending(t->s); }

int ploop_tls_bye(struct ploop_tls *t)
{
  int r;
  do
    r = gnutls_bye(t->s, GNUTLS_SHUT_WR);
  while (r == GNUTLS_E_INTERRUPTED);
  if (r < 0) {
    errno = gnutls_errno(r);
    return -1;
  }
  return 0;
}

void ploop_tls_free(struct ploop_tls *t)
{
  if (!t)
    return;
  gnutls_deinit(t->s);
  free(t);
}
