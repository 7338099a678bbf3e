/* The FUSE export: one regular file whose bytes are an open ploop disk,
 * served with libfuse3's low-level API on a pool of threads, so that a loop
 * device (direct I/O) can attach the disk on a kernel with no ploop module. */
#define FUSE_USE_VERSION 314
#include "fuse-export.h"
/* ploop_set_error(): our failures are reported the libploop way (see
 * /work/api-requests.md: a public setter is requested). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <stdint.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* Open reply flags of the kernel ABI (linux/fuse.h). */
#define FOPEN_DIRECT_IO (1u << 0)
#define FOPEN_NOFLUSH (1u << 5)
#define FOPEN_PARALLEL_DIRECT_WRITES (1u << 6)

#define ROOT_INO FUSE_ROOT_ID
#define FILE_INO 2
/* The largest request the kernel may send (fs.fuse.max_pages_limit is 256
 * pages by default) and the size of each worker's aligned bounce buffer. */
#define IO_MAX (1u << 20)
#define IO_ALIGN 4096
/* Attributes only change through us (resize), and we invalidate them then,
 * so the kernel may cache them for long and skip GETATTR round trips. */
#define ATTR_TIMEOUT 3600.0
/* Enough workers for a queue depth of 32 on the loop device plus flushes. */
#define MAX_THREADS 48

struct ploop_fuse_export {
  struct ploop_disk *disk;
  struct fuse_session *se;
  char *mountpoint;
  char *file_name;
  bool readonly;
  _Atomic uint64_t size;
  dev_t dev;  /* of the mounted root: its minor names /sys/fs/fuse/connections/N */
  int root_fd; /* O_PATH on the mounted root: reaches the connection after a detach */
  pthread_t thread;
  bool thread_started;
  _Atomic bool loop_done;
  pthread_mutex_t done_lock;
  pthread_cond_t done_cond;
  time_t start_time;
};

/* Each worker keeps one aligned buffer for the life of the thread: libploop's
 * fast path wants 4 KiB-aligned memory and libfuse's request buffer is not. */
static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

static void bounce_key_init(void) { pthread_key_create(&bounce_key, free); }

static void *bounce_buffer(void)
{
  pthread_once(&bounce_once, bounce_key_init);
  void *b = pthread_getspecific(bounce_key);
  if (b)
    return b;
  if (posix_memalign(&b, IO_ALIGN, IO_MAX) != 0)
    return NULL;
  pthread_setspecific(bounce_key, b);
  return b;
}

static struct ploop_fuse_export *fx_of(fuse_req_t req) { return fuse_req_userdata(req); }

/* libploop keeps its errno per thread; fall back to EIO when it has none. */
static int disk_errno(void)
{
  int e = ploop_get_errno();
  return e > 0 ? e : EIO;
}

static void fill_attr(struct ploop_fuse_export *fx, fuse_ino_t ino, struct stat *st)
{
  memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = 0;
  st->st_gid = 0;
  st->st_atime = st->st_mtime = st->st_ctime = fx->start_time;
  if (ino == ROOT_INO) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | (fx->readonly ? 0444 : 0644);
    st->st_nlink = 1;
    st->st_size = (off_t)atomic_load(&fx->size);
    st->st_blksize = IO_ALIGN;
    st->st_blocks = st->st_size / 512;
  }
}

