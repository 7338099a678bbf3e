/* FUSE over io_uring with asynchronous backend I/O.  One serving thread per
 * online CPU owns an io_uring holding the ring entries (header + 1 MiB
 * payload each) of its queues.  A READ or WRITE the disk maps to one file
 * range goes out as IORING_OP_READ/WRITE on that same ring, and its
 * completion commits the answer: no thread hand-off and no sleep per
 * request.  What may block (allocation, copy-up, fsync, discard) goes to a
 * pool of worker threads, which hand the entry back with IORING_OP_MSG_RING.
 * A disk with no fd to map (RBD) uses its own aio instead (fuse-uring-aio.c). */
#include "fuse-uring-int.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#define WORKERS_AT_START 2

void fs_uring_stats(const struct fs_uring *u, struct fs_stats *st)
{
  for (unsigned i = 0; i < u->nthreads; i++) {
    st->served += atomic_load_explicit(&u->t[i].served, memory_order_relaxed);
    st->ring_io += atomic_load_explicit(&u->t[i].ring_io, memory_order_relaxed);
    st->deferred += atomic_load_explicit(&u->t[i].deferred, memory_order_relaxed);
    st->aio += atomic_load_explicit(&u->t[i].aio, memory_order_relaxed);
  }
}

bool fs_uring_ok(const struct fs_uring *u) { return u->failed == 0; }

static struct ring_ent *ent_of(struct fs_req *r)
{
  return (struct ring_ent *)((char *)r - offsetof(struct ring_ent, req));
}

/* Parses a cpulist file ("0-3,8") into SET (MAX bits); the highest CPU + 1. */
static unsigned read_cpulist(const char *path, bool *set, unsigned max)
{
  unsigned top = 0;
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  unsigned a, b;
  int c;
  while (fscanf(f, "%u", &a) == 1) {
    b = a;
    c = fgetc(f);
    if (c == '-' && fscanf(f, "%u", &b) == 1)
      c = fgetc(f);
    for (unsigned i = a; i <= b && i < max; i++)
      if (set)
        set[i] = true;
    if (b + 1 > top)
      top = b + 1;
    if (c != ',')
      break;
  }
  fclose(f);
  return top;
}

/* The kernel wants a queue for every possible CPU (it picks the queue of
 * the CPU the request comes from), not only the online ones. */
static unsigned possible_cpus(void)
{
  unsigned n = read_cpulist("/sys/devices/system/cpu/possible", NULL, 0);
  if (n == 0) {
    long c = sysconf(_SC_NPROCESSORS_CONF);
    n = c > 0 ? (unsigned)c : 1;
  }
  return n;
}

struct io_uring_sqe *ring_get_sqe(struct io_uring *ring)
{
  struct io_uring_sqe *sqe;
  /* The SQ has room for every entry's one operation, so this loops only if
   * completions were not yet reaped; submitting makes room. */
  while (!(sqe = io_uring_get_sqe(ring)))
    io_uring_submit(ring);
  return sqe;
}

