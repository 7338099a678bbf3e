/* TLS for every network end of the project (ploop-nbd's STARTTLS, ploop
 * send/receive, ploop-container migration): GnuTLS credentials loaded once
 * from a pre-shared key file (psktool's "identity:hexkey" lines) or an
 * X.509 directory laid out as nbdkit and qemu expect, and blocking sessions
 * over a connected socket.  Kept out of libploop, which knows no sockets. */
#ifndef PLOOP_TLS_H
#define PLOOP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ploop_tls_opts {
  const char *psk_file; /* "identity:hexkey" per line; wins over cert_dir */
  /* Server: ca-cert.pem, server-cert.pem, server-key.pem.  Client:
   * ca-cert.pem, and client-cert.pem + client-key.pem when present. */
  const char *cert_dir;
  bool verify_peer;         /* server: a client certificate signed by the CA is required */
  const char *psk_identity; /* client: which identity of the file (default: the first) */
};

struct ploop_tls_creds;
struct ploop_tls;

/* Loads and checks the files now, so a bad path fails at startup. */
struct ploop_tls_creds *ploop_tls_creds_new(const struct ploop_tls_opts *o, bool server, char *err,
                                            size_t errlen);
void ploop_tls_creds_free(struct ploop_tls_creds *cr);
bool ploop_tls_creds_psk(const struct ploop_tls_creds *cr);

/* Runs the handshake on RFD/WFD (the same fd for a socket).  Blocking;
 * a socket's SO_RCVTIMEO bounds it.  HOSTNAME (client, X.509): the name the
 * server certificate must carry, NULL to check the CA signature only. */
struct ploop_tls *ploop_tls_server(struct ploop_tls_creds *cr, int rfd, int wfd, char *err,
                                   size_t errlen);
struct ploop_tls *ploop_tls_client(struct ploop_tls_creds *cr, int fd, const char *hostname, char *err,
                                   size_t errlen);
/* Who the peer is, for logs: the PSK identity or the certificate's DN. */
const char *ploop_tls_peer(struct ploop_tls *t);

/* One thread may read while another writes.  Read: > 0 bytes, 0 at the
 * peer's end, -1 with errno (EINTR: a signal, EAGAIN: the socket's
 * timeout, EPROTO/ECONNRESET: a broken session). */
ssize_t ploop_tls_read(struct ploop_tls *t, void *buf, size_t len);
/* Whole buffers: 0, or -1 with errno as above. Small pieces are gathered
 * into full records, large ones go out without a copy. */
int ploop_tls_writev(struct ploop_tls *t, const struct iovec *iov, int iovcnt);
int ploop_tls_write(struct ploop_tls *t, const void *buf, size_t len);
/* GnuTLS's description of the last failed read (READING) or write, with
 * the peer's alert when it sent one; NULL when there was none. */
const char *ploop_tls_last_error(struct ploop_tls *t, bool reading);
/* Bytes already decrypted and waiting: poll() on the fd would not see them. */
size_t ploop_tls_pending(struct ploop_tls *t);
/* Says "no more data" (close_notify); the fd stays open. */
int ploop_tls_bye(struct ploop_tls *t);
/* Frees the session; the fds stay with the caller. */
void ploop_tls_free(struct ploop_tls *t);

/* For code that reads and writes a plain fd (the stream and migration
 * code): threads move bytes between one end of a socket pair (*PLAIN, for
 * the caller) and the TLS session on the network, one per direction.  The
 * caller's shutdown(SHUT_WR) or close() of *PLAIN becomes close_notify. */
struct ploop_tls_relay;
struct ploop_tls_relay *ploop_tls_relay_start(struct ploop_tls *t, int net_fd, int *plain, char *err,
                                              size_t errlen);
/* Why the session broke ("Connection timed out" of a cut link, the peer's
 * alert...), NULL while it is whole or ended cleanly: the caller's end only
 * sees EOF or EPIPE and may ask. */
const char *ploop_tls_relay_error(struct ploop_tls_relay *r);
/* Waits for both directions to end (the peer's close: at most WAIT_SEC
 * seconds after ours), frees the session and the relay; the caller closes
 * NET_FD.  0, or -1 when the session broke (message in ERR). */
int ploop_tls_relay_finish(struct ploop_tls_relay *r, unsigned wait_sec, char *err, size_t errlen);

#endif