static void reply_attr(fuse_req_t req, fuse_ino_t ino)
{
  struct stat st;
  if (ino != ROOT_INO && ino != FILE_INO) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fill_attr(fx_of(req), ino, &st);
  fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
  /* The loop device submits asynchronous direct I/O; without ASYNC_DIO the
   * kernel would serialise it into one request at a time per file. */
  if (conn->capable & FUSE_CAP_ASYNC_DIO)
    conn->want |= FUSE_CAP_ASYNC_DIO;
  conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA |
                            FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  conn->max_write = IO_MAX;
  conn->max_readahead = 0;
  conn->max_background = 128;
  conn->congestion_threshold = 96;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
  struct ploop_fuse_export *fx = fx_of(req);
  if (parent != ROOT_INO || strcmp(name, fx->file_name) != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct fuse_entry_param e = {.ino = FILE_INO, .generation = 1,
                               .attr_timeout = ATTR_TIMEOUT, .entry_timeout = ATTR_TIMEOUT};
  fill_attr(fx, FILE_INO, &e.attr);
  fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  reply_attr(req, ino);
}

/* The size of a disk changes only by resize, never by truncate; accept the
 * no-op forms (touch, O_TRUNC-less chmod by tools) and refuse the rest. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  if ((to_set & FUSE_SET_ATTR_SIZE) && (ino != FILE_INO ||
                                        (uint64_t)attr->st_size != atomic_load(&fx->size))) {
    fuse_reply_err(req, EPERM);
    return;
  }
  if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  reply_attr(req, ino);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  if (ino != FILE_INO) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (fx->readonly && (fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (fi->flags & O_TRUNC) {
    fuse_reply_err(req, EPERM);
    return;
  }
  /* The loop device above has its own cache (the filesystem's page cache);
   * caching here too would hold every block twice.  libfuse 3.14 cannot say
   * "parallel direct writes" (without it the kernel takes the inode lock
   * exclusively for each write), so the reply is built by hand: it is the
   * kernel's struct fuse_open_out. */
  struct {
    uint64_t fh;
    uint32_t open_flags;
    uint32_t padding;
  } out = {.fh = 0, .open_flags = FOPEN_DIRECT_IO | FOPEN_NOFLUSH | FOPEN_PARALLEL_DIRECT_WRITES};
  _Static_assert(sizeof(out) == 16, "struct fuse_open_out is 16 bytes");
  struct iovec iov = {.iov_base = &out, .iov_len = sizeof(out)};
  fuse_reply_iov(req, &iov, 1);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  uint64_t disk_size = atomic_load(&fx->size);
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if ((uint64_t)off >= disk_size) {
    fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (size > disk_size - (uint64_t)off)
    size = disk_size - (uint64_t)off;
  if (size > IO_MAX)
    size = IO_MAX;
  void *buf = bounce_buffer();
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  if (ploop_disk_pread(fx->disk, buf, size, (uint64_t)off) < 0) {
    fuse_reply_err(req, disk_errno());
    return;
  }
  fuse_reply_buf(req, buf, size);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  uint64_t disk_size = atomic_load(&fx->size);
  if (fx->readonly) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (off < 0 || size > IO_MAX) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  /* A disk cannot grow by writing past its end (that is what resize is for). */
  if ((uint64_t)off > disk_size || size > disk_size - (uint64_t)off) {
    fuse_reply_err(req, ENOSPC);
    return;
  }
  void *buf = bounce_buffer();
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  memcpy(buf, data, size);
  unsigned flags = (fi->flags & (O_SYNC | O_DSYNC)) ? PLOOP_WRITE_FUA : 0;
  if (ploop_disk_pwrite(fx->disk, buf, size, (uint64_t)off, flags) < 0) {
    fuse_reply_err(req, disk_errno());
    return;
  }
  fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  if (!fx->readonly && ploop_disk_flush(fx->disk) < 0) {
    fuse_reply_err(req, disk_errno());
    return;
  }
  fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  fuse_reply_err(req, 0);
}

/* Discard (punch hole) frees clusters; zero range writes zeroes; plain
 * allocation inside the disk is a no-op since the size is fixed. */
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  uint64_t disk_size = atomic_load(&fx->size);
  if (fx->readonly) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (off < 0 || len <= 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if ((uint64_t)off > disk_size || (uint64_t)len > disk_size - (uint64_t)off) {
    /* Ranges reaching past the end are clipped for hole/zero (as a file would
     * behave with KEEP_SIZE); growing is refused. */
    if (!(mode & FALLOC_FL_KEEP_SIZE)) {
      fuse_reply_err(req, EFBIG);
      return;
    }
    if ((uint64_t)off >= disk_size) {
      fuse_reply_err(req, 0);
      return;
    }
    len = (off_t)(disk_size - (uint64_t)off);
  }
  int rc;
  int rest = mode & ~FALLOC_FL_KEEP_SIZE;
  if (rest == FALLOC_FL_PUNCH_HOLE)
    rc = ploop_disk_discard(fx->disk, (uint64_t)off, (uint64_t)len);
  else if (rest == FALLOC_FL_ZERO_RANGE)
    rc = ploop_disk_write_zeroes(fx->disk, (uint64_t)off, (uint64_t)len, PLOOP_ZERO_NO_HOLE);
  else if (rest == 0)
    rc = 0;
  else {
    fuse_reply_err(req, EOPNOTSUPP);
    return;
  }
  fuse_reply_err(req, rc < 0 ? disk_errno() : 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  if (ino != ROOT_INO) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
  struct ploop_fuse_export *fx = fx_of(req);
  char buf[1024];
  size_t used = 0;
  struct stat st = {.st_mode = S_IFDIR};
  const char *names[] = {".", "..", fx->file_name};
  const fuse_ino_t inos[] = {ROOT_INO, ROOT_INO, FILE_INO};
  for (off_t i = off; i < 3; i++) {
    st.st_ino = inos[i];
    st.st_mode = i == 2 ? S_IFREG : S_IFDIR;
    size_t n = fuse_add_direntry(req, buf + used, sizeof(buf) - used, names[i], &st, i + 1);
    if (n > sizeof(buf) - used || used + n > size)
      break;
    used += n;
  }
  fuse_reply_buf(req, buf, used);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
  struct ploop_fuse_export *fx = fx_of(req);
  /* Loop takes its discard granularity from f_bsize: keep it at the page
   * size so that the filesystem's small frees still reach the disk. */
  struct statvfs sv = {.f_bsize = IO_ALIGN, .f_frsize = IO_ALIGN,
                       .f_blocks = atomic_load(&fx->size) / IO_ALIGN,
                       .f_files = 2, .f_namemax = NAME_MAX};
  fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops export_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .fsync = op_fsync,
    .release = op_release,
    .fallocate = op_fallocate,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .statfs = op_statfs,
};

static void *loop_thread(void *arg)
{
  struct ploop_fuse_export *fx = arg;
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  if (cfg) {
    /* Tunables for benchmarking on other hosts; the defaults were measured. */
    const char *t = getenv("PLOOP_FUSE_THREADS");
    unsigned threads = t ? (unsigned)atoi(t) : MAX_THREADS;
    if (threads < 1 || threads > 256)
      threads = MAX_THREADS;
    const char *c = getenv("PLOOP_FUSE_CLONE_FD");
    fuse_loop_cfg_set_clone_fd(cfg, c && *c == '1');
    fuse_loop_cfg_set_max_threads(cfg, threads);
    fuse_loop_cfg_set_idle_threads(cfg, threads);
  }
  fuse_session_loop_mt(fx->se, cfg);
  if (cfg)
    fuse_loop_cfg_destroy(cfg);
  pthread_mutex_lock(&fx->done_lock);
  atomic_store(&fx->loop_done, true);
  pthread_cond_broadcast(&fx->done_cond);
  pthread_mutex_unlock(&fx->done_lock);
  return NULL;
}

/* libfuse logs to stderr by default; a daemon wants its messages silent
 * unless debugging, and our errors are returned, not printed. */
static void quiet_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
  if (level <= FUSE_LOG_ERR && getenv("PLOOP_FUSE_DEBUG"))
    vfprintf(stderr, fmt, ap);
}

static void export_free(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  pthread_mutex_destroy(&fx->done_lock);
  pthread_cond_destroy(&fx->done_cond);
  free(fx->mountpoint);
  free(fx->file_name);
  free(fx);
}

struct ploop_fuse_export *ploop_fuse_export_start(struct ploop_disk *disk, const char *mountpoint,
                                                  const char *file_name, bool readonly)
{
  if (!disk || !mountpoint || !file_name || !*file_name || strchr(file_name, '/')) {
    ploop_set_error(PLOOP_ERR_PARAM, EINVAL, "fuse export: a mount point and a plain file name are needed");
    return NULL;
  }
  struct ploop_fuse_export *fx = calloc(1, sizeof(*fx));
  if (!fx) {
    ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "fuse export: out of memory");
    return NULL;
  }
  fx->disk = disk;
  fx->readonly = readonly || ploop_disk_readonly(disk);
  fx->start_time = time(NULL);
  atomic_store(&fx->size, ploop_disk_size(disk));
  pthread_mutex_init(&fx->done_lock, NULL);
  pthread_cond_init(&fx->done_cond, NULL);
  fx->mountpoint = strdup(mountpoint);
  fx->file_name = strdup(file_name);
  if (!fx->mountpoint || !fx->file_name) {
    export_free(fx);
    ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "fuse export: out of memory");
    return NULL;
  }
  fuse_set_log_func(quiet_log);

  /* The disk's directory as the mount source makes /proc/mounts say which
   * disk a FUSE mount serves (commas would split the option list). */
  const char *dir = ploop_disk_dir(disk);
  char opts[PATH_MAX + 128];
  snprintf(opts, sizeof(opts), "fsname=ploop:%s,subtype=ploop,default_permissions%s",
           dir && !strchr(dir, ',') && !strchr(dir, '\\') ? dir : "", fx->readonly ? ",ro" : "");
  char *argv[] = {"ploop-nbd", "-o", opts, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(3, argv);
  fx->se = fuse_session_new(&args, &export_ops, sizeof(export_ops), fx);
  fuse_opt_free_args(&args);
  if (!fx->se) {
    export_free(fx);
    ploop_set_error(PLOOP_ERR_GENERIC, EIO, "fuse export: cannot start a FUSE session (is /dev/fuse there?)");
    return NULL;
  }
  errno = 0;
  if (fuse_session_mount(fx->se, mountpoint) != 0) {
    int e = errno ? errno : EIO;
    fuse_session_destroy(fx->se);
    export_free(fx);
    ploop_set_error(PLOOP_ERR_IO, e, "fuse export: mount on %s: %s", mountpoint, strerror(e));
    return NULL;
  }
  int e = pthread_create(&fx->thread, NULL, loop_thread, fx);
  if (e != 0) {
    fuse_session_unmount(fx->se);
    fuse_session_destroy(fx->se);
    export_free(fx);
    ploop_set_error(PLOOP_ERR_GENERIC, e, "fuse export: start thread: %s", strerror(e));
    return NULL;
  }
  fx->thread_started = true;
  /* The stat answers once INIT is done, so callers can open the file at once. */
  struct stat st;
  if (stat(mountpoint, &st) == 0)
    fx->dev = st.st_dev;
  fx->root_fd = open(mountpoint, O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fx;
}

void ploop_fuse_export_resized(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  atomic_store(&fx->size, ploop_disk_size(fx->disk));
  /* Drop the kernel's cached attributes, then look once so the inode's size
   * (which LOOP_SET_CAPACITY reads) is current before anyone asks. */
  fuse_lowlevel_notify_inval_inode(fx->se, FILE_INO, 0, 0);
  char path[PATH_MAX];
  struct stat st;
  if (snprintf(path, sizeof(path), "%s/%s", fx->mountpoint, fx->file_name) < (int)sizeof(path))
    (void)stat(path, &st);
}

static bool wait_loop_done(struct ploop_fuse_export *fx, int seconds)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += seconds;
  pthread_mutex_lock(&fx->done_lock);
  while (!atomic_load(&fx->loop_done)) {
    if (pthread_cond_timedwait(&fx->done_cond, &fx->done_lock, &ts) == ETIMEDOUT)
      break;
  }
  bool done = atomic_load(&fx->loop_done);
  pthread_mutex_unlock(&fx->done_lock);
  return done;
}

