/* Batched asynchronous direct I/O (libaio) for the bulk paths: import,
 * export, merge, relocation. The request hot path uses plain pread/pwrite
 * from the caller's thread instead: one request, one syscall. */
#ifndef PLOOP_IO_H
#define PLOOP_IO_H

#include <libaio.h>
#include <stddef.h>
#include <stdint.h>

struct ploop_aio {
  io_context_t ctx;
  unsigned depth, n;
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

/* fdatasync up to 8 FDs at once, so their latencies overlap. */
int sync_all(const int *fds, const char *const *paths, unsigned n);

#endif
