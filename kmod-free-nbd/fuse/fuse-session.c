/* Our own FUSE session (no libfuse): mounts with mount(2), answers INIT,
 * serves requests from /dev/fuse on a pool of threads, and hands over to
 * FUSE over io_uring (fuse-uring.c) when the kernel offers it. */
#include "fuse-session.h"
#include "fuse-abi.h"
/* ploop_set_error(): failures are reported the libploop way. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Kept low: the loop device is the only user; its asynchronous direct I/O
 * arrives as background requests, and more than 128 in flight only queue. */
#define MAX_BACKGROUND 128
#define CONGESTION_THRESHOLD 96
/* /dev/fuse path: enough blocked readers for a queue depth of 32 plus
 * flushes (libploop's calls block, so readers = backend I/O in flight).
 * io_uring path (fuse-uring.c): one serving thread per online CPU with 32
 * entries on its CPU's queue, which a loop device's queue depth of 32 can
 * fill from one CPU, and whose mapped reads and writes are in flight on the
 * serving thread's own ring; 16 workers for what blocks (allocating writes,
 * copy-up, fsync, discard), the backend I/O in flight on that path. */
#define DEV_THREADS 48
#define URING_DEPTH 32
#define URING_WORKERS 16
/* With io_uring, a couple of /dev/fuse readers remain for what never goes
 * through the ring (FORGET, INTERRUPT) and for requests sent before every
 * queue had its entries. */
#define DEV_THREADS_BESIDE_URING 2
/* A /dev/fuse read puts fuse_in_header + fuse_write_in (80 bytes) just
 * before a page boundary, so a WRITE's data lands 4 KiB-aligned. */
#define WRITE_HDR (sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in))
#define DEV_BUF_SIZE (FS_IO_ALIGN + FS_IO_MAX + FS_IO_ALIGN)

struct fs_session {
  int fd;
  char *mountpoint;
  dev_t dev; /* of the mounted root: its minor names /sys/fs/fuse/connections/N */
  fs_handler_fn handler;
  void *opaque;
  struct ploop_disk *aio_disk;
  struct fs_uring *ring;
  bool ring_active; /* the kernel sends requests through it */
  unsigned proto_minor;
  pthread_t *threads;
  unsigned nthreads, threads_cap;
  unsigned alive; /* serving threads not yet exited (dev readers + ring) */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  _Atomic bool stopping;
};

/* Interrupts a serving thread's wait for the next request when the kernel
 * cannot end the connection for us (a loop device still holds the file and
 * /sys/fs/fuse/connections is not mounted). */
#define STOP_SIGNAL (SIGRTMIN + 3)

static void stop_signal_handler(int sig) { (void)sig; }

void fs_thread_init(const char *name)
{
  pthread_setname_np(pthread_self(), name);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, STOP_SIGNAL);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

bool fs_session_stopping(const struct fs_session *s) { return atomic_load(&s->stopping); }

