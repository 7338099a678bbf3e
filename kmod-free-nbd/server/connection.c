/* Life of one client connection (handshake, transmission, teardown), the
 * registry of live connections used to stop them all on shutdown, and the
 * whole-buffer socket I/O both phases use. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "ploop-tls.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER;
static struct conn *reg_head;
static unsigned reg_count;

/* How long a client may sit in the handshake without sending anything. */
#define HANDSHAKE_TIMEOUT_SEC 30

/* The end of a TLS connection, whoever ends it (the client's DISC, ABORT or
 * EOF, an error, --idle-timeout, shutdown): our close_notify, so that the
 * client sees a clean end and not a truncation, then its own close read
 * away for a moment, so that our close does not reset the connection under
 * its close_notify.  A client that is gone or stuck costs at most ~2 s of
 * this connection's thread. */
#define TLS_CLOSE_WAIT_SEC 1
static void tls_close(struct conn *c) {
  struct timeval tv = {.tv_sec = TLS_CLOSE_WAIT_SEC};
  setsockopt(c->wfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (ploop_tls_bye(c->tls) < 0) return;
  shutdown(c->wfd, SHUT_WR);
  setsockopt(c->rfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  for (int i = 0; i < 64 && ploop_tls_read(c->tls, buf, sizeof buf) > 0; i++) {}
}

ssize_t conn_read_some(struct conn *c, void *buf, size_t len) {
  return c->tls ? ploop_tls_read(c->tls, buf, len) : read(c->rfd, buf, len);
}

size_t conn_pending(struct conn *c) { return c->tls ? ploop_tls_pending(c->tls) : 0; }

int conn_read(struct conn *c, void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = conn_read_some(c, p, len);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
    } else if (n == 0) {
      errno = 0;
      return -1;
    } else if (errno != EINTR || atomic_load(&c->closing)) {
      return -1;
    }
  }
  return 0;
}

int conn_discard(struct conn *c, uint64_t len) {
  char sink[65536];
  while (len > 0) {
    size_t n = len < sizeof sink ? (size_t)len : sizeof sink;
    if (conn_read(c, sink, n) < 0) return -1;
    len -= n;
  }
  return 0;
}

int conn_writev(struct conn *c, struct iovec *iov, int iovcnt) {
  if (c->tls) return ploop_tls_writev(c->tls, iov, iovcnt);
  while (iovcnt > 0) {
    ssize_t n = writev(c->wfd, iov, iovcnt > IOV_MAX ? IOV_MAX : iovcnt);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
      n -= (ssize_t)iov->iov_len;
      iov++;
      iovcnt--;
    }
    if (iovcnt > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + n;
      iov->iov_len -= (size_t)n;
    }
  }
  return 0;
}

int conn_write(struct conn *c, const void *buf, size_t len) {
  struct iovec iov = {(void *)buf, len};
  return conn_writev(c, &iov, 1);
}

static void set_recv_timeout(int fd, int sec) {
  struct timeval tv = {.tv_sec = sec};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* fails harmlessly on pipes */
}

void conn_serve(int rfd, int wfd) {
  struct conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(rfd);
    if (wfd != rfd) close(wfd);
    return;
  }
  c->rfd = rfd;
  c->wfd = wfd;
  pthread_mutex_init(&c->rlock, NULL);
  pthread_mutex_init(&c->wlock, NULL);
  pthread_mutex_init(&c->wk_lock, NULL);
  c->reader = pthread_self();
  atomic_store(&c->reader_valid, true);

  pthread_mutex_lock(&reg_lock);
  c->next = reg_head;
  if (reg_head) reg_head->prev = c;
  reg_head = c;
  reg_count++;
  bool stopping = atomic_load(&g_stopping);
  pthread_mutex_unlock(&reg_lock);

  set_recv_timeout(rfd, HANDSHAKE_TIMEOUT_SEC);
  if (!stopping && handshake(c) == 0) {
    set_recv_timeout(rfd, 0);
    nbd_debug("client attached to %s%s%s", c->exp.de->name, c->exp.snap ? "@" : "",
              c->exp.snap ? c->exp.snap->guid : "");
    atomic_fetch_add(&c->exp.de->connections, 1);
    transmission(c);
    atomic_fetch_sub(&c->exp.de->connections, 1);
  }
  if (c->exp.disk) export_release(&c->exp);

  pthread_mutex_lock(&reg_lock);
  pthread_mutex_lock(&c->wk_lock);
  atomic_store(&c->reader_valid, false);
  pthread_mutex_unlock(&c->wk_lock);
  if (c->prev) c->prev->next = c->next;
  else reg_head = c->next;
  if (c->next) c->next->prev = c->prev;
  reg_count--;
  pthread_cond_broadcast(&reg_cond);
  pthread_mutex_unlock(&reg_lock);

  if (c->tls) tls_close(c);
  ploop_tls_free(c->tls);
  close(rfd);
  if (wfd != rfd) close(wfd);
  free(c->dirty_map);
  pthread_mutex_destroy(&c->rlock);
  pthread_mutex_destroy(&c->wlock);
  pthread_mutex_destroy(&c->wk_lock);
  free(c);
}

static void *conn_thread(void *arg) {
  int fd = (int)(intptr_t)arg;
  conn_serve(fd, fd);
  return NULL;
}

int conn_spawn(int fd) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int r = pthread_create(&t, &a, conn_thread, (void *)(intptr_t)fd);
  pthread_attr_destroy(&a);
  if (r != 0) {
    errno = r;
    return -1;
  }
  return 0;
}

unsigned conns_active(void) {
  pthread_mutex_lock(&reg_lock);
  unsigned n = reg_count;
  pthread_mutex_unlock(&reg_lock);
  return n;
}

/* Requests in flight finish and are answered; a thread blocked reading the
 * next request is woken by shutdown() (sockets) or a signal (pipes).  A
 * client that stops reading its replies would block a worker forever, so
 * after a grace period the write side is cut too. */
#define SHUTDOWN_GRACE_ROUNDS 30 /* x 100 ms */
void conns_shutdown_and_wait(void) {
  atomic_store(&g_stopping, true);
  pthread_mutex_lock(&reg_lock);
  for (unsigned round = 0; reg_count > 0; round++) {
    for (struct conn *c = reg_head; c; c = c->next) {
      atomic_store(&c->closing, true);
      shutdown(c->rfd, round < SHUTDOWN_GRACE_ROUNDS ? SHUT_RD : SHUT_RDWR);
      pthread_mutex_lock(&c->wk_lock);
      if (atomic_load(&c->reader_valid)) pthread_kill(c->reader, SIGUSR1);
      pthread_mutex_unlock(&c->wk_lock);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&reg_cond, &reg_lock, &ts);
  }
  pthread_mutex_unlock(&reg_lock);
}
