/* Batched asynchronous direct I/O (libaio) for the bulk paths: import,
 * export, merge, relocation. The request hot path uses plain pread/pwrite
 * from the caller's thread instead: one request, one syscall. */
#ifndef PLOOP_IO_H
#define PLOOP_IO_H

#include <libaio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libploop.h"

struct ploop_aio {
  io_context_t ctx;
  unsigned depth, n;
  unsigned inflight; /* streaming use: started and not yet reaped */
  struct iocb *cbs;
  struct iocb **ptrs;
  struct io_event *events;
  const char **paths;
};

int aio_init(struct ploop_aio *a, unsigned depth);
void aio_destroy(struct ploop_aio *a);
/* Queue a read or write; nothing is submitted until aio_run. */
void aio_queue(struct ploop_aio *a, int fd, const char *path, void *buf, size_t len, uint64_t off, int write);
/* Submit everything queued and wait for all of it. Short reads (EOF) are
 * zero-filled; short writes are errors. */
int aio_run(struct ploop_aio *a);

/* Streaming use: each of the DEPTH slots holds one request at a time and is
 * reused as soon as it completes, so the queue never drains between
 * batches. aio_start prepares SLOT's request; aio_reap submits what was
 * started, waits for at least one completion and fills SLOTS/FAILED
 * (DEPTH entries each) with the finished ones. Returns their count (0 when
 * nothing is in flight), -1 if waiting itself failed. Short reads are
 * zero-filled; a failed request's error is set (the first of a call). Do
 * not mix with aio_queue/aio_run on the same context. */
void aio_start(struct ploop_aio *a, unsigned slot, int fd, const char *path, void *buf, size_t len, uint64_t off,
               int write);
int aio_reap(struct ploop_aio *a, unsigned *slots, bool *failed);

/* fdatasync N FDs, up to 8 at once, so their latencies overlap. */
int sync_all(const int *fds, const char *const *paths, unsigned n);

#endif
