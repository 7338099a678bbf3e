/* One NBD client connection: negotiated state, the fds, the reader and
 * writer locks, and the request threads serving it (connection.c). */
#ifndef PLOOP_NBD_CONN_H
#define PLOOP_NBD_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "nbd-protocol.h"
#include "server.h"

#define CONN_MAX_WORKERS 64u

struct ploop_tls;
struct conn_async;

/* A request in host byte order. */
struct request {
  uint16_t flags, type;
  uint64_t cookie, offset;
  uint32_t count;
};

struct conn {
  int rfd, wfd;
  struct ploop_tls *tls; /* after STARTTLS: every byte goes through it */
  struct conn *next, *prev; /* registry of live connections */

  /* Negotiated in the handshake. */
  bool no_zeroes;
  bool structured;
  bool block_size_requested; /* client promised to honour min/max */
  bool meta_base, meta_depth, meta_dirty; /* selected meta contexts */
  uint8_t *dirty_map;         /* ploop:dirty, copied at GO; NULL = all dirty */
  uint64_t dirty_clusters, dirty_cluster_bytes;
  char meta_export[NBD_MAX_STRING + 1]; /* export the contexts were set for */
  struct export_ref exp;
  uint16_t eflags;

  /* Transmission: the connection's threads take turns at the socket
   * (rlock): the holder parses one request from the shared read buffer,
   * takes its payload into its own buffer, lets go and runs it, in
   * parallel with the others; replies are written whole under wlock. */
  pthread_mutex_t rlock;
  struct {
    uint8_t *p;
    size_t pos, len;
  } rb;                       /* read-ahead of the request stream, under rlock */
  pthread_mutex_t wlock;
  atomic_bool closing;
  atomic_uint idle;           /* threads waiting for rlock */
  pthread_mutex_t wk_lock;    /* guards the fields below */
  pthread_t reader;           /* thread blocked reading, woken at shutdown */
  atomic_bool reader_valid;
  pthread_t workers[CONN_MAX_WORKERS];
  unsigned nworkers;
  bool no_more_workers;
  atomic_uint inflight;       /* requests read and not yet answered */
  uint64_t mem_in_use;        /* payload buffers held, under budget.c's lock */
  struct conn_async *async;   /* requests in flight on the store (async.c); NULL: none */
};

/* Whole-buffer socket I/O: 0 on success, -1 on EOF or error (errno set;
 * EOF gives errno 0).  Retries EINTR unless the connection is closing. */
int conn_read(struct conn *c, void *buf, size_t len);
int conn_discard(struct conn *c, uint64_t len);
/* Writes all of IOV; caller holds wlock. */
int conn_writev(struct conn *c, struct iovec *iov, int iovcnt);
int conn_write(struct conn *c, const void *buf, size_t len);
/* One read of up to LEN bytes (TLS or plain): > 0, 0 at EOF, -1 + errno. */
ssize_t conn_read_some(struct conn *c, void *buf, size_t len);
/* Bytes already read from the socket and decrypted, not yet taken. */
size_t conn_pending(struct conn *c);

/* ---- budget.c: payload buffers under the memory bounds ---- */
struct payload_buf;
/* A buffer of at least LEN (<= NBD_MAX_PAYLOAD) bytes, 4 KiB aligned, for
 * one request of C; waits while C's or the server's bound would be passed.
 * NULL when C is closing (or out of memory). */
struct payload_buf *budget_acquire(struct conn *c, size_t len);
uint8_t *budget_data(struct payload_buf *b);
void budget_release(struct conn *c, struct payload_buf *b);

/* Runs the transmission phase until the client disconnects (transmission.c). */
void transmission(struct conn *c);
/* Replies (transmission.c); each is written whole under wlock. */
uint32_t nbd_errno(int e);
int reply_simple(struct conn *c, uint64_t cookie, uint32_t err, void *data, size_t len);
int reply_error(struct conn *c, const struct request *r, uint64_t cookie, uint32_t err);
void chunk_header(struct nbd_structured_reply *h, uint64_t cookie, uint16_t flags, uint16_t type,
                  uint32_t len);

/* ---- async.c: READ and WRITE kept in flight on a store with its own
 * asynchronous I/O (ploop_disk_aio_start), answered by a completion
 * thread woken by the queue's eventfd ---- */
/* Sets C->async up (it stays NULL when that fails: all synchronous). */
void async_begin(struct conn *c);
/* Starts R (payload PB, data BUF) when it can go that way; true: PB and the
 * reply are the completion thread's now. */
bool async_start(struct conn *c, const struct request *r, struct payload_buf *pb, uint8_t *buf);
/* Waits for everything started, answers it, and stops the thread. */
void async_end(struct conn *c);

#endif