static void prep_cmd(struct ring_thread *rt, struct ring_ent *e, uint32_t cmd)
{
  struct io_uring_sqe *sqe = ring_get_sqe(&rt->ring);
  /* A 128-byte SQE (SQE128): 64 + the command area. */
  memset((void *)sqe, 0, 2 * sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fs_session_fd(rt->u->s);
  sqe->cmd_op = cmd;
  sqe->user_data = (uintptr_t)e | TAG_FUSE;
  struct ploop_fuse_uring_cmd_req *req = (void *)sqe->cmd;
  req->qid = e->qid;
  if (cmd == PLOOP_FUSE_IO_URING_CMD_REGISTER) {
    sqe->addr = (uintptr_t)e->iov;
    sqe->len = 2;
  } else {
    req->commit_id = e->commit_id;
  }
  e->last_cmd = cmd;
}

void fs_defer(struct fs_req *r)
{
  if (!r->ring_hdr || r->may_block)
    return; /* the caller may block already */
  r->pending = true;
  ent_of(r)->step = STEP_WORKER;
}

void fs_submit_io(struct fs_req *r, const struct fs_io_seg *seg, unsigned n, bool write,
                  fs_io_done_fn done, void *arg)
{
  struct ring_ent *e = ent_of(r);
  r->pending = true;
  r->io_len = 0;
  r->io_segs = n;
  for (unsigned i = 0; i < n; i++) {
    e->io_seg[i] = seg[i];
    r->io_len += seg[i].len;
  }
  e->step = STEP_IO;
  e->io_write = write;
  e->io_done = done;
  e->io_arg = arg;
}

static bool start_worker(struct fs_uring *u, struct worker *w);

static void enqueue_worker(struct fs_uring *u, struct ring_ent *e)
{
  e->next = NULL;
  pthread_mutex_lock(&u->wlock);
  *u->wtail = e;
  u->wtail = &e->next;
  u->wqueued++;
  /* A worker that fails to start leaves the entry to the running ones. */
  bool grow = u->wqueued > u->widle && u->wstarted < u->nworkers && !u->wstop;
  unsigned slot = grow ? u->wstarted++ : 0;
  pthread_cond_signal(&u->wcond);
  pthread_mutex_unlock(&u->wlock);
  if (grow)
    start_worker(u, &u->w[slot]);
}

/* Takes the entry on to what the handler left it waiting for: an I/O on
 * this ring, a worker, or the commit of its answer.  Only here does an
 * entry leave the serving thread, after every use of it is done. */
void ring_advance(struct ring_thread *rt, struct ring_ent *e)
{
  struct fs_req *r = &e->req;
  if (r->pending && e->step == STEP_IO) {
    e->io_left = r->io_segs;
    e->io_res = 0;
    for (unsigned i = 0; i < r->io_segs; i++) {
      const struct fs_io_seg *g = &e->io_seg[i];
      struct io_uring_sqe *sqe = ring_get_sqe(&rt->ring);
      if (e->io_write)
        io_uring_prep_write(sqe, g->fd, (const char *)r->data + g->buf_off, (unsigned)g->len, g->off);
      else
        io_uring_prep_read(sqe, g->fd, (char *)r->out + g->buf_off, (unsigned)g->len, g->off);
      io_uring_sqe_set_data64(sqe, (uintptr_t)e | TAG_IO);
      rt->io_inflight++;
    }
    ring_count(&rt->ring_io);
    return;
  }
  if (r->pending && e->step == STEP_AIO)
    return; /* started by fs_submit_aio: its completion comes as TAG_AIO */
  if (r->pending && e->step == STEP_WORKER) {
    ring_count(&rt->deferred);
    enqueue_worker(rt->u, e);
    return;
  }
  /* Every request through the ring needs its commit, answered or not. */
  if (!r->replied)
    fs_reply(r, ENOSYS, NULL, 0);
  ring_count(&rt->served);
  prep_cmd(rt, e, PLOOP_FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
}

static void handle(struct ring_thread *rt, struct ring_ent *e)
{
  struct ploop_fuse_uring_req_header *h = e->hdr;
  e->commit_id = h->ring_ent_in_out.commit_id;
  e->step = STEP_ANSWER;
  e->req = (struct fs_req){.s = rt->u->s,
                           .in = (const struct fuse_in_header *)h->in_out,
                           .arg = h->op_in,
                           .data = e->payload,
                           .data_len = h->ring_ent_in_out.payload_sz,
                           .out = e->payload,
                           .ring_hdr = h};
  if (e->req.data_len > FS_IO_MAX)
    fs_reply(&e->req, EINVAL, NULL, 0);
  else
    fs_dispatch(rt->u->s, &e->req);
  ring_advance(rt, e);
}

static void io_completed(struct ring_thread *rt, struct ring_ent *e, int res)
{
  rt->io_inflight--;
  if (e->io_res >= 0)
    e->io_res = res < 0 ? res : e->io_res + res;
  if (--e->io_left > 0)
    return;
  e->req.pending = false;
  e->step = STEP_ANSWER;
  e->io_done(e->io_arg, &e->req, e->io_res);
  ring_advance(rt, e);
}

/* Ring and buffers, then REGISTER of every entry; 0 or a negative errno.
 * A refusal comes back at once (the command is issued inline); success
 * stays pending until a request arrives. */
static int setup(struct ring_thread *rt)
{
  /* At most one operation per entry is in flight (a FUSE command or a
   * backend I/O), plus one MSG_RING completion per entry from a worker,
   * plus the aio queue's poll. */
  struct io_uring_params params = {.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE,
                                   .cq_entries = 4 * rt->nent};
  /* Completions run only when this thread waits for them, not by
   * interrupting it (one thread submits, one waits: ours): measured on
   * tmpfs, 8.2 -> 7.1 us of daemon CPU per 4 KiB request, +6% IOPS. */
  params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  int rc = io_uring_queue_init_params(2 * rt->nent, &rt->ring, &params);
  if (rc == -EINVAL) { /* a kernel without them */
    params = (struct io_uring_params){.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE,
                                      .cq_entries = 4 * rt->nent};
    rc = io_uring_queue_init_params(2 * rt->nent, &rt->ring, &params);
  }
  if (rc < 0)
    return rc;
  rt->ring_ok = true;
  /* Untouched pages cost nothing: memory stays as resident as before. */
  size_t len = (size_t)rt->nent * (FS_IO_ALIGN + FS_IO_MAX);
  void *area = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED)
    return -ENOMEM;
  rt->area = area;
  rt->area_len = len;
  for (unsigned i = 0; i < rt->nent; i++) {
    struct ring_ent *e = &rt->ent[i];
    e->rt = rt;
    e->payload = (char *)area + (size_t)i * FS_IO_MAX;
    e->hdr = (void *)((char *)area + (size_t)rt->nent * FS_IO_MAX + (size_t)i * FS_IO_ALIGN);
    e->iov[0] = (struct iovec){.iov_base = e->hdr, .iov_len = sizeof(*e->hdr)};
    e->iov[1] = (struct iovec){.iov_base = e->payload, .iov_len = FS_IO_MAX};
    prep_cmd(rt, e, PLOOP_FUSE_IO_URING_CMD_REGISTER);
  }
  if (rt->u->aio_disk && (rc = ring_aio_setup(rt)) < 0)
    return rc;
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
    /* Stopping: leave once no backend I/O of ours is in flight (each holds
     * a pin on the disk that only its completion releases). */
    if (fs_session_stopping(rt->u->s) && rt->io_inflight == 0)
      break;
    int rc = io_uring_submit_and_wait(&rt->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
      break;
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&rt->ring, head, cqe)
    {
      struct ring_ent *e = (void *)(uintptr_t)(cqe->user_data & ~(uint64_t)TAG_MASK);
      unsigned tag = cqe->user_data & TAG_MASK;
      int res = cqe->res;
      seen++;
      if (tag == TAG_IO) {
        io_completed(rt, e, res);
      } else if (tag == TAG_AIO) {
        ring_aio_reap(rt);
      } else if (tag == TAG_BACK) {
        e->req.pending = false; /* a worker answered it */
        e->step = STEP_ANSWER;
        ring_advance(rt, e);
      } else if (res == 0) {
        handle(rt, e);
      } else if (res == -EINTR || res == -EAGAIN) {
        prep_cmd(rt, e, e->last_cmd);
      } else {
        dead++; /* ENOTCONN, ECONNABORTED: the connection ended */
      }
    }
    io_uring_cq_advance(&rt->ring, seen);
  }
}

