/* Where a delta's bytes and a disk's descriptor live: one small struct of
 * operations per store (store-file.c: local files; store-rbd.c: Ceph RBD
 * images). The format and stack code reach bytes only through these. */
#ifndef PLOOP_STORE_H
#define PLOOP_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store_ops;

/* One open delta's bytes. */
struct store_obj {
  const struct store_ops *ops;
  int fd;           /* file store: the O_DIRECT fd the fast paths use; -1 for a store without fds */
  void *priv;       /* the store's own handle */
  const char *path; /* for messages (the delta's path) */
};

/* One asynchronous read or write (store_ops.aio). The caller embeds it in
 * its own record and keeps it, BUF included, until DONE has run. */
struct store_aio {
  void (*done)(struct store_aio *req, int rc); /* once, on a store thread; rc 0 or -errno; keep it short */
  void *buf;
  size_t len;
  uint64_t off;
  bool write;
};

/* store_zero HOW */
enum store_zero_how {
  STORE_ZERO_KEEP,     /* reads as zeros, space stays allocated (no size change) */
  STORE_ZERO_PUNCH,    /* reads as zeros, space may be released (no size change) */
  STORE_ZERO_ALLOCATE, /* only allocated (may extend the size); contents unspecified */
  STORE_ZERO_RESERVE,  /* allocated and reading as zeros, extending the size as needed */
};

struct store_ops {
  const char *name;
  /* Deltas. DIR is the disk's location (NULL: PATH is a bare name the
   * caller gave), PATH = DIR/NAME. Each sets the error on failure. */
  int (*open)(struct store_obj *o, const char *dir, const char *path, bool rdwr);
  /* Read-write without the store's writer lock, for a disk another host
   * still writes (a hand-over's standby side): nothing read through it is
   * trusted until take_lock has run. NULL when the store has no such lock
   * (a file store: the disk lock is all). */
  int (*open_unlocked)(struct store_obj *o, const char *dir, const char *path);
  /* Takes the writer lock of an object opened unlocked and refreshes what
   * the store caches (its size) from the store itself; fails (error set)
   * when the cached state cannot be trusted: the caller opens anew. */
  int (*take_lock)(struct store_obj *o);
  /* A new empty delta (size 0), exclusive, open read-write. */
  int (*create)(struct store_obj *o, const char *dir, const char *path);
  void (*close)(struct store_obj *o);
  /* -1 with errno (ENOENT when absent), no message. */
  int (*remove)(const char *dir, const char *path);
  /* TO gets FROM's bytes under a second name (file: a hard link, FROM
   * stays); a store that cannot keep two names renames (FROM goes). */
  int (*link)(const char *dir, const char *from, const char *to);
  /* The location's names made durable (file: fsync of the directory). */
  int (*sync_names)(const char *dir, const char *path);
  /* Whole-length I/O: a short read past the end zero-fills, a write past
   * the end grows the delta. Error set on failure. */
  int (*pread)(struct store_obj *o, void *buf, size_t len, uint64_t off);
  int (*pwrite)(struct store_obj *o, const void *buf, size_t len, uint64_t off);
  /* Starts REQ as pread/pwrite would run it (a write past the end grows
   * the delta first, synchronously; a read past the end gets zeros). 0:
   * REQ->done will run (perhaps before this returns); -errno: it will not.
   * NULL when the store has none (the file store's asynchronous I/O is
   * libaio on its fd, io.c). */
  int (*aio)(struct store_obj *o, struct store_aio *req);
  /* Everything completed before is durable. */
  int (*flush)(struct store_obj *o);
  /* Size in bytes and bytes the store holds for it (0 if unknown). */
  int (*size)(struct store_obj *o, uint64_t *bytes, uint64_t *stored);
  /* Sets the size (grow or cut). */
  int (*truncate)(struct store_obj *o, uint64_t bytes);
  /* -1 with errno EOPNOTSUPP when the store cannot do HOW; no message. */
  int (*zero)(struct store_obj *o, uint64_t off, uint64_t len, enum store_zero_how how);
  /* Descriptor and lock of a disk at DIR. */
  /* DIR_OR_XML -> canonical DIR and XML name; 0 or error set. */
  int (*resolve)(const char *dir_or_xml, char **dir, char **xml);
  /* The whole descriptor text (malloc'd, NUL-terminated); ENOENT error when absent. */
  int (*desc_read)(const char *dir, char **text, size_t *len);
  /* Replaces the descriptor atomically and durably. */
  int (*desc_replace)(const char *dir, const char *text, size_t len);
  /* As ploop_lock_disk: a handle >= 0 (an fd, closed by ploop_unlock_disk
   * after UNLOCK), -2 no lock needed, -1 error. UNLOCK ignores handles it
   * did not hand out. */
  int (*lock)(const char *dir, unsigned what);
  void (*unlock)(int handle);
};

extern const struct store_ops store_file_ops;
extern const struct store_ops store_rbd_ops;

/* The store for a disk location or a delta path: "rbd:..." is Ceph RBD,
 * anything else a local file. */
const struct store_ops *store_for(const char *dir_or_path);
static inline bool store_is_file(const struct store_ops *s)
{
  return s == &store_file_ops;
}

static inline int store_pread(struct store_obj *o, void *buf, size_t len, uint64_t off)
{
  return o->ops->pread(o, buf, len, off);
}
static inline int store_pwrite(struct store_obj *o, const void *buf, size_t len, uint64_t off)
{
  return o->ops->pwrite(o, buf, len, off);
}
static inline int store_flush(struct store_obj *o)
{
  return o->ops->flush(o);
}
static inline int store_size(struct store_obj *o, uint64_t *bytes)
{
  return o->ops->size(o, bytes, NULL);
}
static inline int store_truncate(struct store_obj *o, uint64_t bytes)
{
  return o->ops->truncate(o, bytes);
}
static inline int store_zero(struct store_obj *o, uint64_t off, uint64_t len, enum store_zero_how how)
{
  return o->ops->zero(o, off, len, how);
}
static inline void store_close(struct store_obj *o)
{
  if (o->ops)
    o->ops->close(o);
  o->ops = NULL;
  o->fd = -1;
  o->priv = NULL;
}
/* Opens a delta in the store DIR (or PATH, when DIR is NULL) names. */
int store_open(struct store_obj *o, const char *dir, const char *path, bool rdwr);
int store_create(struct store_obj *o, const char *dir, const char *path);
/* store_ops.open_unlocked / take_lock; EOPNOTSUPP when the store has none. */
int store_open_unlocked(struct store_obj *o, const char *dir, const char *path);
int store_take_lock(struct store_obj *o);
int store_remove(const char *dir, const char *path);
int store_link(const char *dir, const char *from, const char *to);
int store_sync_names(const char *dir, const char *path);
/* Flushes N objects, and fdatasyncs the NFDS plain FDS (a descriptor's
 * .tmp; negative ones are skipped), at once where the store allows. */
int store_flush_all(struct store_obj *const *objs, unsigned n, const int *fds, unsigned nfds);

#endif
