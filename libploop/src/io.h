/* Batched asynchronous direct I/O (libaio) for the bulk paths: import,
 * export, merge, relocation. The request hot path uses plain pread/pwrite
 * from the caller's thread instead: one request, one syscall. */
#ifndef PLOOP_IO_H
#define PLOOP_IO_H

#include <libaio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libploop.h"

struct ploop_aio {
  io_context_t ctx;
  unsigned depth, n;
  unsigned ctx_depth; /* what io_setup was asked for: a reused context may hold more than DEPTH */
  unsigned inflight; /* streaming use: started and not yet reaped */
  struct iocb *cbs;
  struct iocb **ptrs;
  struct io_event *events;
  const char **paths;
  /* Requests on a store without an fd run at once, or on the store's own
   * asynchronous I/O (store_ops.aio) whose completions come on its
   * threads; their results wait here, under SMU. */
  unsigned *done_slots;
  bool *done_failed;
  unsigned n_done;
  int sync_err;
  struct store_req *sreqs; /* DEPTH: by slot (streaming) or in queue order (batch) */
  unsigned store_n;        /* batch: requests queued on the store this run */
  unsigned store_inflight; /* under SMU */
  int store_errno;         /* the first failure's, reported by the caller's thread */
  const char *store_err_path;
  uint64_t store_err_off;
  bool store_err_write;
  pthread_mutex_t smu;
  pthread_cond_t scv;
};

struct store_obj;
struct store_req;

int aio_init(struct ploop_aio *a, unsigned depth);
void aio_destroy(struct ploop_aio *a);
/* Queue a read or write; nothing is submitted until aio_run. */
void aio_queue(struct ploop_aio *a, int fd, const char *path, void *buf, size_t len, uint64_t off, int write);
/* Submit everything queued and wait for all of it. Short reads (EOF) are
 * zero-filled; short writes are errors. */
int aio_run(struct ploop_aio *a);
/* aio_queue / aio_start of a delta's bytes: libaio on its fd where the
 * store has one, else the store's own I/O (done at once, reported by
 * aio_run / aio_reap like the others). */
void aio_queue_obj(struct ploop_aio *a, struct store_obj *o, void *buf, size_t len, uint64_t off, int write);
void aio_start_obj(struct ploop_aio *a, unsigned slot, struct store_obj *o, void *buf, size_t len,
                   uint64_t off, int write);

/* Streaming use: each of the DEPTH slots holds one request at a time and is
 * reused as soon as it completes, so the queue never drains between
 * batches. aio_start prepares SLOT's request; aio_reap submits what was
 * started, waits for at least one completion and fills SLOTS/FAILED
 * (DEPTH entries each) with the finished ones. Returns their count (0 when
 * nothing is in flight), -1 if waiting itself failed. Short reads are
 * zero-filled; a failed request's error is set (the first of a call). Do
 * not mix with aio_queue/aio_run on the same context. */
void aio_start(struct ploop_aio *a, unsigned slot, int fd, const char *path, void *buf, size_t len,
               uint64_t off, int write);
int aio_reap(struct ploop_aio *a, unsigned *slots, bool *failed);
/* aio_reap without the wait: submits what was started and returns the
 * completions already there (0 when none). */
int aio_poll(struct ploop_aio *a, unsigned *slots, bool *failed);

/* Writeback of a file written through the page cache, started by a thread
 * beside the copy loop that writes it. sync_file_range blocks while the
 * disk's queue is full, and a loop blocked there stops issuing its reads
 * (the 1 GiB merge on a busy host spent 2.2 s of its 4.7 s in it). The
 * loop reports what it wrote; every WB_KICK_BYTES the thread starts
 * writeback of the whole file (and with DROP then drops the pages already
 * written back). The loop waits only when WB_LAG_BYTES are written and not
 * yet handed to writeback, which bounds the dirty pages it leaves. Without
 * a thread (pthread_create failed) the kicks run inline, as before. */
#define WB_KICK_BYTES (32u << 20)
#define WB_LAG_BYTES (256u << 20)
struct wb_kicker {
  int fd;
  bool started, drop, threaded, stop;
  uint64_t written, asked, kicked; /* bytes: reported, handed to the thread, writeback started */
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};
void wb_kicker_start(struct wb_kicker *k, int fd, bool drop);
void wb_kicker_wrote(struct wb_kicker *k, uint64_t bytes);
/* Waits for the kick in progress; the final fsync is the caller's. A
 * kicker never started (zeroed) or already stopped is left as it is. */
void wb_kicker_stop(struct wb_kicker *k);

/* fdatasync N FDs, up to 8 at once, so their latencies overlap. A negative
 * fd (a descriptor a store replaces itself) is skipped. */
int sync_all(const int *fds, const char *const *paths, unsigned n);

#endif
