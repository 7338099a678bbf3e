/* Our own FUSE session for a small fixed filesystem: mount(2), INIT, and
 * two transports that deliver requests to one handler -- FUSE over io_uring
 * (per-CPU queues) when the kernel offers it, /dev/fuse reads and writes
 * otherwise.  Contract between fuse-export.c, fuse-session.c, fuse-uring.c. */
#ifndef PLOOP_FUSE_SESSION_H
#define PLOOP_FUSE_SESSION_H

#include <linux/fuse.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest READ/WRITE payload (max_write, 256 pages) and the alignment of
 * every buffer a payload lands in, so that O_DIRECT below needs no copy. */
#define FS_IO_MAX (1u << 20)
#define FS_IO_ALIGN 4096u

struct ploop_fuse_uring_req_header;
struct fs_session;

/* One request, whichever transport brought it. */
struct fs_req {
  struct fs_session *s;
  const struct fuse_in_header *in;
  const void *arg;  /* the opcode's fixed argument (fuse_read_in, ...) */
  const void *data; /* what follows it: a WRITE's bytes, a LOOKUP's name */
  size_t data_len;
  /* FS_IO_MAX bytes, FS_IO_ALIGN-aligned: a reply's payload may be built
   * here in place (a READ reads into it).  It may be the same memory as
   * DATA, so use it only after DATA is consumed. */
  void *out;
  struct ploop_fuse_uring_req_header *ring_hdr; /* NULL: /dev/fuse */
  /* False on a ring's serving thread, which serves many requests at once:
   * the handler must not block there.  It answers at once (fs_reply),
   * hands the request to a worker that may block (fs_defer), or has the
   * ring do its file I/O (fs_submit_io). */
  bool may_block;
  bool replied;
  bool pending; /* fs_defer or fs_submit_io: answered later */
  size_t io_len;    /* what fs_submit_io asked for: bytes ... */
  unsigned io_segs; /* ... in so many pieces */
  uint64_t handler_data; /* the handler's, kept until the answer */
};

/* Answers R: ERROR is 0 or a positive errno; ARG/LEN the reply payload. */
void fs_reply(struct fs_req *r, int error, const void *arg, size_t len);

typedef void (*fs_handler_fn)(void *opaque, struct fs_req *r);

/* Only where !r->may_block: the handler runs again for R on a worker
 * thread, with may_block set. */
void fs_defer(struct fs_req *r);
/* One piece of a request's file I/O: LEN bytes of FD at OFF, to or from
 * the payload at BUF_OFF. */
struct fs_io_seg {
  int fd;
  uint64_t off;
  size_t buf_off, len;
};
#define FS_IO_SEGS 4
/* Only where !r->may_block: the ring reads the N (<= FS_IO_SEGS) pieces
 * into r->out (WRITE: writes them from r->data), then calls DONE(ARG, R,
 * RES) on the serving thread, RES being the bytes moved or the first
 * -errno.  DONE must not block; it answers or calls fs_defer. */
typedef void (*fs_io_done_fn)(void *arg, struct fs_req *r, int res);
void fs_submit_io(struct fs_req *r, const struct fs_io_seg *seg, unsigned n, bool write,
                  fs_io_done_fn done, void *arg);

/* Only where !r->may_block, on a session started with an aio_disk: starts
 * R's READ (into r->out) or WRITE (from r->data) of LEN bytes at OFF with
 * the disk's own asynchronous I/O (ploop_disk_aio_start), then calls
 * DONE(ARG, R, RES) on the serving thread, RES being LEN or -errno.  1:
 * started; 0: not this way (no aio here, a hole, an allocation, a range
 * across clusters: answer otherwise); -errno: refused. */
int fs_submit_aio(struct fs_req *r, bool write, size_t len, uint64_t off, fs_io_done_fn done,
                  void *arg);
/* Waits for the aio writes started before (a FLUSH, before it flushes the
 * disk); may block. */
void fs_aio_drain(struct fs_session *s);

struct ploop_disk;
struct fs_session_params {
  const char *mountpoint;
  const char *source; /* shown in /proc/mounts */
  bool readonly;
  struct ploop_disk *aio_disk; /* NULL, or a disk the rings do aio on (fs_submit_aio) */
  fs_handler_fn handler;
  void *opaque;
};

/* Mounts and starts serving; NULL on error (ploop_get_error()). */
struct fs_session *fs_session_start(const struct fs_session_params *p);
/* What a session has served so far, for INFO and tests. */
struct fs_stats {
  const char *transport; /* "io_uring" or "/dev/fuse" */
  uint64_t served;       /* io_uring only: requests answered through the ring */
  uint64_t ring_io;      /* ... whose data moved by the ring's own reads/writes */
  uint64_t deferred;     /* ... handed to a worker (may block) */
  uint64_t aio;          /* ... whose data moved by the disk's aio (fs_submit_aio) */
};
void fs_session_stats(const struct fs_session *s, struct fs_stats *st);
/* Drops the kernel's cached attributes of inode INO. */
void fs_session_inval_inode(struct fs_session *s, uint64_t ino);
/* Detaches the mount, ends the connection (a user still holding the file
 * gets I/O errors), waits for the serving threads and frees S.  False when
 * a thread is stuck: then S (and the handler's opaque) stays allocated. */
bool fs_session_stop(struct fs_session *s);

/* Between the session and its transports. */
void fs_dispatch(struct fs_session *s, struct fs_req *r);
void fs_thread_started(struct fs_session *s);
void fs_thread_exited(struct fs_session *s);
/* Called by each serving thread first: lets fs_session_stop's signal
 * interrupt its waits. */
void fs_thread_init(const char *name);
/* True once fs_session_stop gave up waiting for the kernel to end the
 * connection: a thread whose wait was interrupted then exits. */
bool fs_session_stopping(const struct fs_session *s);
int fs_session_fd(const struct fs_session *s);
/* Waits up to MS milliseconds until *COUNT (guarded by LOCK, signalled on
 * COND) is 0; says whether it is. */
bool fs_wait_zero(pthread_mutex_t *lock, pthread_cond_t *cond, const unsigned *count, int ms);

struct fs_uring;
/* One serving thread per online CPU, DEPTH ring entries on its CPU's queue
 * (one on each offline CPU's), pinned to that CPU when PIN; WORKERS threads
 * for what may block.  NULL, or not fs_uring_ok(), when the kernel refused
 * (then /dev/fuse serves); WHY says why. */
struct fs_uring *fs_uring_start(struct fs_session *s, unsigned depth, unsigned workers, bool pin,
                                struct ploop_disk *aio_disk, char *why, size_t why_len);
bool fs_uring_ok(const struct fs_uring *u);
/* Sends SIG to every ring thread (see fs_session_stopping). */
void fs_uring_kick(struct fs_uring *u, int sig);
/* After the connection ended: joins when DETACH is false, then frees.
 * False when a thread was left running (then U stays allocated). */
bool fs_uring_free(struct fs_uring *u, bool detach);
/* Adds the ring's counters to ST. */
void fs_uring_stats(const struct fs_uring *u, struct fs_stats *st);
/* fs_aio_drain's work on the rings (fuse-uring-aio.c). */
void fs_uring_aio_drain(struct fs_uring *u);

#endif
