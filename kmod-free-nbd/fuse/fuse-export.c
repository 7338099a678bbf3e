/* The FUSE export: one regular file whose bytes are an open ploop disk, so
 * that a loop device (direct I/O) can attach the disk on a kernel with no
 * ploop module.  The requests come from our own session (fuse-session.c). */
#include "fuse-export.h"
#include "fuse-session.h"
/* ploop_set_error(): our failures are reported the libploop way (see
 * /work/api-requests.md: a public setter is requested). */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define ROOT_INO FUSE_ROOT_ID
#define FILE_INO 2
/* Attributes only change through us (resize), and we invalidate them then,
 * so the kernel may cache them for long and skip GETATTR round trips. */
#define ATTR_TIMEOUT 3600

struct ploop_fuse_export {
  struct ploop_disk *disk;
  struct fs_session *session;
  char *mountpoint;
  char *file_name;
  bool readonly;
  bool aio; /* the disk's own aio serves the ring's READs and WRITEs (RBD) */
  _Atomic uint64_t size;
  uint64_t start_time;
};

/* libploop keeps its errno per thread; fall back to EIO when it has none. */
static int disk_errno(void)
{
  int e = ploop_get_errno();
  return e > 0 ? e : EIO;
}

static void fill_attr(struct ploop_fuse_export *fx, uint64_t ino, struct fuse_attr *a)
{
  memset(a, 0, sizeof(*a));
  a->ino = ino;
  a->atime = a->mtime = a->ctime = fx->start_time;
  if (ino == ROOT_INO) {
    a->mode = S_IFDIR | 0755;
    a->nlink = 2;
  } else {
    a->mode = S_IFREG | (fx->readonly ? 0444 : 0644);
    a->nlink = 1;
    a->size = atomic_load(&fx->size);
    a->blksize = FS_IO_ALIGN;
    a->blocks = a->size / 512;
  }
}

static void reply_attr(struct ploop_fuse_export *fx, struct fs_req *r, uint64_t ino)
{
  if (ino != ROOT_INO && ino != FILE_INO) {
    fs_reply(r, ENOENT, NULL, 0);
    return;
  }
  struct fuse_attr_out out = {.attr_valid = ATTR_TIMEOUT};
  fill_attr(fx, ino, &out.attr);
  fs_reply(r, 0, &out, sizeof(out));
}

static void op_lookup(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const char *name = r->data;
  if (r->in->nodeid != ROOT_INO || r->data_len == 0 || name[r->data_len - 1] != '\0' ||
      strcmp(name, fx->file_name) != 0) {
    fs_reply(r, ENOENT, NULL, 0);
    return;
  }
  struct fuse_entry_out e = {.nodeid = FILE_INO, .generation = 1, .entry_valid = ATTR_TIMEOUT,
                             .attr_valid = ATTR_TIMEOUT};
  fill_attr(fx, FILE_INO, &e.attr);
  fs_reply(r, 0, &e, sizeof(e));
}

/* The size of a disk changes only by resize, never by truncate; accept the
 * no-op forms (touch, a truncate to the current size) and refuse the rest. */
static void op_setattr(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_setattr_in *in = r->arg;
  if ((in->valid & FATTR_SIZE) && (r->in->nodeid != FILE_INO || in->size != atomic_load(&fx->size))) {
    fs_reply(r, EPERM, NULL, 0);
    return;
  }
  if (in->valid & (FATTR_MODE | FATTR_UID | FATTR_GID)) {
    fs_reply(r, EPERM, NULL, 0);
    return;
  }
  reply_attr(fx, r, r->in->nodeid);
}

static void op_open(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_open_in *in = r->arg;
  if (r->in->nodeid != FILE_INO) {
    fs_reply(r, EISDIR, NULL, 0);
    return;
  }
  if (fx->readonly && (in->flags & O_ACCMODE) != O_RDONLY) {
    fs_reply(r, EROFS, NULL, 0);
    return;
  }
  if (in->flags & O_TRUNC) {
    fs_reply(r, EPERM, NULL, 0);
    return;
  }
  /* The loop device above has its own cache (the filesystem's page cache);
   * caching here too would hold every block twice.  Parallel direct writes:
   * without it the kernel takes the inode lock exclusively per write. */
  struct fuse_open_out out = {.open_flags = FOPEN_DIRECT_IO | FOPEN_NOFLUSH |
                                            FOPEN_PARALLEL_DIRECT_WRITES};
  fs_reply(r, 0, &out, sizeof(out));
}

/* A mapped read or write done by the ring: drop the pins, answer, or take
 * the blocking path for what the direct I/O could not do in one go (a short
 * transfer, an alignment the file refused). */
