/* TCP ends of `ploop send --to` and `ploop receive --listen`. */
#ifndef PLOOP_CLI_NET_H
#define PLOOP_CLI_NET_H

#include <getopt.h>
#include <stdbool.h>

#include "ploop-tls.h"

/* "HOST:PORT" or "[V6]:PORT". Both return an fd, or an exit code (> 0)
 * after printing one line; OPT names the option for messages. */
int net_connect(const char *opt, const char *addr, int *fd);
/* Binds, waits for one connection, closes the listening socket. */
int net_accept_one(const char *opt, const char *addr, int *fd);

/* TLS on the stream's connection (tls/ploop-tls.h): send is the client
 * (--tls-psk FILE: its first identity; --tls-certificates DIR: ca-cert.pem
 * checks the receiver, client-cert.pem + client-key.pem when present),
 * receive the server (server-cert.pem, server-key.pem; --tls-verify-peer
 * requires a client certificate signed by ca-cert.pem). */
struct net_tls {
  struct ploop_tls_opts o;
  struct ploop_tls_creds *creds; /* the session uses them until the end */
  struct ploop_tls_relay *relay;
  int net_fd;
};
/* Option values for getopt_long tables of send and receive. */
enum { NET_OPT_TLS_PSK = 1000, NET_OPT_TLS_CERTS, NET_OPT_TLS_VERIFY };
#define NET_TLS_LONGOPTS                                                                       \
  {"tls-psk", required_argument, NULL, NET_OPT_TLS_PSK},                                      \
      {"tls-certificates", required_argument, NULL, NET_OPT_TLS_CERTS},                       \
      {"tls-verify-peer", no_argument, NULL, NET_OPT_TLS_VERIFY}
/* Takes one of those options; false when C is another one. */
bool net_tls_option(struct net_tls *t, int c, const char *arg);
/* Checks the combination (NET_OPT: the option of the address, NULL when
 * there is no connection) and loads the credentials; 0 or an exit code
 * after one line. */
int net_tls_check(struct net_tls *t, bool server, const char *net_opt);
/* With TLS asked for: handshake on *FD (connected to ADDR), then *FD
 * becomes the plain end of a relay; without: nothing.  0 or an exit code. */
int net_tls_start(struct net_tls *t, bool server, const char *opt, const char *addr, int *fd);
/* After the caller's last byte: close_notify, wait for the peer to close,
 * close the plain end and the connection. 0 or an exit code (printed
 * unless OPT is NULL). */
int net_tls_finish(struct net_tls *t, const char *opt, int plain_fd);

#endif
