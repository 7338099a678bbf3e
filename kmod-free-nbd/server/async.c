/* READ and WRITE kept in flight on a disk whose store has its own
 * asynchronous I/O (Ceph RBD): the request thread that parsed one starts it
 * (ploop_disk_aio_start) and goes back to the socket for the next, so a
 * connection's queue depth is the client's, not the number of threads; one
 * completion thread per connection, woken by the queue's eventfd, answers
 * them. What cannot go that way (an allocation, a hole, FUA, a request
 * across clusters) runs on the request threads as before. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"

struct async_req {
  struct request r;
  struct payload_buf *pb;
  uint8_t *buf;
  struct async_req *next; /* free list */
};

struct conn_async {
  struct ploop_aio_queue *q;
  int stop_fd; /* eventfd: async_end asks the thread to finish */
  pthread_t thread;
  atomic_uint inflight;
  atomic_bool stopping;
  pthread_mutex_t lock; /* the free list */
  struct async_req *free;
};

#define REAP_BATCH 64u

/* A finished request's buffer and count go back. */
static void release(struct conn *c, struct async_req *a)
{
  budget_release(c, a->pb);
  atomic_fetch_sub(&c->inflight, 1);
  struct conn_async *as = c->async;
  pthread_mutex_lock(&as->lock);
  a->next = as->free;
  as->free = a;
  pthread_mutex_unlock(&as->lock);
  atomic_fetch_sub(&as->inflight, 1);
}

/* The replies of N finished requests, the successful ones in one write
 * under wlock (at depth a wake-up usually finds several). */
static void finish(struct conn *c, struct async_req **reqs, const int *results, unsigned n)
{
  struct {
    union {
      struct nbd_simple_reply s;
      struct nbd_structured_reply h;
    };
    uint64_t off;
  } hdr[REAP_BATCH];
  struct iovec iov[3 * REAP_BATCH];
  int k = 0;
  for (unsigned i = 0; i < n; i++) {
    const struct request *r = &reqs[i]->r;
    if (results[i] < 0) {
      nbd_log("%s: request %u at %llu+%u failed: %s", c->exp.de->name, r->type, (unsigned long long)r->offset,
              r->count, strerror(-results[i]));
      reply_error(c, r, r->cookie, nbd_errno(-results[i]));
      continue;
    }
    if (r->type == NBD_CMD_READ && c->structured) {
      /* One data chunk: the range is in one delta, there is no hole in it. */
      chunk_header(&hdr[i].h, r->cookie, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA, 8 + r->count);
      hdr[i].off = nbd_be64(r->offset);
      iov[k++] = (struct iovec){&hdr[i].h, sizeof hdr[i].h};
      iov[k++] = (struct iovec){&hdr[i].off, 8};
    } else {
      hdr[i].s = (struct nbd_simple_reply){.magic = nbd_be32(NBD_SIMPLE_REPLY_MAGIC), .cookie = r->cookie};
      iov[k++] = (struct iovec){&hdr[i].s, sizeof hdr[i].s};
    }
    if (r->type == NBD_CMD_READ)
      iov[k++] = (struct iovec){reqs[i]->buf, r->count};
  }
  if (k > 0) {
    pthread_mutex_lock(&c->wlock);
    int w = conn_writev(c, iov, k);
    pthread_mutex_unlock(&c->wlock);
    if (w < 0) { /* the client is gone: stop reading from it too */
      atomic_store(&c->closing, true);
      shutdown(c->rfd, SHUT_RDWR);
    }
  }
  for (unsigned i = 0; i < n; i++)
    release(c, reqs[i]);
}

static void *completion_thread(void *arg)
{
  struct conn *c = arg;
  struct conn_async *as = c->async;
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGHUP);
  sigaddset(&s, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  void *tags[REAP_BATCH];
  int results[REAP_BATCH];
  for (;;) {
    int n = ploop_aio_queue_reap(as->q, tags, results, REAP_BATCH);
    if (n > 0) {
      finish(c, (struct async_req **)tags, results, (unsigned)n);
      continue;
    }
    if (atomic_load(&as->stopping) && atomic_load(&as->inflight) == 0)
      break;
    struct pollfd p[2] = {{.fd = ploop_aio_queue_fd(as->q), .events = POLLIN},
                          {.fd = as->stop_fd, .events = POLLIN}};
    /* Once stopping, STOP_FD stays readable: only the queue is waited for. */
    if (poll(p, atomic_load(&as->stopping) ? 1 : 2, -1) < 0 && errno != EINTR)
      usleep(1000); /* cannot happen with valid fds; do not spin */
  }
  return NULL;
}

void async_begin(struct conn *c)
{
  struct conn_async *as = calloc(1, sizeof *as);
  if (!as)
    return;
  as->q = ploop_aio_queue_new();
  as->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&as->lock, NULL);
  c->async = as;
  if (!as->q || as->stop_fd < 0 || pthread_create(&as->thread, NULL, completion_thread, c) != 0) {
    nbd_debug("asynchronous I/O not available: %s", as->q ? strerror(errno) : ploop_get_error());
    c->async = NULL;
    ploop_aio_queue_free(as->q);
    if (as->stop_fd >= 0)
      close(as->stop_fd);
    pthread_mutex_destroy(&as->lock);
    free(as);
  }
}

bool async_start(struct conn *c, const struct request *r, struct payload_buf *pb, uint8_t *buf)
{
  struct conn_async *as = c->async;
  /* FUA takes a flush after the write: the synchronous path has it. */
  if (!(r->type == NBD_CMD_READ || (r->type == NBD_CMD_WRITE && !(r->flags & NBD_CMD_FLAG_FUA))))
    return false;
  pthread_mutex_lock(&as->lock);
  struct async_req *a = as->free;
  if (a)
    as->free = a->next;
  pthread_mutex_unlock(&as->lock);
  if (!a && !(a = malloc(sizeof *a)))
    return false;
  *a = (struct async_req){.r = *r, .pb = pb, .buf = buf};
  atomic_fetch_add(&as->inflight, 1);
  int rc = ploop_disk_aio_start(c->exp.disk, as->q, r->type == NBD_CMD_WRITE, buf, r->count, r->offset, a);
  if (rc == 1)
    return true;
  /* Not this way (or an error the synchronous path reports the same). */
  atomic_fetch_sub(&as->inflight, 1);
  pthread_mutex_lock(&as->lock);
  a->next = as->free;
  as->free = a;
  pthread_mutex_unlock(&as->lock);
  return false;
}

void async_end(struct conn *c)
{
  struct conn_async *as = c->async;
  if (!as)
    return;
  atomic_store(&as->stopping, true);
  uint64_t one = 1;
  if (write(as->stop_fd, &one, sizeof one) < 0) {
    /* cannot fail on a fresh eventfd */
  }
  pthread_join(as->thread, NULL);
  c->async = NULL;
  ploop_aio_queue_free(as->q);
  close(as->stop_fd);
  for (struct async_req *a = as->free, *n; a; a = n) {
    n = a->next;
    free(a);
  }
  pthread_mutex_destroy(&as->lock);
  free(as);
}
