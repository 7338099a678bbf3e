/* Our own FUSE session for a small fixed filesystem: mount(2), INIT, and
 * two transports that deliver requests to one handler -- FUSE over io_uring
 * (per-CPU queues) when the kernel offers it, /dev/fuse reads and writes
 * otherwise.  Contract between fuse-export.c, fuse-session.c, fuse-uring.c. */
#ifndef PLOOP_FUSE_SESSION_H
#define PLOOP_FUSE_SESSION_H

#include <linux/fuse.h>
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
  bool replied;
};

/* Answers R: ERROR is 0 or a positive errno; ARG/LEN the reply payload. */
void fs_reply(struct fs_req *r, int error, const void *arg, size_t len);

typedef void (*fs_handler_fn)(void *opaque, struct fs_req *r);

struct fs_session_params {
  const char *mountpoint;
  const char *source; /* shown in /proc/mounts */
  bool readonly;
  fs_handler_fn handler;
  void *opaque;
};

/* Mounts and starts serving; NULL on error (ploop_get_error()). */
struct fs_session *fs_session_start(const struct fs_session_params *p);
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

struct fs_uring;
/* Registers ring entries on every CPU's queue (THREADS threads, each with
 * DEPTH entries, pinned to the queue's CPU when PIN).  NULL, or not
 * fs_uring_ok(), when the kernel refused (then /dev/fuse serves); WHY says
 * why. */
struct fs_uring *fs_uring_start(struct fs_session *s, unsigned threads, unsigned depth, bool pin,
                                char *why, size_t why_len);
bool fs_uring_ok(const struct fs_uring *u);
/* Sends SIG to every ring thread (see fs_session_stopping). */
void fs_uring_kick(struct fs_uring *u, int sig);
/* After the connection ended: joins when DETACH is false, then frees. */
void fs_uring_free(struct fs_uring *u, bool detach);
/* Requests the ring has answered so far. */
uint64_t fs_uring_served(const struct fs_uring *u);

#endif