/* Writing to the connection's abort file fails every pending and future
 * request; used when a user (a loop device) still holds the file. */
static void abort_connection(struct ploop_fuse_export *fx)
{
  char path[128];
  snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(fx->dev));
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!write(fd, "1", 1);
    close(fd);
  }
}

/* A STATFS to our own filesystem wakes one worker blocked reading
 * /dev/fuse; once it has answered it sees the session exited and the loop
 * winds down.  On its own thread: it may block until the fd is closed. */
static void *poke_thread(void *arg)
{
  int fd = (int)(intptr_t)arg;
  struct statfs sf;
  (void)fstatfs(fd, &sf);
  close(fd);
  return NULL;
}

void ploop_fuse_export_stop(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  bool joined = !fx->thread_started;
  if (fx->thread_started) {
    fuse_session_exit(fx->se);
    for (int attempt = 0; attempt < 3 && !atomic_load(&fx->loop_done); attempt++) {
      int fd = fx->root_fd >= 0 ? fcntl(fx->root_fd, F_DUPFD_CLOEXEC, 0) : -1;
      pthread_t t;
      if (fd >= 0 && pthread_create(&t, NULL, poke_thread, (void *)(intptr_t)fd) == 0)
        pthread_detach(t);
      else if (fd >= 0)
        close(fd);
      if (wait_loop_done(fx, 5))
        break;
      abort_connection(fx);
    }
    if (atomic_load(&fx->loop_done)) {
      pthread_join(fx->thread, NULL);
      joined = true;
    } else {
      pthread_detach(fx->thread); /* stuck in the kernel: the process exit ends it */
    }
  }
  if (fx->root_fd >= 0)
    close(fx->root_fd);
  /* Closes the device fd (requests still queued fail: a loop device left
   * bound gets I/O errors) and unmounts; libfuse skips the unmount when the
   * connection was aborted, so detach once more (EINVAL when already gone). */
  fuse_session_unmount(fx->se);
  umount2(fx->mountpoint, MNT_DETACH);
  if (joined) {
    fuse_session_destroy(fx->se);
    export_free(fx);
  }
}