static void install_stop_signal(void)
{
  struct sigaction old;
  if (sigaction(STOP_SIGNAL, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
    /* No SA_RESTART: the interrupted read()/io_uring_enter() returns EINTR. */
    struct sigaction sa = {.sa_handler = stop_signal_handler};
    sigemptyset(&sa.sa_mask);
    sigaction(STOP_SIGNAL, &sa, NULL);
  }
}

int fs_session_fd(const struct fs_session *s) { return s->fd; }

void fs_thread_started(struct fs_session *s)
{
  pthread_mutex_lock(&s->lock);
  s->alive++;
  pthread_mutex_unlock(&s->lock);
}

void fs_thread_exited(struct fs_session *s)
{
  pthread_mutex_lock(&s->lock);
  s->alive--;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

/* The size of each opcode's fixed argument, which the kernel sends first
 * (io_uring: in the header's op_in area; /dev/fuse: after fuse_in_header). */
static size_t arg_size(uint32_t opcode)
{
  switch (opcode) {
  case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
  case FUSE_SETATTR: return sizeof(struct fuse_setattr_in);
  case FUSE_OPEN:
  case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
  case FUSE_READ:
  case FUSE_READDIR: return sizeof(struct fuse_read_in);
  case FUSE_WRITE: return sizeof(struct fuse_write_in);
  case FUSE_RELEASE:
  case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
  case FUSE_FSYNC:
  case FUSE_FSYNCDIR: return sizeof(struct fuse_fsync_in);
  case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
  case FUSE_FALLOCATE: return sizeof(struct fuse_fallocate_in);
  case FUSE_FORGET: return sizeof(struct fuse_forget_in);
  case FUSE_BATCH_FORGET: return sizeof(struct fuse_batch_forget_in);
  case FUSE_INTERRUPT: return sizeof(struct fuse_interrupt_in);
  default: return 0; /* LOOKUP (the name is data), STATFS, DESTROY, unknown */
  }
}

void fs_reply(struct fs_req *r, int error, const void *arg, size_t len)
{
  if (r->replied)
    return;
  r->replied = true;
  if (error)
    len = 0;
  struct fuse_out_header oh = {.len = (uint32_t)(sizeof(oh) + len), .error = -error,
                               .unique = r->in->unique};
  if (r->ring_hdr) {
    /* The ring commits it once the handler returns. */
    if (len && arg != r->out)
      memcpy(r->out, arg, len);
    memcpy(r->ring_hdr->in_out, &oh, sizeof(oh));
    r->ring_hdr->ring_ent_in_out.payload_sz = (uint32_t)len;
    return;
  }
  struct iovec iov[2] = {{.iov_base = &oh, .iov_len = sizeof(oh)},
                         {.iov_base = (void *)arg, .iov_len = len}};
  /* ENOENT: the request was interrupted or the connection is going; the
   * kernel no longer waits for this answer. */
  (void)!writev(r->s->fd, iov, len ? 2 : 1);
}

void fs_dispatch(struct fs_session *s, struct fs_req *r)
{
  switch (r->in->opcode) {
  case FUSE_FORGET:
  case FUSE_BATCH_FORGET:
    return; /* inodes are fixed; and the kernel waits for no answer */
  case FUSE_INTERRUPT:
    return; /* requests are short and not cancellable; the kernel waits for them */
  case FUSE_INIT:
    fs_reply(r, EPROTO, NULL, 0);
    return;
  case FUSE_DESTROY:
    fs_reply(r, 0, NULL, 0);
    return;
  default:
    s->handler(s->opaque, r);
    if (!r->replied && !r->pending)
      fs_reply(r, EIO, NULL, 0);
  }
}

/* Splits a request read from /dev/fuse (HDR, N bytes) into its parts. */
static bool dev_parse(struct fs_session *s, struct fs_req *r, void *hdr, size_t n, void *out)
{
  memset(r, 0, sizeof(*r));
  r->s = s;
  r->in = hdr;
  r->out = out;
  r->may_block = true;
  if (n < sizeof(struct fuse_in_header) || r->in->len != n)
    return false;
  size_t a = arg_size(r->in->opcode);
  if (n < sizeof(struct fuse_in_header) + a) {
    fs_reply(r, EINVAL, NULL, 0);
    return false;
  }
  r->arg = (char *)hdr + sizeof(struct fuse_in_header);
  r->data = (char *)r->arg + a;
  r->data_len = n - sizeof(struct fuse_in_header) - a;
  return true;
}

static void *dev_thread(void *arg)
{
  struct fs_session *s = arg;
  fs_thread_init("ploop-fuse-dev");
  char *buf = NULL;
  if (posix_memalign((void **)&buf, FS_IO_ALIGN, DEV_BUF_SIZE) == 0) {
    char *hdr = buf + FS_IO_ALIGN - WRITE_HDR;
    while (!fs_session_stopping(s)) {
      ssize_t n = read(s->fd, hdr, DEV_BUF_SIZE - (FS_IO_ALIGN - WRITE_HDR));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
          continue;
        break; /* ENODEV: unmounted or aborted */
      }
      struct fs_req r;
      if (dev_parse(s, &r, hdr, (size_t)n, buf + FS_IO_ALIGN))
        fs_dispatch(s, &r);
    }
    free(buf);
  }
  fs_thread_exited(s);
  return NULL;
}

static int start_dev_threads(struct fs_session *s, unsigned count)
{
  if (s->nthreads + count > s->threads_cap) {
    unsigned cap = s->nthreads + count;
    pthread_t *t = realloc(s->threads, cap * sizeof(*t));
    if (!t)
      return ENOMEM;
    s->threads = t;
    s->threads_cap = cap;
  }
  for (unsigned i = 0; i < count; i++) {
    fs_thread_started(s);
    int e = pthread_create(&s->threads[s->nthreads], NULL, dev_thread, s);
    if (e != 0) {
      fs_thread_exited(s);
      return e;
    }
    s->nthreads++;
  }
  return 0;
}

static unsigned env_unsigned(const char *name, unsigned dflt, unsigned max)
{
  const char *v = getenv(name);
  if (!v || !*v)
    return dflt;
  char *end;
  unsigned long n = strtoul(v, &end, 10);
  return *end || n > max ? dflt : (unsigned)n;
}

/* io_uring transport is off in the module by default (fuse.enable_uring);
 * root may turn it on.  It must be on when the connection is made: the
 * kernel offers it in INIT only then. */
static void enable_uring_param(void)
{
  const char *path = "/sys/module/fuse/parameters/enable_uring";
  char c = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return; /* a kernel without FUSE_IO_URING */
  bool on = read(fd, &c, 1) == 1 && (c == 'Y' || c == '1');
  close(fd);
  if (on)
    return;
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!write(fd, "Y", 1);
    close(fd);
  }
}

