/* FUSE over io_uring: each serving thread owns a small io_uring and a few
 * ring entries (header + 1 MiB payload buffer) registered on one CPU's
 * queue; one io_uring_enter both answers a request and waits for the next,
 * and payloads sit page-aligned, ready for O_DIRECT. */
#include "fuse-abi.h"
#include "fuse-session.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

struct ring_ent {
  struct ploop_fuse_uring_req_header *hdr;
  void *payload;
  struct iovec iov[2];
  uint64_t commit_id;
  uint32_t last_cmd;
};

struct ring_thread {
  struct fs_uring *u;
  unsigned qid;
  unsigned nent;
  struct ring_ent *ent;
  struct io_uring ring;
  bool ring_ok;
  pthread_t tid;
  bool started;
  _Atomic uint64_t served; /* per thread: a shared counter would bounce between CPUs */
};

struct fs_uring {
  struct fs_session *s;
  unsigned nqueues, nthreads, depth;
  bool pin;
  struct ring_thread *t;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned reported, failed;
  int first_err;
};

uint64_t fs_uring_served(const struct fs_uring *u)
{
  uint64_t n = 0;
  for (unsigned i = 0; i < u->nthreads; i++)
    n += atomic_load_explicit(&u->t[i].served, memory_order_relaxed);
  return n;
}
bool fs_uring_ok(const struct fs_uring *u) { return u->failed == 0; }

/* The kernel wants a queue for every possible CPU (it picks the queue of
 * the CPU the request comes from), not only the online ones. */
static unsigned possible_cpus(void)
{
  unsigned max = 0;
  FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
  if (f) {
    unsigned a, b;
    int c;
    while (fscanf(f, "%u", &a) == 1) {
      b = a;
      c = fgetc(f);
      if (c == '-' && fscanf(f, "%u", &b) == 1)
        c = fgetc(f);
      if (b + 1 > max)
        max = b + 1;
      if (c != ',')
        break;
    }
    fclose(f);
  }
  if (max == 0) {
    long n = sysconf(_SC_NPROCESSORS_CONF);
    max = n > 0 ? (unsigned)n : 1;
  }
  return max;
}

static void prep_cmd(struct ring_thread *rt, struct ring_ent *e, uint32_t cmd)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&rt->ring);
  /* Cannot be NULL: the ring has a slot per entry and an entry has at most
   * one command outstanding.  A 128-byte SQE (SQE128): 64 + the command area. */
  if (!sqe)
    abort();
  memset((void *)sqe, 0, 2 * sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fs_session_fd(rt->u->s);
  sqe->cmd_op = cmd;
  sqe->user_data = (uintptr_t)e;
  struct ploop_fuse_uring_cmd_req *req = (void *)sqe->cmd;
  req->qid = (uint16_t)rt->qid;
  if (cmd == PLOOP_FUSE_IO_URING_CMD_REGISTER) {
    sqe->addr = (uintptr_t)e->iov;
    sqe->len = 2;
  } else {
    req->commit_id = e->commit_id;
  }
  e->last_cmd = cmd;
}

