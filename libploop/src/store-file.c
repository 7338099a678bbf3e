/* The local-file store: a delta is a file opened O_DIRECT inside the disk's
 * directory, the descriptor is DIR/DiskDescriptor.xml replaced by rename.
 * These are the code paths libploop always had, behind the store ops. */
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "io.h"
#include "store.h"

static int file_open(struct store_obj *o, const char *dir, const char *path, bool rdwr)
{
  o->fd = ploop_open_file(dir, path, (rdwr ? O_RDWR : O_RDONLY) | O_DIRECT, 0);
  return o->fd < 0 ? -1 : 0;
}

static int file_create(struct store_obj *o, const char *dir, const char *path)
{
  o->fd = ploop_open_file(dir, path, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (o->fd < 0 && ploop_get_errno() == EEXIST)
    ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: create: %s", path, strerror(EEXIST));
  return o->fd < 0 ? -1 : 0;
}

static void file_close(struct store_obj *o)
{
  if (o->fd >= 0)
    close(o->fd);
}

static int file_sync_names(const char *dir, const char *path)
{
  (void)dir;
  return ploop_fsync_parent(path);
}

static int file_pread(struct store_obj *o, void *buf, size_t len, uint64_t off)
{
  return ploop_pread_full(o->fd, buf, len, off, o->path);
}

static int file_pwrite(struct store_obj *o, const void *buf, size_t len, uint64_t off)
{
  return ploop_pwrite_full(o->fd, buf, len, off, o->path);
}

static int file_flush(struct store_obj *o)
{
  return fdatasync(o->fd) < 0 ? ploop_error_os(o->path, "fdatasync") : 0;
}

static int file_size(struct store_obj *o, uint64_t *bytes, uint64_t *stored)
{
  struct stat st;
  if (fstat(o->fd, &st) < 0)
    return ploop_error_os(o->path, "stat");
  *bytes = (uint64_t)st.st_size;
  if (stored)
    *stored = (uint64_t)st.st_blocks * 512;
  return 0;
}

static int file_truncate(struct store_obj *o, uint64_t bytes)
{
  return ftruncate(o->fd, (off_t)bytes) < 0 ? ploop_error_os(o->path, "truncate") : 0;
}

static int file_zero(struct store_obj *o, uint64_t off, uint64_t len, enum store_zero_how how)
{
  switch (how) {
  case STORE_ZERO_KEEP:
    return fallocate(o->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
  case STORE_ZERO_PUNCH:
    return fallocate(o->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
  case STORE_ZERO_ALLOCATE:
    return fallocate(o->fd, 0, (off_t)off, (off_t)len);
  case STORE_ZERO_RESERVE:
    return ploop_reserve_zeroed(o->fd, o->path, off, len);
  }
  errno = EINVAL;
  return -1;
}

static int file_resolve(const char *dir_or_xml, char **dir, char **xml)
{
  return descriptor_resolve_file(dir_or_xml, dir, xml);
}

static void file_unlock(int handle)
{
  (void)handle; /* the fd's close releases the OFD locks */
}

const struct store_ops store_file_ops = {
    .name = "file",
    .open = file_open,
    .create = file_create,
    .close = file_close,
    .remove = ploop_unlink_file,
    .link = ploop_link_file,
    .sync_names = file_sync_names,
    .pread = file_pread,
    .pwrite = file_pwrite,
    .flush = file_flush,
    .size = file_size,
    .truncate = file_truncate,
    .zero = file_zero,
    .resolve = file_resolve,
    .desc_read = NULL, /* descriptor.c reads and renames files itself (libxml2, .tmp + rename) */
    .desc_replace = NULL,
    .lock = lock_disk_file,
    .unlock = file_unlock,
};

const struct store_ops *store_for(const char *dir_or_path)
{
  if (dir_or_path && !strncmp(dir_or_path, "rbd:", 4))
    return &store_rbd_ops;
  return &store_file_ops;
}

int store_open(struct store_obj *o, const char *dir, const char *path, bool rdwr)
{
  *o = (struct store_obj){.ops = store_for(dir ? dir : path), .fd = -1, .path = path};
  if (o->ops->open(o, dir, path, rdwr) < 0) {
    o->ops = NULL;
    return -1;
  }
  return 0;
}

int store_open_unlocked(struct store_obj *o, const char *dir, const char *path)
{
  *o = (struct store_obj){.ops = store_for(dir ? dir : path), .fd = -1, .path = path};
  if (!o->ops->open_unlocked) {
    o->ops = NULL;
    return ploop_error(PLOOP_ERR_PARAM, EOPNOTSUPP, "%s: the %s store opens no delta ahead of its lock", path,
                       store_for(dir ? dir : path)->name);
  }
  if (o->ops->open_unlocked(o, dir, path) < 0) {
    o->ops = NULL;
    return -1;
  }
  return 0;
}

int store_take_lock(struct store_obj *o)
{
  if (!o->ops || !o->ops->take_lock)
    return ploop_error(PLOOP_ERR_PARAM, EOPNOTSUPP, "%s: not opened ahead of its lock", o->path);
  return o->ops->take_lock(o);
}

int store_create(struct store_obj *o, const char *dir, const char *path)
{
  *o = (struct store_obj){.ops = store_for(dir ? dir : path), .fd = -1, .path = path};
  if (o->ops->create(o, dir, path) < 0) {
    o->ops = NULL;
    return -1;
  }
  return 0;
}

int store_remove(const char *dir, const char *path)
{
  return store_for(dir ? dir : path)->remove(dir, path);
}

int store_link(const char *dir, const char *from, const char *to)
{
  return store_for(dir ? dir : from)->link(dir, from, to);
}

int store_sync_names(const char *dir, const char *path)
{
  return store_for(dir ? dir : path)->sync_names(dir, path);
}

int store_flush_all(struct store_obj *const *objs, unsigned n, const int *extra, unsigned nextra)
{
  int fds[16];
  const char *paths[16];
  unsigned k = 0;
  for (unsigned i = 0; i < nextra && k < 16; i++) {
    fds[k] = extra[i];
    paths[k++] = PLOOP_DESCRIPTOR_NAME ".tmp";
  }
  for (unsigned i = 0; i < n; i++) {
    if (objs[i]->fd >= 0 && store_is_file(objs[i]->ops) && k < 16) {
      fds[k] = objs[i]->fd;
      paths[k++] = objs[i]->path;
    } else if (store_flush(objs[i]) < 0) {
      return -1;
    }
  }
  return k ? sync_all(fds, paths, k) : 0;
}