static void mapped_done(void *arg, struct fs_req *r, int res)
{
  struct ploop_fuse_export *fx = arg;
  for (unsigned i = 0; i < r->io_segs; i++)
    ploop_disk_unmap(fx->disk);
  size_t size = (size_t)r->handler_data;
  if (res >= 0 && (size_t)res == r->io_len) {
    if (r->in->opcode == FUSE_READ) {
      fs_reply(r, 0, r->out, size);
    } else {
      struct fuse_write_out out = {.size = (uint32_t)size};
      fs_reply(r, 0, &out, sizeof(out));
    }
  } else if (res >= 0 || res == -EINVAL || res == -EAGAIN) {
    fs_defer(r);
  } else {
    fs_reply(r, -res, NULL, 0);
  }
}

/* An aio READ or WRITE finished (libploop dropped its pin already). */
static void aio_done(void *arg, struct fs_req *r, int res)
{
  (void)arg;
  size_t size = (size_t)r->handler_data;
  if (res < 0) {
    fs_reply(r, -res, NULL, 0);
  } else if (r->in->opcode == FUSE_READ) {
    fs_reply(r, 0, r->out, size);
  } else {
    struct fuse_write_out out = {.size = (uint32_t)size};
    fs_reply(r, 0, &out, sizeof(out));
  }
}

/* On a disk with aio: starts it when one delta holds the range already.
 * True when the request is answered or on its way; false leaves holes,
 * allocations and ranges across clusters to try_mapped and the workers. */
static bool try_aio(struct ploop_fuse_export *fx, struct fs_req *r, uint64_t off, size_t size,
                    bool write)
{
  r->handler_data = size;
  int rc = fs_submit_aio(r, write, size, off, aio_done, fx);
  if (rc < 0)
    fs_reply(r, -rc, NULL, 0);
  return rc != 0;
}

/* On a serving thread that must not block: has the ring do the I/O when
 * every cluster the range touches is held (for a write: by the top), reads
 * holes as zeros, and leaves the rest (allocation, copy-up, a disk changing
 * shape) to a worker.  True when the request is answered or on its way. */
static bool try_mapped(struct ploop_fuse_export *fx, struct fs_req *r, uint64_t off, size_t size,
                       bool write)
{
  uint64_t cs = ploop_disk_cluster_size(fx->disk);
  struct fs_io_seg seg[FS_IO_SEGS];
  unsigned n = 0;
  size_t done = 0;
  int rc = PLOOP_MAP_NONE;
  while (done < size) {
    uint64_t o = off + done;
    size_t len = size - done;
    if (len > cs - o % cs)
      len = (size_t)(cs - o % cs);
    struct ploop_mapping m;
    rc = n < FS_IO_SEGS ? ploop_disk_map(fx->disk, o, len, write ? PLOOP_MAP_WRITE : 0, &m)
                        : PLOOP_MAP_NONE;
    if (rc == PLOOP_MAP_FILE)
      seg[n++] = (struct fs_io_seg){.fd = m.fd, .off = m.file_offset, .buf_off = done, .len = len};
    else if (rc == PLOOP_MAP_ZERO)
      memset((char *)r->out + done, 0, len);
    else
      break;
    done += len;
  }
  if (done < size) { /* a piece the ring cannot do */
    for (unsigned i = 0; i < n; i++)
      ploop_disk_unmap(fx->disk);
    if (rc >= 0)
      return false;
    fs_reply(r, disk_errno(), NULL, 0);
    return true;
  }
  if (n == 0) { /* a read of holes only */
    fs_reply(r, 0, r->out, size);
    return true;
  }
  r->handler_data = size;
  fs_submit_io(r, seg, n, write, mapped_done, fx);
  return true;
}

static void op_read(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_read_in *in = r->arg;
  uint64_t disk_size = atomic_load(&fx->size);
  uint64_t off = in->offset;
  size_t size = in->size;
  if (off >= disk_size) {
    fs_reply(r, 0, NULL, 0);
    return;
  }
  if (size > disk_size - off)
    size = disk_size - off;
  if (size > FS_IO_MAX)
    size = FS_IO_MAX;
  if (!r->may_block) {
    if (fx->aio && try_aio(fx, r, off, size, false))
      return;
    if (!try_mapped(fx, r, off, size, false))
      fs_defer(r);
    return;
  }
  /* r->out is aligned: libploop's O_DIRECT fast path reads straight into
   * the buffer the reply goes out of. */
  if (ploop_disk_pread(fx->disk, r->out, size, off) < 0) {
    fs_reply(r, disk_errno(), NULL, 0);
    return;
  }
  fs_reply(r, 0, r->out, size);
}