static void handle(struct ring_thread *rt, struct ring_ent *e)
{
  struct ploop_fuse_uring_req_header *h = e->hdr;
  e->commit_id = h->ring_ent_in_out.commit_id;
  struct fs_req r = {.s = rt->u->s,
                     .in = (const struct fuse_in_header *)h->in_out,
                     .arg = h->op_in,
                     .data = e->payload,
                     .data_len = h->ring_ent_in_out.payload_sz,
                     .out = e->payload,
                     .ring_hdr = h};
  if (r.data_len > FS_IO_MAX)
    fs_reply(&r, EINVAL, NULL, 0);
  else
    fs_dispatch(rt->u->s, &r);
  /* Every request through the ring needs its commit, answered or not. */
  if (!r.replied)
    fs_reply(&r, ENOSYS, NULL, 0);
  atomic_store_explicit(&rt->served, atomic_load_explicit(&rt->served, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  prep_cmd(rt, e, PLOOP_FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
}

/* Ring and buffers, then REGISTER of every entry; 0 or a negative errno.
 * A refusal comes back at once (the command is issued inline); success
 * stays pending until a request arrives. */
static int setup(struct ring_thread *rt)
{
  struct io_uring_params params = {.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE,
                                   .cq_entries = 2 * rt->nent};
  int rc = io_uring_queue_init_params(rt->nent, &rt->ring, &params);
  if (rc < 0)
    return rc;
  rt->ring_ok = true;
  for (unsigned i = 0; i < rt->nent; i++) {
    struct ring_ent *e = &rt->ent[i];
    if (posix_memalign((void **)&e->hdr, FS_IO_ALIGN, FS_IO_ALIGN) != 0 ||
        posix_memalign(&e->payload, FS_IO_ALIGN, FS_IO_MAX) != 0)
      return -ENOMEM;
    memset(e->hdr, 0, FS_IO_ALIGN);
    e->iov[0] = (struct iovec){.iov_base = e->hdr, .iov_len = sizeof(*e->hdr)};
    e->iov[1] = (struct iovec){.iov_base = e->payload, .iov_len = FS_IO_MAX};
    prep_cmd(rt, e, PLOOP_FUSE_IO_URING_CMD_REGISTER);
  }
  rc = io_uring_submit(&rt->ring);
  if (rc < 0)
    return rc;
  struct io_uring_cqe *cqe;
  if (io_uring_peek_cqe(&rt->ring, &cqe) == 0 && cqe->res < 0)
    return cqe->res; /* e.g. EOPNOTSUPP: io_uring disabled in the fuse module */
  return 0;
}

static void report(struct fs_uring *u, int err)
{
  pthread_mutex_lock(&u->lock);
  u->reported++;
  if (err) {
    u->failed++;
    if (!u->first_err)
      u->first_err = -err;
  }
  pthread_cond_broadcast(&u->cond);
  pthread_mutex_unlock(&u->lock);
}

static void serve(struct ring_thread *rt)
{
  unsigned dead = 0;
  while (dead < rt->nent) {
    int rc = io_uring_submit_and_wait(&rt->ring, 1);
    if (fs_session_stopping(rt->u->s) || (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY))
      break;
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&rt->ring, &cqe) == 0) {
      struct ring_ent *e = io_uring_cqe_get_data(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(&rt->ring, cqe);
      if (res == 0) {
        handle(rt, e);
        /* Another request is already here: send this answer now rather than
         * after that one, whose backend I/O may block for a while. */
        if (io_uring_cq_ready(&rt->ring) > 0)
          io_uring_submit(&rt->ring);
      } else if (res == -EINTR || res == -EAGAIN) {
        prep_cmd(rt, e, e->last_cmd);
      } else {
        dead++; /* ENOTCONN, ECONNABORTED: the connection ended */
      }
    }
  }
}

static void *ring_thread(void *arg)
{
  struct ring_thread *rt = arg;
  fs_thread_init("ploop-fuse-ring");
  if (rt->u->pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rt->qid, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
  }
  int err = setup(rt);
  report(rt->u, err);
  if (!err)
    serve(rt);
  fs_thread_exited(rt->u->s);
  return NULL;
}

struct fs_uring *fs_uring_start(struct fs_session *s, unsigned threads, unsigned depth, bool pin,
                                char *why, size_t why_len)
{
  struct fs_uring *u = calloc(1, sizeof(*u));
  if (!u) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  u->s = s;
  u->nqueues = possible_cpus();
  u->depth = depth ? depth : 1;
  u->pin = pin;
  /* At least two threads per queue (a request waits for an entry of the
   * queue of its own CPU, never another's); spread evenly. */
  u->nthreads = threads < 2 * u->nqueues ? 2 * u->nqueues : threads;
  if (u->nthreads > 1024) /* still at least one per queue */
    u->nthreads = u->nqueues > 1024 ? u->nqueues : 1024;
  pthread_mutex_init(&u->lock, NULL);
  pthread_cond_init(&u->cond, NULL);
  u->t = calloc(u->nthreads, sizeof(*u->t));
  if (!u->t) {
    fs_uring_free(u, false);
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  unsigned created = 0;
  for (unsigned i = 0; i < u->nthreads; i++) {
    struct ring_thread *rt = &u->t[i];
    rt->u = u;
    rt->qid = i % u->nqueues;
    rt->nent = u->depth;
    rt->ent = calloc(rt->nent, sizeof(*rt->ent));
    if (!rt->ent)
      break;
    fs_thread_started(s);
    if (pthread_create(&rt->tid, NULL, ring_thread, rt) != 0) {
      fs_thread_exited(s);
      break;
    }
    rt->started = true;
    created++;
  }
  pthread_mutex_lock(&u->lock);
  while (u->reported < created)
    pthread_cond_wait(&u->cond, &u->lock);
  if (created < u->nthreads && !u->failed) {
    u->failed++;
    u->first_err = ENOMEM;
  }
  pthread_mutex_unlock(&u->lock);
  if (u->failed)
    snprintf(why, why_len, "ring entry registration: %s", strerror(u->first_err));
  return u;
}

void fs_uring_kick(struct fs_uring *u, int sig)
{
  for (unsigned i = 0; i < u->nthreads; i++)
    if (u->t[i].started)
      pthread_kill(u->t[i].tid, sig);
}

void fs_uring_free(struct fs_uring *u, bool detach)
{
  if (!u)
    return;
  for (unsigned i = 0; u->t && i < u->nthreads; i++) {
    struct ring_thread *rt = &u->t[i];
    if (rt->started) {
      if (detach) {
        pthread_detach(rt->tid);
        continue;
      }
      pthread_join(rt->tid, NULL);
    }
    if (rt->ring_ok)
      io_uring_queue_exit(&rt->ring);
    for (unsigned k = 0; rt->ent && k < rt->nent; k++) {
      free(rt->ent[k].hdr);
      free(rt->ent[k].payload);
    }
    free(rt->ent);
  }
  if (detach)
    return; /* a stuck thread may still use it */
  free(u->t);
  pthread_mutex_destroy(&u->lock);
  pthread_cond_destroy(&u->cond);
  free(u);
}