static void *ring_thread(void *arg)
{
  struct ring_thread *rt = arg;
  fs_thread_init("ploop-fuse-ring");
  if (rt->u->pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rt->cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
  }
  int err = setup(rt);
  report(rt->u, err);
  if (!err)
    serve(rt);
  fs_thread_exited(rt->u->s);
  return NULL;
}

static void *worker_thread(void *arg)
{
  struct worker *w = arg;
  struct fs_uring *u = w->u;
  fs_thread_init("ploop-fuse-work");
  pthread_mutex_lock(&u->wlock);
  for (;;) {
    while (!u->whead && !u->wstop) {
      u->widle++;
      pthread_cond_wait(&u->wcond, &u->wlock);
      u->widle--;
    }
    struct ring_ent *e = u->whead;
    if (!e)
      break; /* stopping, and nothing left to answer */
    u->wqueued--;
    u->whead = e->next;
    if (!u->whead)
      u->wtail = &u->whead;
    pthread_mutex_unlock(&u->wlock);

    struct fs_req *r = &e->req;
    r->pending = false;
    r->may_block = true;
    fs_dispatch(u->s, r);
    if (!r->replied)
      fs_reply(r, EIO, NULL, 0);
    /* Back to the thread that owns the entry's ring: it commits. */
    struct io_uring_sqe *sqe = ring_get_sqe(&w->ring);
    io_uring_prep_msg_ring(sqe, e->rt->ring.ring_fd, 0, (uintptr_t)e | TAG_BACK, 0);
    io_uring_sqe_set_data64(sqe, 0);
    struct io_uring_cqe *cqe;
    if (io_uring_submit_and_wait(&w->ring, 1) >= 0 && io_uring_peek_cqe(&w->ring, &cqe) == 0)
      io_uring_cqe_seen(&w->ring, cqe);
    /* A failed MSG_RING means the serving thread is gone (the connection
     * ended); nobody waits for this answer then. */

    pthread_mutex_lock(&u->wlock);
  }
  u->walive--;
  pthread_cond_broadcast(&u->wcond);
  pthread_mutex_unlock(&u->wlock);
  return NULL;
}

