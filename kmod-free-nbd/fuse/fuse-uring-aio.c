/* The ring's READs and WRITEs on a disk whose store has its own
 * asynchronous I/O (Ceph RBD: librbd aio) and no fd to map: started from
 * the serving thread, their completions collected in the thread's aio
 * queue, whose eventfd the ring polls (TAG_AIO), and answered from the
 * serving thread.  No worker thread and no sleep per request. */
#include "fuse-uring-int.h"
#include "libploop.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

/* Completions taken per reap call; more wait for the next round. */
#define REAP_BATCH 32
/* A FLUSH waits at most this long for the aio writes before it (a store
 * that never answers fails its writes by then: librbd times out). */
#define DRAIN_MAX_MS 60000

static void arm_poll(struct ring_thread *rt)
{
  struct io_uring_sqe *sqe = ring_get_sqe(&rt->ring);
  io_uring_prep_poll_add(sqe, ploop_aio_queue_fd(rt->aq), POLLIN);
  io_uring_sqe_set_data64(sqe, TAG_AIO);
}

int ring_aio_setup(struct ring_thread *rt)
{
  rt->aq = ploop_aio_queue_new();
  if (!rt->aq)
    return -ENOMEM;
  arm_poll(rt);
  return 0;
}

void ring_aio_free(struct ring_thread *rt)
{
  /* A librbd thread may still hold a record while I/O is in flight (a
   * thread that left serve() early): then the queue stays. */
  if (rt->aq && rt->io_inflight == 0)
    ploop_aio_queue_free(rt->aq);
  rt->aq = NULL;
}

static void write_done(struct fs_uring *u, unsigned slot)
{
  if (atomic_fetch_sub(&u->aio_writes[slot], 1) == 1 && atomic_load(&u->aio_waiting)) {
    pthread_mutex_lock(&u->aio_lock);
    pthread_cond_broadcast(&u->aio_cond);
    pthread_mutex_unlock(&u->aio_lock);
  }
}

void ring_aio_reap(struct ring_thread *rt)
{
  void *tags[REAP_BATCH];
  int res[REAP_BATCH];
  int n;
  do {
    n = ploop_aio_queue_reap(rt->aq, tags, res, REAP_BATCH);
    for (int i = 0; i < n; i++) {
      struct ring_ent *e = tags[i];
      struct fs_req *r = &e->req;
      rt->io_inflight--;
      if (e->io_write)
        write_done(rt->u, e->aio_slot);
      r->pending = false;
      e->step = STEP_ANSWER;
      e->io_done(e->io_arg, r, res[i] < 0 ? res[i] : (int)r->io_len);
      ring_advance(rt, e);
    }
  } while (n == REAP_BATCH);
  /* One-shot: armed again after the reap, so a completion pushed in
   * between leaves the eventfd readable and the poll fires at once. */
  arm_poll(rt);
}

int fs_submit_aio(struct fs_req *r, bool write, size_t len, uint64_t off, fs_io_done_fn done, void *arg)
{
  if (!r->ring_hdr || r->may_block)
    return 0;
  struct ring_ent *e = (struct ring_ent *)((char *)r - offsetof(struct ring_ent, req));
  struct ring_thread *rt = e->rt;
  struct fs_uring *u = rt->u;
  if (!rt->aq)
    return 0;
  unsigned slot = 0;
  if (write) {
    slot = atomic_load(&u->aio_epoch) & 1;
    atomic_fetch_add(&u->aio_writes[slot], 1);
  }
  /* Set before the start: the completion is reaped on this thread only,
   * after the handler returned, but E must say what it waits for. */
  e->io_write = write;
  e->aio_slot = slot;
  e->io_done = done;
  e->io_arg = arg;
  r->io_len = len;
  r->io_segs = 1;
  void *buf = write ? (void *)r->data : r->out;
  int rc = ploop_disk_aio_start(u->aio_disk, rt->aq, write, buf, len, off, e);
  if (rc <= 0) {
    if (write)
      write_done(u, slot);
    return rc < 0 ? -(ploop_get_errno() > 0 ? ploop_get_errno() : EIO) : 0;
  }
  r->pending = true;
  e->step = STEP_AIO;
  rt->io_inflight++;
  ring_count(&rt->aio);
  return 1;
}

void fs_uring_aio_drain(struct fs_uring *u)
{
  if (!u || !u->aio_disk)
    return;
  pthread_mutex_lock(&u->aio_lock);
  /* New writes count in the other slot from here on: this waits only for
   * those started before, so a steady stream of writes cannot starve it. */
  unsigned slot = atomic_fetch_add(&u->aio_epoch, 1) & 1;
  atomic_store(&u->aio_waiting, true);
  struct timespec end;
  clock_gettime(CLOCK_REALTIME, &end);
  end.tv_sec += DRAIN_MAX_MS / 1000;
  while (atomic_load(&u->aio_writes[slot]) != 0)
    if (pthread_cond_timedwait(&u->aio_cond, &u->aio_lock, &end) == ETIMEDOUT)
      break;
  atomic_store(&u->aio_waiting, false);
  pthread_mutex_unlock(&u->aio_lock);
}
