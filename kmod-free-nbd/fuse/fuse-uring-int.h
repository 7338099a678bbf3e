/* What fuse-uring.c and fuse-uring-aio.c share: a ring thread, its entries
 * and the steps an entry goes through. */
#ifndef PLOOP_FUSE_URING_INT_H
#define PLOOP_FUSE_URING_INT_H

#include "fuse-abi.h"
#include "fuse-session.h"

#include <liburing.h>
#include <stdatomic.h>
#include <sys/uio.h>

struct ploop_aio_queue;

/* The low bits of a CQE's user_data say what completed for the entry. */
/* TAG_AIO: the ring thread's aio queue has completions (no entry). */
enum { TAG_FUSE = 0, TAG_IO = 1, TAG_BACK = 2, TAG_AIO = 3, TAG_MASK = 3 };

/* What the entry waits for once the handler (or an I/O callback) returns. */
/* STEP_AIO: the disk's own asynchronous I/O (fuse-uring-aio.c). */
enum step { STEP_ANSWER, STEP_IO, STEP_WORKER, STEP_AIO };

struct ring_thread;

struct ring_ent {
  struct fs_req req; /* valid from the request's arrival to its commit */
  struct ring_thread *rt;
  struct ploop_fuse_uring_req_header *hdr;
  void *payload;
  struct iovec iov[2];
  uint64_t commit_id;
  uint32_t last_cmd;
  uint16_t qid;
  enum step step;
  /* STEP_IO: the backend I/O the handler asked for, what of it is still
   * in flight, and the bytes moved so far (or the first -errno). */
  struct fs_io_seg io_seg[FS_IO_SEGS];
  bool io_write;
  unsigned io_left;
  int io_res;
  fs_io_done_fn io_done;
  void *io_arg;
  unsigned aio_slot;     /* STEP_AIO write: which flush epoch counts it */
  struct ring_ent *next; /* in the workers' queue */
};

struct ring_thread {
  struct fs_uring *u;
  unsigned cpu; /* whose queue it serves with all but one-entry queues */
  unsigned nent;
  struct ring_ent *ent;
  /* Every entry's header page and payload, carved from one mapping: 2 x 32
   * separate 1 MiB allocations were 64 mmaps at each attach and 64 munmaps,
   * each a TLB shootdown across our threads, at each detach. */
  void *area;
  size_t area_len;
  struct io_uring ring;
  bool ring_ok;
  pthread_t tid;
  bool started;
  unsigned io_inflight; /* the ring's own I/O and the disk's aio */
  /* The disk's aio (NULL on a file disk): completions wake the ring
   * through a poll of its eventfd (TAG_AIO). */
  struct ploop_aio_queue *aq;
  /* Per thread (a shared counter would bounce between CPUs): requests
   * answered, those whose data moved by the ring's own I/O, those handed to
   * a worker. */
  _Atomic uint64_t served, ring_io, deferred, aio;
};

struct worker {
  struct fs_uring *u;
  struct io_uring ring; /* only for MSG_RING to the serving threads */
  bool ring_ok;
  pthread_t tid;
  bool started;
};

struct fs_uring {
  struct fs_session *s;
  unsigned nqueues, nthreads, nworkers;
  bool pin;
  struct ring_thread *t;
  struct worker *w;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned reported, failed;
  int first_err;
  /* The workers' queue of entries, and how many workers are alive. */
  pthread_mutex_t wlock;
  pthread_cond_t wcond;
  struct ring_ent *whead, **wtail;
  bool wstop;
  unsigned walive;
  /* Workers start on demand: a few at first (each is a thread and an
   * io_uring to make at every attach and tear down at every detach, while
   * a container's start needs one or two), another whenever more entries
   * wait than workers idle, up to NWORKERS. */
  unsigned wstarted, widle, wqueued;
  /* The disk whose aio the rings use (NULL: none), and the aio writes in
   * flight counted per flush epoch: a FLUSH moves new writes to the other
   * slot and waits for its own to empty (fs_uring_aio_drain). */
  struct ploop_disk *aio_disk;
  _Atomic unsigned aio_writes[2];
  _Atomic unsigned aio_epoch;
  _Atomic bool aio_waiting;
  pthread_mutex_t aio_lock; /* one FLUSH drains at a time */
  pthread_cond_t aio_cond;
};

/* Only the owning thread writes its counters. */
static inline void ring_count(_Atomic uint64_t *c)
{
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

struct io_uring_sqe *ring_get_sqe(struct io_uring *ring);
/* Takes E on to what it waits for next (fuse-uring.c). */
void ring_advance(struct ring_thread *rt, struct ring_ent *e);

/* fuse-uring-aio.c: the ring thread's aio queue and its poll (0 or
 * -errno), the completions of a TAG_AIO, and the end. */
int ring_aio_setup(struct ring_thread *rt);
void ring_aio_reap(struct ring_thread *rt);
void ring_aio_free(struct ring_thread *rt);

#endif