/* W's ring (for MSG_RING back to the serving threads) and thread. */
static bool start_worker(struct fs_uring *u, struct worker *w)
{
  w->u = u;
  w->ring_ok = io_uring_queue_init(4, &w->ring, 0) == 0;
  if (!w->ring_ok)
    return false;
  pthread_mutex_lock(&u->wlock);
  u->walive++;
  pthread_mutex_unlock(&u->wlock);
  if (pthread_create(&w->tid, NULL, worker_thread, w) != 0) {
    pthread_mutex_lock(&u->wlock);
    u->walive--;
    pthread_mutex_unlock(&u->wlock);
    return false;
  }
  w->started = true;
  return true;
}

struct fs_uring *fs_uring_start(struct fs_session *s, unsigned depth, unsigned workers, bool pin,
                                struct ploop_disk *aio_disk, char *why, size_t why_len)
{
  struct fs_uring *u = calloc(1, sizeof(*u));
  if (!u) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  u->s = s;
  u->pin = pin;
  u->aio_disk = aio_disk;
  pthread_mutex_init(&u->aio_lock, NULL);
  pthread_cond_init(&u->aio_cond, NULL);
  u->nqueues = possible_cpus();
  bool *online = calloc(u->nqueues, sizeof(bool));
  unsigned *cpu_thread = calloc(u->nqueues, sizeof(unsigned));
  if (!online || !cpu_thread) {
    free(online);
    free(cpu_thread);
    free(u);
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  read_cpulist("/sys/devices/system/cpu/online", online, u->nqueues);
  bool any = false;
  for (unsigned q = 0; q < u->nqueues; q++)
    any |= online[q];
  if (!any)
    memset(online, true, u->nqueues); /* no cpulist: every possible CPU counts */
  /* One serving thread per online CPU (at most 256), serving that CPU's
   * queue with DEPTH entries: a request waits for an entry of its own CPU's
   * queue, never another's.  The other queues get one entry each, spread
   * over the threads: the kernel needs them registered but sends them
   * nothing while their CPU is offline. */
  for (unsigned q = 0; q < u->nqueues; q++)
    if (online[q] && u->nthreads < 256)
      cpu_thread[q] = u->nthreads++;
    else
      online[q] = false;
  for (unsigned q = 0, k = 0; q < u->nqueues; q++)
    if (!online[q])
      cpu_thread[q] = k++ % u->nthreads;
  u->nworkers = workers ? workers : 1;
  pthread_mutex_init(&u->lock, NULL);
  pthread_cond_init(&u->cond, NULL);
  pthread_mutex_init(&u->wlock, NULL);
  pthread_cond_init(&u->wcond, NULL);
  u->wtail = &u->whead;
  u->t = calloc(u->nthreads, sizeof(*u->t));
  u->w = calloc(u->nworkers, sizeof(*u->w));
  bool ok = u->t && u->w;
  for (unsigned q = 0; ok && q < u->nqueues; q++) {
    struct ring_thread *rt = &u->t[cpu_thread[q]];
    rt->nent += online[q] ? depth : 1;
    if (online[q])
      rt->cpu = q;
  }
  for (unsigned i = 0; ok && i < u->nthreads; i++) {
    u->t[i].u = u;
    u->t[i].ent = calloc(u->t[i].nent, sizeof(struct ring_ent));
    ok = u->t[i].ent != NULL;
    u->t[i].nent = 0; /* counted again as the entries get their queues */
  }
  for (unsigned q = 0; ok && q < u->nqueues; q++) {
    struct ring_thread *rt = &u->t[cpu_thread[q]];
    for (unsigned n = online[q] ? depth : 1; n > 0; n--)
      rt->ent[rt->nent++].qid = (uint16_t)q;
  }
  free(online);
  free(cpu_thread);
  for (; ok && u->wstarted < u->nworkers && u->wstarted < WORKERS_AT_START; u->wstarted++)
    ok = start_worker(u, &u->w[u->wstarted]);
  if (!ok) {
    fs_uring_free(u, false);
    snprintf(why, why_len, "out of memory, or io_uring refused a worker's ring");
    return NULL;
  }
  unsigned created = 0;
  for (unsigned i = 0; i < u->nthreads; i++) {
    struct ring_thread *rt = &u->t[i];
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

/* Asks the workers to finish what they hold and exit; waits up to MS. */
static bool stop_workers(struct fs_uring *u, int ms)
{
  pthread_mutex_lock(&u->wlock);
  u->wstop = true;
  pthread_cond_broadcast(&u->wcond);
  pthread_mutex_unlock(&u->wlock);
  return fs_wait_zero(&u->wlock, &u->wcond, &u->walive, ms);
}

bool fs_uring_free(struct fs_uring *u, bool detach)
{
  if (!u)
    return true;
  /* Serving threads first (they may still hand entries to workers), then
   * the workers, then the rings the workers send to. */
  for (unsigned i = 0; u->t && i < u->nthreads; i++) {
    struct ring_thread *rt = &u->t[i];
    if (rt->started) {
      if (detach)
        pthread_detach(rt->tid);
      else
        pthread_join(rt->tid, NULL);
      rt->started = false;
    }
  }
  bool workers_done = u->w ? stop_workers(u, detach ? 0 : 2000) : true;
  for (unsigned i = 0; u->w && i < u->nworkers; i++)
    if (u->w[i].started) {
      if (workers_done)
        pthread_join(u->w[i].tid, NULL);
      else
        pthread_detach(u->w[i].tid);
    }
  if (detach || !workers_done)
    return false; /* a stuck thread may still use it all */
  for (unsigned i = 0; u->t && i < u->nthreads; i++) {
    struct ring_thread *rt = &u->t[i];
    if (rt->ring_ok)
      io_uring_queue_exit(&rt->ring);
    ring_aio_free(rt);
    if (rt->area)
      munmap(rt->area, rt->area_len);
    free(rt->ent);
  }
  for (unsigned i = 0; u->w && i < u->nworkers; i++)
    if (u->w[i].ring_ok)
      io_uring_queue_exit(&u->w[i].ring);
  free(u->t);
  free(u->w);
  pthread_mutex_destroy(&u->lock);
  pthread_cond_destroy(&u->cond);
  pthread_mutex_destroy(&u->wlock);
  pthread_cond_destroy(&u->wcond);
  pthread_mutex_destroy(&u->aio_lock);
  pthread_cond_destroy(&u->aio_cond);
  free(u);
  return true;
}