/* Reads the INIT request and answers it; *URING says whether the kernel
 * agreed to FUSE over io_uring (offered when WANT_URING). */
static int do_init(struct fs_session *s, bool want_uring, bool *uring)
{
  char *buf;
  if (posix_memalign((void **)&buf, FS_IO_ALIGN, DEV_BUF_SIZE) != 0)
    return ENOMEM;
  ssize_t n;
  do
    n = read(s->fd, buf, DEV_BUF_SIZE);
  while (n < 0 && (errno == EINTR || errno == EAGAIN));
  int e = 0;
  struct fuse_in_header *in = (void *)buf;
  if (n < 0) {
    e = errno;
  } else if ((size_t)n < sizeof(*in) + 16 || in->opcode != FUSE_INIT) {
    e = EPROTO;
  } else {
    struct fuse_init_in *ii = (void *)(buf + sizeof(*in));
    uint64_t offered = ii->flags;
    if ((ii->flags & FUSE_INIT_EXT) && (size_t)n >= sizeof(*in) + sizeof(*ii))
      offered |= (uint64_t)ii->flags2 << 32;
    /* ASYNC_DIO: the loop device's asynchronous direct I/O reaches us as
     * many requests in flight instead of one at a time per file. */
    uint64_t want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_ASYNC_DIO | FUSE_MAX_PAGES |
                    FUSE_INIT_EXT | (want_uring ? FUSE_OVER_IO_URING : 0);
    want &= offered;
    struct fuse_init_out out = {
        .major = FUSE_KERNEL_VERSION,
        .minor = ii->minor < PLOOP_FUSE_MINOR ? ii->minor : PLOOP_FUSE_MINOR,
        .max_readahead = 0,
        .flags = (uint32_t)want,
        .flags2 = (uint32_t)(want >> 32),
        .max_background = MAX_BACKGROUND,
        .congestion_threshold = CONGESTION_THRESHOLD,
        .max_write = FS_IO_MAX,
        .time_gran = 1,
        .max_pages = FS_IO_MAX / 4096,
    };
    struct fuse_out_header oh = {.len = sizeof(oh) + sizeof(out), .unique = in->unique};
    if (ii->major != FUSE_KERNEL_VERSION) {
      /* Only 7.x exists; a future major would resend INIT with ours. */
      e = EPROTO;
      oh.error = -EPROTO;
      oh.len = sizeof(oh);
    }
    struct iovec iov[2] = {{&oh, sizeof(oh)}, {&out, sizeof(out)}};
    if (writev(s->fd, iov, e ? 1 : 2) < 0 && !e)
      e = errno;
    s->proto_minor = out.minor;
    *uring = !e && (want & FUSE_OVER_IO_URING);
  }
  free(buf);
  return e;
}

