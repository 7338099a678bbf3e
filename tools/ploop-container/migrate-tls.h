/* TLS beneath the migration protocol (`migrate`, `receive --listen`,
 * `migrate --resolve`): the TCP connection carries a TLS session and the
 * protocol code, ploop_send and ploop_receive keep a plain fd, one end of
 * a relay (tls/ploop-tls.h).  formats/migration-protocol.md, "TLS". */
#ifndef CT_MIGRATE_TLS_H
#define CT_MIGRATE_TLS_H

#include <getopt.h>
#include <stdbool.h>

#include "ploop-tls.h"

/* The options as `ploop receive` and ploop-nbd spell them (nbdkit's). */
struct mig_tls_args {
  const char *mode; /* --tls=off|on|require; NULL: require when credentials are given */
  struct ploop_tls_opts o;
};
enum { MIG_OPT_TLS = 1100, MIG_OPT_TLS_PSK, MIG_OPT_TLS_CERTS, MIG_OPT_TLS_VERIFY };
#define MIG_TLS_LONGOPTS                                                                         \
  {"tls", required_argument, NULL, MIG_OPT_TLS},                                                \
      {"tls-psk", required_argument, NULL, MIG_OPT_TLS_PSK},                                    \
      {"tls-certificates", required_argument, NULL, MIG_OPT_TLS_CERTS},                         \
      {"tls-verify-peer", no_argument, NULL, MIG_OPT_TLS_VERIFY}
/* True when C was one of those (taken into A). */
bool mig_tls_option(struct mig_tls_args *a, int c, const char *arg);
/* Checks the combination and loads the credentials now (a bad file fails
 * before any connection); from then on every mig_connect (SERVER false) or
 * mig_tls_accept (SERVER true) of this process uses them.  0 or -1. */
int mig_tls_setup(const struct mig_tls_args *a, bool server);

/* Client: the handshake on the connected FD (ADDR_PORT names the host the
 * destination's certificate must carry), then FD's place is taken by the
 * plain end of a relay, with FD's timeouts.  Without TLS: FD.  -1 with the
 * error set (FD closed) on failure. */
int mig_tls_connect(int fd, const char *addr_port, unsigned timeout_s);
/* Server, after accept: a source that opens with a TLS handshake gets one
 * (--tls=on or require); a plain one is served plain with --tls=on and
 * refused with --tls=require (an ERROR frame tells it why).  Returns the fd
 * to serve, or -1 with the error set (FD closed). */
int mig_tls_accept(int fd, unsigned timeout_s);
/* The TCP socket beneath FD (FD itself when it is not a relay's end): the
 * one for TCP options, keepalive and the user timeout. */
int mig_tls_net_fd(int fd);
/* Why the session under FD broke ("TLS: Connection timed out", the peer's
 * alert...), NULL when FD is not a relay's end or the session is whole:
 * the plain end itself only sees EOF or EPIPE. */
const char *mig_tls_link_error(int fd);
/* close() for a migration connection: with TLS our last bytes go out, then
 * close_notify; the peer's close is waited for briefly, so that our last
 * message is not lost to a reset. */
void mig_close(int fd);

#endif
