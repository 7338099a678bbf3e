/* TLS beneath code written for a plain fd (ploop send/receive, migration):
 * two threads, one per direction, move bytes between a socket pair and the
 * session, so neither direction can stall the other. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ploop-tls.h"

struct ploop_tls_relay {
  struct ploop_tls *tls;
  int net, plain; /* plain: our end of the pair */
  pthread_t up, down;
  atomic_bool up_done, down_done;
  int up_err, down_err; /* errno of a broken direction, 0 */
  char up_msg[256], down_msg[256]; /* ploop_tls_relay_error's words */
};

#define RELAY_BUF (64u << 10)

/* Caller's bytes to the network; their end becomes close_notify + FIN. */
static void *relay_up(void *arg)
{
  struct ploop_tls_relay *r = arg;
  uint8_t *buf = malloc(RELAY_BUF);
  if (!buf)
    r->up_err = ENOMEM;
  while (buf) {
    ssize_t n = read(r->plain, buf, RELAY_BUF);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r->up_err = errno;
      break;
    }
    if (n == 0) {
      if (ploop_tls_bye(r->tls) < 0)
        r->up_err = errno;
      shutdown(r->net, SHUT_WR);
      break;
    }
    if (ploop_tls_write(r->tls, buf, (size_t)n) < 0) {
      r->up_err = errno;
      atomic_store(&r->up_done, true); /* before the caller can see it: it may ask why */
      shutdown(r->plain, SHUT_RD); /* the caller's writes fail instead of hanging */
      break;
    }
  }
  free(buf);
  atomic_store(&r->up_done, true);
  return NULL;
}

/* The network's bytes to the caller; the peer's end becomes EOF. */
static void *relay_down(void *arg)
{
  struct ploop_tls_relay *r = arg;
  uint8_t *buf = malloc(RELAY_BUF);
  if (!buf)
    r->down_err = ENOMEM;
  while (buf) {
    ssize_t n = ploop_tls_read(r->tls, buf, RELAY_BUF);
    /* EAGAIN: an SO_RCVTIMEO on the network fd ran out.  An idle link is
     * not a broken one (a migration idles during a CRIU dump): the caller's
     * own timeouts on its end decide, and keepalive finds a dead peer. */
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0) {
      if (n < 0)
        r->down_err = errno;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = send(r->plain, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0) {
        n = -1; /* the caller stopped reading: nothing more to deliver */
        break;
      }
      off += w;
    }
    if (n < 0)
      break;
  }
  free(buf);
  /* Done (and the errno) before the caller can see the end, so that it can
   * ask ploop_tls_relay_errno why; a broken session must not look like a
   * clean end to the caller. */
  atomic_store(&r->down_done, true);
  shutdown(r->plain, r->down_err ? SHUT_RDWR : SHUT_WR);
  return NULL;
}

struct ploop_tls_relay *ploop_tls_relay_start(struct ploop_tls *t, int net_fd, int *plain, char *err,
                                              size_t errlen)
{
  struct ploop_tls_relay *r = calloc(1, sizeof *r);
  int sp[2];
  if (!r || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
    snprintf(err, errlen, "TLS relay: %s", strerror(errno));
    free(r);
    return NULL;
  }
  int sz = 4 << 20;
  setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  r->tls = t;
  r->net = net_fd;
  r->plain = sp[1];
  if (pthread_create(&r->up, NULL, relay_up, r) != 0) {
    snprintf(err, errlen, "TLS relay: cannot start a thread");
    goto fail;
  }
  if (pthread_create(&r->down, NULL, relay_down, r) != 0) {
    snprintf(err, errlen, "TLS relay: cannot start a thread");
    shutdown(sp[0], SHUT_RDWR);
    pthread_join(r->up, NULL);
    goto fail;
  }
  *plain = sp[0];
  return r;
fail:
  close(sp[0]);
  close(sp[1]);
  free(r);
  return NULL;
}

static const char *describe(struct ploop_tls_relay *r, bool down, char *buf, size_t len)
{
  const char *e = ploop_tls_last_error(r->tls, down);
  snprintf(buf, len, "TLS: %s", e ? e : strerror(down ? r->down_err : r->up_err));
  return buf;
}

const char *ploop_tls_relay_error(struct ploop_tls_relay *r)
{
  /* Each direction's errno and message are written before its done flag. */
  if (atomic_load(&r->down_done) && r->down_err)
    return describe(r, true, r->down_msg, sizeof r->down_msg);
  if (atomic_load(&r->up_done) && r->up_err)
    return describe(r, false, r->up_msg, sizeof r->up_msg);
  return NULL;
}

static void wait_done(atomic_bool *done, unsigned ms)
{
  for (unsigned i = 0; i < ms / 10 && !atomic_load(done); i++)
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
}

int ploop_tls_relay_finish(struct ploop_tls_relay *r, unsigned wait_sec, char *err, size_t errlen)
{
  /* Ours first: everything the caller wrote goes out, then close_notify. */
  pthread_join(r->up, NULL);
  wait_done(&r->down_done, wait_sec * 1000);
  if (!atomic_load(&r->down_done))
    shutdown(r->net, SHUT_RDWR); /* the peer did not close: stop waiting */
  pthread_join(r->down, NULL);
  int e = r->up_err ? r->up_err : r->down_err;
  if (e)
    snprintf(err, errlen, "TLS: %s", strerror(e));
  close(r->plain);
  ploop_tls_free(r->tls);
  free(r);
  return e ? -1 : 0;
}