static void session_free(struct fs_session *s)
{
  if (s->fd >= 0)
    close(s->fd);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s->threads);
  free(s->mountpoint);
  free(s);
}

bool fs_wait_zero(pthread_mutex_t *lock, pthread_cond_t *cond, const unsigned *count, int ms)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(lock);
  while (*count > 0)
    if (pthread_cond_timedwait(cond, lock, &ts) == ETIMEDOUT)
      break;
  bool done = *count == 0;
  pthread_mutex_unlock(lock);
  return done;
}

/* Waits up to MS milliseconds for every serving thread to exit. */
static bool wait_threads(struct fs_session *s, int ms)
{
  return fs_wait_zero(&s->lock, &s->cond, &s->alive, ms);
}

/* Writing to the connection's abort file fails every pending and future
 * request; used when a user (a loop device) still holds the file. */
static bool abort_connection(struct fs_session *s)
{
  char path[128];
  snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(s->dev));
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false; /* fusectl is not mounted */
  bool ok = write(fd, "1", 1) == 1;
  close(fd);
  return ok;
}

bool fs_session_stop(struct fs_session *s)
{
  if (!s)
    return true;
  /* Without users the detach destroys the superblock, which ends the
   * connection: readers get ENODEV, ring entries ENOTCONN.  A loop device
   * still holding the file keeps it alive; then abort it. */
  umount2(s->mountpoint, MNT_DETACH);
  bool done = wait_threads(s, 300);
  if (!done && s->dev && abort_connection(s))
    done = wait_threads(s, 1000);
  if (!done) {
    /* No fusectl: interrupt every thread's wait (again and again: a signal
     * may land just before a thread blocks), then closing our /dev/fuse fd
     * and rings below ends the connection. */
    atomic_store(&s->stopping, true);
    for (int i = 0; i < 100 && !done; i++) {
      pthread_mutex_lock(&s->lock);
      for (unsigned k = 0; k < s->nthreads; k++)
        pthread_kill(s->threads[k], STOP_SIGNAL);
      pthread_mutex_unlock(&s->lock);
      if (s->ring)
        fs_uring_kick(s->ring, STOP_SIGNAL);
      done = wait_threads(s, 50);
    }
  }
  for (unsigned i = 0; i < s->nthreads; i++)
    if (done)
      pthread_join(s->threads[i], NULL);
    else
      pthread_detach(s->threads[i]);
  if (s->ring && !fs_uring_free(s->ring, !done))
    done = false;
  if (done)
    session_free(s); /* else a stuck thread may still use it: the process exit ends them */
  return done;
}

void fs_session_stats(const struct fs_session *s, struct fs_stats *st)
{
  memset(st, 0, sizeof(*st));
  st->transport = s->ring_active ? "io_uring" : "/dev/fuse";
  if (s->ring_active)
    fs_uring_stats(s->ring, st);
}

void fs_aio_drain(struct fs_session *s)
{
  if (s->ring_active)
    fs_uring_aio_drain(s->ring);
}

void fs_session_inval_inode(struct fs_session *s, uint64_t ino)
{
  struct fuse_out_header oh = {.error = FUSE_NOTIFY_INVAL_INODE};
  struct fuse_notify_inval_inode_out arg = {.ino = ino, .off = 0, .len = 0};
  oh.len = sizeof(oh) + sizeof(arg);
  struct iovec iov[2] = {{&oh, sizeof(oh)}, {&arg, sizeof(arg)}};
  (void)!writev(s->fd, iov, 2);
}