static void op_write(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_write_in *in = r->arg;
  uint64_t disk_size = atomic_load(&fx->size);
  uint64_t off = in->offset;
  size_t size = in->size;
  if (fx->readonly) {
    fs_reply(r, EROFS, NULL, 0);
    return;
  }
  if (size > FS_IO_MAX || size > r->data_len) {
    fs_reply(r, EINVAL, NULL, 0);
    return;
  }
  /* A disk cannot grow by writing past its end (that is what resize is for). */
  if (off > disk_size || size > disk_size - off) {
    fs_reply(r, ENOSPC, NULL, 0);
    return;
  }
  bool fua = in->flags & (O_SYNC | O_DSYNC);
  if (!r->may_block) {
    /* A FUA write also makes the BAT durable: the worker's path does it. */
    if (fua || !((fx->aio && try_aio(fx, r, off, size, true)) || try_mapped(fx, r, off, size, true)))
      fs_defer(r);
    return;
  }
  /* The data sits page-aligned on both transports: no bounce copy. */
  if (ploop_disk_pwrite(fx->disk, r->data, size, off, fua ? PLOOP_WRITE_FUA : 0) < 0) {
    fs_reply(r, disk_errno(), NULL, 0);
    return;
  }
  struct fuse_write_out out = {.size = (uint32_t)size};
  fs_reply(r, 0, &out, sizeof(out));
}

static void op_fsync(struct ploop_fuse_export *fx, struct fs_req *r)
{
  if (!r->may_block) {
    fs_defer(r); /* a flush waits for the disk */
    return;
  }
  /* The kernel flushes what it saw complete; waiting for the aio writes
   * still in flight too costs little and leaves no doubt. */
  if (fx->aio)
    fs_aio_drain(fx->session);
  if (!fx->readonly && ploop_disk_flush(fx->disk) < 0) {
    fs_reply(r, disk_errno(), NULL, 0);
    return;
  }
  fs_reply(r, 0, NULL, 0);
}

/* Discard (punch hole) frees clusters; zero range writes zeroes; plain
 * allocation inside the disk is a no-op since the size is fixed. */
static void op_fallocate(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_fallocate_in *in = r->arg;
  uint64_t disk_size = atomic_load(&fx->size);
  uint64_t off = in->offset, len = in->length;
  if (!r->may_block) {
    fs_defer(r); /* discard and zeroing wait for the disk */
    return;
  }
  if (fx->readonly) {
    fs_reply(r, EROFS, NULL, 0);
    return;
  }
  if (len == 0 || off > INT64_MAX || len > INT64_MAX) {
    fs_reply(r, EINVAL, NULL, 0);
    return;
  }
  if (off > disk_size || len > disk_size - off) {
    /* Ranges reaching past the end are clipped for hole/zero (as a file would
     * behave with KEEP_SIZE); growing is refused. */
    if (!(in->mode & FALLOC_FL_KEEP_SIZE)) {
      fs_reply(r, EFBIG, NULL, 0);
      return;
    }
    if (off >= disk_size) {
      fs_reply(r, 0, NULL, 0);
      return;
    }
    len = disk_size - off;
  }
  int rc;
  uint32_t rest = in->mode & ~(uint32_t)FALLOC_FL_KEEP_SIZE;
  if (rest == FALLOC_FL_PUNCH_HOLE)
    rc = ploop_disk_discard(fx->disk, off, len);
  else if (rest == FALLOC_FL_ZERO_RANGE)
    rc = ploop_disk_write_zeroes(fx->disk, off, len, PLOOP_ZERO_NO_HOLE);
  else if (rest == 0)
    rc = 0;
  else {
    fs_reply(r, EOPNOTSUPP, NULL, 0);
    return;
  }
  fs_reply(r, rc < 0 ? disk_errno() : 0, NULL, 0);
}

static void op_readdir(struct ploop_fuse_export *fx, struct fs_req *r)
{
  const struct fuse_read_in *in = r->arg;
  char buf[1024];
  size_t used = 0;
  const char *names[] = {".", "..", fx->file_name};
  const uint64_t inos[] = {ROOT_INO, ROOT_INO, FILE_INO};
  for (uint64_t i = in->offset; i < 3; i++) {
    size_t namelen = strlen(names[i]);
    size_t n = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + namelen);
    if (used + n > sizeof(buf) || used + n > in->size)
      break;
    struct fuse_dirent *d = (void *)(buf + used);
    memset(d, 0, n);
    d->ino = inos[i];
    d->off = i + 1;
    d->namelen = (uint32_t)namelen;
    d->type = i == 2 ? DT_REG : DT_DIR;
    memcpy(d->name, names[i], namelen);
    used += n;
  }
  fs_reply(r, 0, buf, used);
}

static void op_statfs(struct ploop_fuse_export *fx, struct fs_req *r)
{
  /* Loop takes its discard granularity from f_bsize: keep it at the page
   * size so that the filesystem's small frees still reach the disk. */
  struct fuse_statfs_out out = {.st = {.bsize = FS_IO_ALIGN, .frsize = FS_IO_ALIGN,
                                       .blocks = atomic_load(&fx->size) / FS_IO_ALIGN,
                                       .files = 2, .namelen = NAME_MAX}};
  fs_reply(r, 0, &out, sizeof(out));
}