/* Asks the filesystem something (a STATFS) and says whether the ring
 * answered: the kernel switches to the ring only once every CPU's queue
 * has an entry, and does not tell us when. */
static bool ring_answers(struct fs_session *s)
{
  struct fs_stats before = {0}, after = {0};
  fs_uring_stats(s->ring, &before);
  struct statfs sf;
  if (statfs(s->mountpoint, &sf) != 0)
    return false;
  fs_uring_stats(s->ring, &after);
  return after.served > before.served;
}

struct fs_session *fs_session_start(const struct fs_session_params *p)
{
  struct fs_session *s = calloc(1, sizeof(*s));
  if (!s) {
    ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "fuse export: out of memory");
    return NULL;
  }
  s->fd = -1;
  s->handler = p->handler;
  s->opaque = p->opaque;
  s->aio_disk = p->aio_disk;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  install_stop_signal();
  s->mountpoint = strdup(p->mountpoint);
  if (!s->mountpoint) {
    session_free(s);
    ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "fuse export: out of memory");
    return NULL;
  }
  /* PLOOP_FUSE_URING=0 keeps the /dev/fuse path (benchmarks, tests). */
  bool want_uring = env_unsigned("PLOOP_FUSE_URING", 1, 1) == 1;
  if (want_uring)
    enable_uring_param();

  s->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (s->fd < 0) {
    int e = errno;
    session_free(s);
    ploop_set_error(PLOOP_ERR_IO, e, "fuse export: open /dev/fuse: %s", strerror(e));
    return NULL;
  }
  char opts[128];
  snprintf(opts, sizeof(opts), "fd=%d,rootmode=%o,user_id=%u,group_id=%u,default_permissions", s->fd,
           S_IFDIR, (unsigned)getuid(), (unsigned)getgid());
  unsigned long flags = MS_NOSUID | MS_NODEV | (p->readonly ? MS_RDONLY : 0);
  if (mount(p->source, p->mountpoint, "fuse.ploop", flags, opts) != 0) {
    int e = errno;
    session_free(s);
    ploop_set_error(PLOOP_ERR_IO, e, "fuse export: mount on %s: %s", p->mountpoint, strerror(e));
    return NULL;
  }
  bool uring = false;
  int e = do_init(s, want_uring, &uring);
  /* Readers first: anything sent before the ring is ready comes this way. */
  if (!e)
    e = start_dev_threads(s, uring ? DEV_THREADS_BESIDE_URING
                                   : env_unsigned("PLOOP_FUSE_THREADS", DEV_THREADS, 256));
  if (e) {
    umount2(p->mountpoint, MNT_DETACH);
    fs_session_stop(s);
    ploop_set_error(PLOOP_ERR_IO, e, "fuse export: start on %s: %s", p->mountpoint, strerror(e));
    return NULL;
  }
  if (uring) {
    char why[160] = "";
    s->ring = fs_uring_start(s, env_unsigned("PLOOP_FUSE_URING_DEPTH", URING_DEPTH, 256),
                             env_unsigned("PLOOP_FUSE_WORKERS", URING_WORKERS, 256),
                             env_unsigned("PLOOP_FUSE_URING_PIN", 0, 1) == 1, s->aio_disk, why,
                             sizeof(why));
    if (!s->ring || !fs_uring_ok(s->ring) || !ring_answers(s)) {
      /* The kernel refused the ring (or never switched to it): serve
       * everything from /dev/fuse.  Entries already registered stay idle. */
      if (getenv("PLOOP_FUSE_DEBUG"))
        fprintf(stderr, "ploop-nbd: FUSE over io_uring unavailable (%s), using /dev/fuse\n",
                why[0] ? why : "no request came through the ring");
      start_dev_threads(s, env_unsigned("PLOOP_FUSE_THREADS", DEV_THREADS, 256));
    } else {
      s->ring_active = true;
    }
  }
  /* The stat answers once INIT is done (it is); its device names the
   * connection in /sys/fs/fuse/connections. */
  struct stat st;
  if (stat(p->mountpoint, &st) == 0)
    s->dev = st.st_dev;
  return s;
}