static void handle(void *opaque, struct fs_req *r)
{
  struct ploop_fuse_export *fx = opaque;
  uint64_t ino = r->in->nodeid;
  switch (r->in->opcode) {
  case FUSE_LOOKUP: op_lookup(fx, r); break;
  case FUSE_GETATTR: reply_attr(fx, r, ino); break;
  case FUSE_SETATTR: op_setattr(fx, r); break;
  case FUSE_OPEN: op_open(fx, r); break;
  case FUSE_READ: op_read(fx, r); break;
  case FUSE_WRITE: op_write(fx, r); break;
  case FUSE_FSYNC: op_fsync(fx, r); break;
  case FUSE_FALLOCATE: op_fallocate(fx, r); break;
  case FUSE_STATFS: op_statfs(fx, r); break;
  case FUSE_FLUSH:
  case FUSE_RELEASE:
  case FUSE_RELEASEDIR:
  case FUSE_FSYNCDIR: fs_reply(r, 0, NULL, 0); break;
  case FUSE_OPENDIR: {
    struct fuse_open_out out = {0};
    if (ino != ROOT_INO)
      fs_reply(r, ENOTDIR, NULL, 0);
    else
      fs_reply(r, 0, &out, sizeof(out));
    break;
  }
  case FUSE_READDIR: op_readdir(fx, r); break;
  default: fs_reply(r, ENOSYS, NULL, 0); break;
  }
}

static void export_free(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  free(fx->mountpoint);
  free(fx->file_name);
  free(fx);
}

struct ploop_fuse_export *ploop_fuse_export_start(struct ploop_disk *disk, const char *mountpoint,
                                                  const char *file_name, bool readonly)
{
  if (!disk || !mountpoint || !file_name || !*file_name || strchr(file_name, '/') ||
      strlen(file_name) > NAME_MAX) {
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
  fx->start_time = (uint64_t)time(NULL);
  atomic_store(&fx->size, ploop_disk_size(disk));
  fx->mountpoint = strdup(mountpoint);
  fx->file_name = strdup(file_name);
  /* The disk's directory as the mount source makes /proc/mounts say which
   * disk a FUSE mount serves. */
  const char *dir = ploop_disk_dir(disk);
  char source[PATH_MAX + 8];
  snprintf(source, sizeof(source), "ploop:%s", dir ? dir : "");
  if (!fx->mountpoint || !fx->file_name) {
    export_free(fx);
    ploop_set_error(PLOOP_ERR_GENERIC, ENOMEM, "fuse export: out of memory");
    return NULL;
  }
  /* PLOOP_FUSE_AIO=0 sends an RBD disk's requests to the workers, as
   * before aio (benchmarks, tests). */
  const char *env_aio = getenv("PLOOP_FUSE_AIO");
  fx->aio = ploop_disk_has_aio(disk) && !(env_aio && strcmp(env_aio, "0") == 0);
  struct fs_session_params p = {.mountpoint = mountpoint, .source = source, .readonly = fx->readonly,
                                .aio_disk = fx->aio ? disk : NULL, .handler = handle, .opaque = fx};
  fx->session = fs_session_start(&p);
  if (!fx->session) {
    export_free(fx);
    return NULL;
  }
  return fx;
}

void ploop_fuse_export_resized(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  atomic_store(&fx->size, ploop_disk_size(fx->disk));
  /* Drop the kernel's cached attributes, then look once so the inode's size
   * (which LOOP_SET_CAPACITY reads) is current before anyone asks. */
  fs_session_inval_inode(fx->session, FILE_INO);
  char path[PATH_MAX];
  struct stat st;
  if (snprintf(path, sizeof(path), "%s/%s", fx->mountpoint, fx->file_name) < (int)sizeof(path))
    (void)stat(path, &st);
}

void ploop_fuse_export_info_json(struct ploop_fuse_export *fx, char *buf, size_t len)
{
  struct fs_stats st;
  fs_session_stats(fx->session, &st);
  snprintf(buf, len,
           ",\"fuse_transport\":\"%s\",\"fuse_requests\":{\"ring\":%" PRIu64 ",\"ring_io\":%" PRIu64
           ",\"workers\":%" PRIu64 ",\"aio\":%" PRIu64 "}",
           st.transport, st.served, st.ring_io, st.deferred, st.aio);
}

void ploop_fuse_export_stop(struct ploop_fuse_export *fx)
{
  if (!fx)
    return;
  if (fs_session_stop(fx->session))
    export_free(fx); /* else a stuck serving thread may still use it */
}
