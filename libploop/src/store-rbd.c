/* The Ceph RBD store. A disk "rbd:POOL/NAME[?conf=PATH]" keeps each delta
 * FILE as the RBD image NAME.FILE holding the ploop bytes unchanged (object
 * size 1 MiB, thin), its descriptor as the RADOS object
 * NAME.DiskDescriptor.xml (replaced whole: rados_write_full is atomic) and
 * its disk lock as RADOS locks on NAME.lock. A delta opened read-write holds
 * librbd's exclusive lock in EXCLUSIVE mode: nobody else writes it until
 * the lock is released or broken (ploop_rbd_lock_break). */
#include <dlfcn.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "store.h"
#include "store-rbd.h"
#include "store-rbd-recv.h"

/* librados and librbd are loaded on the first use of an rbd: disk: linked
 * in, their start-up (C++ initializers, dozens of libraries) cost every
 * ploop process ~0.8 s on a busy host, whether it touched Ceph or not. */
struct rbd_lib rbd_lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_error[256];

static void lib_load(void)
{
  void *rados = dlopen("librados.so.2", RTLD_NOW | RTLD_GLOBAL);
  void *rbd = rados ? dlopen("librbd.so.1", RTLD_NOW | RTLD_GLOBAL) : NULL;
  if (!rados || !rbd) {
    snprintf(lib_error, sizeof lib_error, "%s", dlerror());
    return;
  }
  /* Not through LOAD(h, f) alone: an argument passed on is macro-expanded,
   * and the call names are macros (store-rbd.h). */
#define LOAD_RADOS(f)                                                                                        \
  if (!(rbd_lib.p_##f = (__typeof__(rbd_lib.p_##f))dlsym(rados, #f)) && !lib_error[0])                      \
    snprintf(lib_error, sizeof lib_error, "rados: %s missing", #f);
#define LOAD_RBD(f)                                                                                          \
  if (!(rbd_lib.p_##f = (__typeof__(rbd_lib.p_##f))dlsym(rbd, #f)) && !lib_error[0])                        \
    snprintf(lib_error, sizeof lib_error, "rbd: %s missing", #f);
  RADOS_FUNCS(LOAD_RADOS)
  RBD_FUNCS(LOAD_RBD)
#undef LOAD_RADOS
#undef LOAD_RBD
}

static int lib_ready(void)
{
  pthread_once(&lib_once, lib_load);
  if (lib_error[0])
    return ploop_error(PLOOP_ERR_PARAM, ENOPKG, "rbd: Ceph's client libraries (librados2, librbd1) not usable: %s",
                       lib_error);
  return 0;
}

/* The process's connections, one per configuration file, kept until exit:
 * a connection is a Ceph client instance (its address is what a lock break
 * blocklists), and setting one up costs a round trip to the monitors. */
struct rbd_conn {
  char conf[512];
  rados_t cluster;
};
static struct rbd_conn conns[8];
static unsigned n_conns;
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;


/* "rbd:POOL/NAME[?conf=PATH]" */
int rbd_parse_loc(const char *s, struct rbd_loc *l)
{
  memset(l, 0, sizeof *l);
  if (strncmp(s, "rbd:", 4))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: not an rbd:POOL/NAME disk", s);
  const char *p = s + 4, *slash = strchr(p, '/'), *q = strchr(p, '?');
  const char *end = q ? q : p + strlen(p);
  if (!slash || slash > end || slash == p || slash + 1 >= end || memchr(slash + 1, '/', (size_t)(end - slash - 1)) ||
      (size_t)(slash - p) >= sizeof l->pool || (size_t)(end - slash - 1) >= sizeof l->name)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: expected rbd:POOL/NAME[?conf=PATH]", s);
  memcpy(l->pool, p, (size_t)(slash - p));
  memcpy(l->name, slash + 1, (size_t)(end - slash - 1));
  if (q) {
    if (strncmp(q, "?conf=", 6) || strlen(q + 6) >= sizeof l->conf || !q[6])
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: expected rbd:POOL/NAME?conf=PATH", s);
    snprintf(l->conf, sizeof l->conf, "%s", q + 6);
  } else if (getenv("CEPH_CONF")) {
    snprintf(l->conf, sizeof l->conf, "%s", getenv("CEPH_CONF"));
  }
  return 0;
}

int rbd_fail(const char *what, const char *name, int rc)
{
  int e = rc < 0 ? -rc : rc;
  int status = e == ENOENT ? PLOOP_ERR_NOTFOUND : e == EBUSY || e == EROFS ? PLOOP_ERR_BUSY : PLOOP_ERR_IO;
  return ploop_error(status, e, "%s: %s: %s", name, what, strerror(e));
}

int rbd_connect_pool(const struct rbd_loc *l, rados_t *cluster, rados_ioctx_t *io)
{
  if (lib_ready() < 0)
    return -1;
  pthread_mutex_lock(&conns_lock);
  struct rbd_conn *c = NULL;
  for (unsigned i = 0; i < n_conns; i++)
    if (!strcmp(conns[i].conf, l->conf))
      c = &conns[i];
  int rc = 0;
  if (!c) {
    if (n_conns == sizeof conns / sizeof conns[0]) {
      pthread_mutex_unlock(&conns_lock);
      return ploop_error(PLOOP_ERR_PARAM, EMFILE, "rbd: too many Ceph configurations in one process");
    }
    rados_t r;
    if ((rc = rados_create(&r, NULL)) < 0) {
      pthread_mutex_unlock(&conns_lock);
      return rbd_fail("rados_create", l->pool, rc);
    }
    rc = rados_conf_read_file(r, l->conf[0] ? l->conf : NULL);
    /* Acknowledged means durable: no client-side write cache (a cached
     * write is acknowledged before it reaches the OSDs). */
    if (rc == 0)
      rc = rados_conf_set(r, "rbd_cache", "false");
    if (rc == 0)
      rc = rados_connect(r);
    if (rc < 0) {
      rados_shutdown(r);
      pthread_mutex_unlock(&conns_lock);
      return ploop_error(PLOOP_ERR_IO, -rc, "rbd: connect to the Ceph cluster (%s): %s",
                         l->conf[0] ? l->conf : "default configuration", strerror(-rc));
    }
    c = &conns[n_conns++];
    snprintf(c->conf, sizeof c->conf, "%s", l->conf);
    c->cluster = r;
  }
  pthread_mutex_unlock(&conns_lock);
  if (cluster)
    *cluster = c->cluster;
  rc = rados_ioctx_create(c->cluster, l->pool, io);
  if (rc < 0)
    return rbd_fail("open pool", l->pool, rc);
  /* A full pool answers ENOSPC (EDQUOT over a quota) instead of holding
   * every write until space comes back: librados pauses writes to a full
   * pool by default, which would hang the disk's clients. librbd carries
   * the flag into the I/O of images opened on this context. */
  rados_set_pool_full_try(*io);
  return 0;
}

/* The RBD image of delta PATH in disk DIR: NAME.FILE; a bare PATH
 * (DIR NULL) names the image itself: rbd:POOL/IMAGE. */
int rbd_image_of(const char *dir, const char *path, struct rbd_loc *l, char *image, size_t len)
{
  if (!dir) {
    if (rbd_parse_loc(path, l) < 0)
      return -1;
    snprintf(image, len, "%s", l->name);
    return 0;
  }
  if (rbd_parse_loc(dir, l) < 0)
    return -1;
  size_t dl = strlen(dir);
  if (strncmp(path, dir, dl) || path[dl] != '/' || !path[dl + 1] || strchr(path + dl + 1, '/'))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: not an image of %s", path, dir);
  if ((size_t)snprintf(image, len, "%s.%s", l->name, path + dl + 1) >= len)
    return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: image name too long", path);
  return 0;
}


/* Text naming the current holders of IMG's exclusive lock. */
static void lock_owners(rbd_image_t img, char *out, size_t len)
{
  char *owners[8];
  size_t n = 8;
  rbd_lock_mode_t mode;
  snprintf(out, len, "another client");
  if (rbd_lock_get_owners(img, &mode, owners, &n) == 0 && n > 0) {
    snprintf(out, len, "%s", owners[0]);
    rbd_lock_get_owners_cleanup(owners, n);
  }
}

static int obj_open(struct store_obj *o, const char *name, struct rbd_loc *l, char *image, bool rdwr, bool lock)
{
  struct rbd_obj *r = calloc(1, sizeof *r);
  if (!r)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  pthread_mutex_init(&r->grow, NULL);
  int rc = rbd_connect_pool(l, NULL, &r->io);
  if (rc < 0)
    goto fail_free;
  rc = rdwr ? rbd_open(r->io, image, &r->img, NULL) : rbd_open_read_only(r->io, image, &r->img, NULL);
  if (rc < 0) {
    rbd_fail("open image", name, rc);
    goto fail_io;
  }
  if (rdwr && lock) {
    /* EXCLUSIVE mode: the default lock is cooperative (another client's
     * write takes it away); this one refuses other writers until released
     * or broken. */
    rc = rbd_lock_acquire(r->img, RBD_LOCK_MODE_EXCLUSIVE);
    if (rc < 0) {
      char who[256];
      lock_owners(r->img, who, sizeof who);
      ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: image %s is held by %s (ploop lock-break breaks it)", name, image,
                  who);
      rbd_close(r->img);
      goto fail_io;
    }
    r->locked = true;
  }
  rc = rbd_get_size(r->img, &r->size);
  r->img_size = r->size;
  if (rc < 0) {
    rbd_fail("size", name, rc);
    rbd_close(r->img);
    goto fail_io;
  }
  o->priv = r;
  o->fd = -1;
  return 0;
fail_io:
  rados_ioctx_destroy(r->io);
fail_free:
  pthread_mutex_destroy(&r->grow);
  free(r);
  return -1;
}

static int s_open(struct store_obj *o, const char *dir, const char *path, bool rdwr)
{
  struct rbd_loc l;
  char image[512];
  if (rbd_image_of(dir, path, &l, image, sizeof image) < 0)
    return -1;
  return obj_open(o, path, &l, image, rdwr, true);
}

static void s_close(struct store_obj *o);
static int s_remove(const char *dir, const char *path);
static int s_open_unlocked(struct store_obj *o, const char *dir, const char *path)
{
  struct rbd_loc l;
  char image[512];
  if (rbd_image_of(dir, path, &l, image, sizeof image) < 0)
    return -1;
  return obj_open(o, path, &l, image, true, false);
}

/* The image's size as its header object holds it now, asked of the OSD
 * (the rbd class's get_size: order u8, size u64 LE), not librbd's copy. */
static int header_size(struct rbd_obj *r, uint64_t *size)
{
  char id[128], oid[160], in[8], out[16];
  int rc = rbd_get_id(r->img, id, sizeof id);
  if (rc < 0)
    return rc;
  snprintf(oid, sizeof oid, "rbd_header.%s", id);
  uint64_t nosnap = htole64((uint64_t)-2); /* CEPH_NOSNAP: the head, not a snapshot */
  memcpy(in, &nosnap, 8);
  rc = rados_exec(r->io, oid, "rbd", "get_size", in, sizeof in, out, sizeof out);
  if (rc < 0)
    return rc;
  if (rc < 9)
    return -EBADMSG;
  uint64_t v;
  memcpy(&v, out + 1, 8);
  *size = le64toh(v);
  return 0;
}

static int s_take_lock(struct store_obj *o)
{
  struct rbd_obj *r = o->priv;
  if (!r->locked) {
    int rc = rbd_lock_acquire(r->img, RBD_LOCK_MODE_EXCLUSIVE);
    if (rc < 0) {
      char who[256];
      lock_owners(r->img, who, sizeof who);
      return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: image is held by %s (ploop lock-break breaks it)", o->path,
                         who);
    }
    r->locked = true;
  }
  /* Opened while another client still wrote and grew the image: librbd
   * refreshes on the header's change notices, but one that came between
   * its open's read of the header and its watch was missed (seen once in
   * ~40 hand-overs: the old size). Under the lock nobody resizes it, so
   * the header object's size is final: a cached size that differs means
   * a stale handle, and the caller opens the image anew. */
  uint64_t cached = 0, real = 0;
  int rc = rbd_get_size(r->img, &cached);
  if (rc == 0)
    rc = header_size(r, &real);
  if (rc < 0)
    return rbd_fail("size", o->path, rc);
  /* PLOOP_PREOPEN=stale (tests): as if the race above had happened */
  const char *t = getenv("PLOOP_PREOPEN");
  if (cached != real || (t && strcmp(t, "stale") == 0))
    return ploop_error(PLOOP_ERR_BUSY, ESTALE, "%s: opened ahead with a stale size (%llu, now %llu)", o->path,
                       (unsigned long long)cached, (unsigned long long)real);
  __atomic_store_n(&r->size, cached, __ATOMIC_RELEASE);
  return 0;
}

static int s_create(struct store_obj *o, const char *dir, const char *path)
{
  struct rbd_loc l;
  char image[512];
  rados_ioctx_t io;
  if (rbd_image_of(dir, path, &l, image, sizeof image) < 0 || rbd_connect_pool(&l, NULL, &io) < 0)
    return -1;
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, RBD_ORDER);
  /* Size 0: the image grows as the delta does (a write past the end of an
   * RBD image fails), so its size is the delta's file size. */
  int rc = rbd_create4(io, image, 0, opts);
  rbd_image_options_destroy(opts);
  rados_ioctx_destroy(io);
  if (rc == -EEXIST)
    return ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: create: %s", path, strerror(EEXIST));
  if (rc < 0)
    return rbd_fail("create image", path, rc);
  /* Not locked: a delta being created is named by no descriptor yet, and
   * its creator opens it again (delta_open) to use it, taking the lock. */
  if (obj_open(o, path, &l, image, true, false) < 0)
    return -1;
  if (rbd_recv_mark_new(o, ((struct rbd_obj *)o->priv)->img) < 0) { /* a receive's image, marked from the start */
    s_close(o);
    s_remove(dir, path);
    return -1;
  }
  return 0;
}

static void s_close(struct store_obj *o)
{
  struct rbd_obj *r = o->priv;
  if (!r)
    return;
  if (r->locked) {
    store_rbd_trim(o);
    rbd_lock_release(r->img);
  }
  rbd_close(r->img);
  rados_ioctx_destroy(r->io);
  pthread_mutex_destroy(&r->grow);
  free(r);
  o->priv = NULL;
}

static int s_remove(const char *dir, const char *path)
{
  struct rbd_loc l;
  char image[512];
  rados_ioctx_t io;
  if (rbd_image_of(dir, path, &l, image, sizeof image) < 0 || rbd_connect_pool(&l, NULL, &io) < 0) {
    errno = EINVAL;
    return -1;
  }
  int rc = rbd_remove(io, image);
  rados_ioctx_destroy(io);
  if (rc < 0) {
    errno = -rc;
    return -1;
  }
  return 0;
}

static int s_link(const char *dir, const char *from, const char *to)
{
  struct rbd_loc l;
  char a[512], b[512];
  rados_ioctx_t io;
  if (rbd_image_of(dir, from, &l, a, sizeof a) < 0 || rbd_image_of(dir, to, &l, b, sizeof b) < 0 ||
      rbd_connect_pool(&l, NULL, &io) < 0) {
    errno = EINVAL;
    return -1;
  }
  int rc = rbd_rename(io, a, b); /* RBD keeps one name per image: FROM goes */
  rados_ioctx_destroy(io);
  if (rc < 0) {
    errno = -rc;
    return -1;
  }
  return 0;
}

static int s_sync_names(const char *dir, const char *path)
{
  (void)dir, (void)path;
  return 0; /* an image create, remove or rename is durable once it returns */
}

static int s_pread(struct store_obj *o, void *buf, size_t len, uint64_t off)
{
  struct rbd_obj *r = o->priv;
  uint64_t size = __atomic_load_n(&r->size, __ATOMIC_ACQUIRE);
  size_t n = off >= size ? 0 : (size_t)min_u64(len, size - off);
  if (n) {
    ssize_t got = rbd_read(r->img, off, n, buf);
    if (got < 0)
      return ploop_error(PLOOP_ERR_READ, (int)-got, "%s: read at %llu: %s", o->path, (unsigned long long)off,
                         strerror((int)-got));
    n = (size_t)got;
  }
  if (n < len) /* past the end reads as zeros, as a file's EOF */
    memset((char *)buf + n, 0, len - n);
  return 0;
}


/* RBD images do not grow when written: a write past the end is cut short
 * or refused. Grow first (only ever up: a resize is one metadata update;
 * grow_ahead_locked takes steps ahead of the delta's end). */
static int grow_to(struct store_obj *o, uint64_t end)
{
  struct rbd_obj *r = o->priv;
  if (end <= __atomic_load_n(&r->size, __ATOMIC_ACQUIRE))
    return 0;
  pthread_mutex_lock(&r->grow);
  int rc = 0;
  if (end > r->size) {
    rc = rbd_grow_ahead_locked(r, end);
    if (rc == 0)
      __atomic_store_n(&r->size, end, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&r->grow);
  if (rc < 0)
    return ploop_error(PLOOP_ERR_IO, -rc, "%s: grow to %llu bytes: %s", o->path, (unsigned long long)end,
                       strerror(-rc));
  return 0;
}

static int s_pwrite(struct store_obj *o, const void *buf, size_t len, uint64_t off)
{
  struct rbd_obj *r = o->priv;
  if (grow_to(o, off + len) < 0)
    return -1;
  ssize_t n = rbd_write(r->img, off, len, buf);
  if (n < 0)
    return ploop_error(n == -ESHUTDOWN || n == -EROFS ? PLOOP_ERR_BUSY : PLOOP_ERR_IO, (int)-n,
                       "%s: write at %llu: %s%s", o->path, (unsigned long long)off, strerror((int)-n),
                       n == -ESHUTDOWN || n == -EROFS ? " (the lock was broken: another client holds the disk)"
                                                      : "");
  if ((size_t)n != len)
    return ploop_error(PLOOP_ERR_IO, EIO, "%s: short write at %llu", o->path, (unsigned long long)off);
  return 0;
}

/* librbd's completion thread: one at a time, never concurrent. A write's
 * value is 0 once it is on every replica (rbd_cache is off), a read's the
 * bytes read. */
static void aio_complete(rbd_completion_t c, void *arg)
{
  struct store_aio *req = arg;
  ssize_t v = rbd_aio_get_return_value(c);
  rbd_aio_release(c);
  int rc = 0;
  if (v < 0)
    rc = (int)v;
  else if (!req->write && (size_t)v < req->len)
    memset((char *)req->buf + v, 0, req->len - (size_t)v);
  req->done(req, rc);
}

static int s_aio(struct store_obj *o, struct store_aio *req)
{
  struct rbd_obj *r = o->priv;
  size_t len = req->len;
  if (req->write) {
    if (grow_to(o, req->off + req->len) < 0) /* as s_pwrite: the image does not grow when written */
      return -ploop_get_errno();
  } else {
    /* Past the end reads as zeros, as s_pread. */
    uint64_t size = __atomic_load_n(&r->size, __ATOMIC_ACQUIRE);
    len = req->off >= size ? 0 : (size_t)min_u64(len, size - req->off);
    if (!len) {
      memset(req->buf, 0, req->len);
      req->done(req, 0);
      return 0;
    }
  }
  rbd_completion_t c;
  int rc = rbd_aio_create_completion(req, aio_complete, &c);
  if (rc < 0)
    return rc;
  rc = req->write ? rbd_aio_write(r->img, req->off, len, req->buf, c)
                  : rbd_aio_read(r->img, req->off, len, req->buf, c);
  if (rc < 0) {
    rbd_aio_release(c);
    return rc;
  }
  return 0;
}

static int s_flush(struct store_obj *o)
{
  struct rbd_obj *r = o->priv;
  /* With rbd_cache off a write is durable when it returns; the flush is
   * for what librbd may still hold. A handle that took no lock (a delta
   * being created) may have handed the lock to the delta's own open since
   * its writes returned: nothing of it is pending, and librbd refuses its
   * flush (EROFS). */
  if (!r->locked)
    return 0;
  int rc = rbd_flush(r->img);
  return rc < 0 ? rbd_fail("flush", o->path, rc) : 0;
}

static int s_size(struct store_obj *o, uint64_t *bytes, uint64_t *stored)
{
  struct rbd_obj *r = o->priv;
  *bytes = __atomic_load_n(&r->size, __ATOMIC_ACQUIRE);
  if (stored)
    *stored = 0; /* thin: what RADOS holds is not known without a scan */
  return 0;
}

static int s_truncate(struct store_obj *o, uint64_t bytes)
{
  struct rbd_obj *r = o->priv;
  pthread_mutex_lock(&r->grow);
  int rc = 0;
  /* Up: the image may be grown ahead already; down: cut exactly. */
  if (bytes > r->img_size)
    rc = rbd_grow_ahead_locked(r, bytes);
  else if (bytes < r->size || !r->locked)
    rc = rbd_resize_exact_locked(r, bytes);
  if (rc == 0)
    __atomic_store_n(&r->size, bytes, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&r->grow);
  return rc < 0 ? rbd_fail("resize", o->path, rc) : 0;
}

static int s_zero(struct store_obj *o, uint64_t off, uint64_t len, enum store_zero_how how)
{
  struct rbd_obj *r = o->priv;
  uint64_t old = __atomic_load_n(&r->size, __ATOMIC_ACQUIRE);
  if ((how == STORE_ZERO_ALLOCATE || how == STORE_ZERO_RESERVE) && grow_to(o, off + len) < 0)
    return -1;
  if (off >= old)
    return 0; /* a range the grow just added reads as zeros already */
  len = min_u64(len, __atomic_load_n(&r->size, __ATOMIC_ACQUIRE) - off);
  /* write_zeroes, not discard: a discard below the granularity does nothing. */
  ssize_t n = rbd_write_zeroes(r->img, off, len, 0, 0);
  if (n < 0) {
    if (how == STORE_ZERO_RESERVE)
      return rbd_fail("zero", o->path, (int)n);
    errno = (int)-n;
    return -1;
  }
  return 0;
}

static int s_resolve(const char *dir_or_xml, char **dir, char **xml)
{
  struct rbd_loc l;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", dir_or_xml);
  /* rbd:POOL/NAME/DiskDescriptor.xml names the same disk. */
  size_t n = strlen(buf), dl = strlen("/" PLOOP_DESCRIPTOR_NAME);
  if (!strchr(buf, '?') && n > dl && !strcmp(buf + n - dl, "/" PLOOP_DESCRIPTOR_NAME))
    buf[n - dl] = 0;
  if (rbd_parse_loc(buf, &l) < 0)
    return -1;
  *dir = ploop_strdup(buf);
  if (!*dir)
    return -1;
  if (asprintf(xml, "%s/%s", buf, PLOOP_DESCRIPTOR_NAME) < 0) {
    free(*dir);
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  }
  return 0;
}

/* Connects to the pool of disk DIR and names its descriptor object. */
int rbd_desc_open(const char *dir, rados_ioctx_t *io, char *oid, size_t len)
{
  struct rbd_loc l;
  if (rbd_parse_loc(dir, &l) < 0 || rbd_connect_pool(&l, NULL, io) < 0)
    return -1;
  snprintf(oid, len, "%s.%s", l.name, PLOOP_DESCRIPTOR_NAME);
  return 0;
}

static int s_desc_read(const char *dir, char **text, size_t *len)
{
  rados_ioctx_t io;
  char oid[512];
  if (rbd_desc_open(dir, &io, oid, sizeof oid) < 0)
    return -1;
  uint64_t size = 0;
  time_t mtime;
  int rc = rados_stat(io, oid, &size, &mtime);
  if (rc == -ENOENT) {
    rados_ioctx_destroy(io);
    return ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: no disk here (no %s object)", dir, oid);
  }
  if (rc == 0 && size > (16u << 20))
    rc = -EFBIG;
  char *buf = rc == 0 ? malloc(size + 1) : NULL;
  if (rc == 0 && !buf)
    rc = -ENOMEM;
  int got = rc == 0 ? rados_read(io, oid, buf, size, 0) : rc;
  rados_ioctx_destroy(io);
  if (got < 0) {
    free(buf);
    return rbd_fail("read descriptor", dir, got);
  }
  buf[got] = 0;
  *text = buf;
  *len = (size_t)got;
  return 0;
}

static int s_desc_replace(const char *dir, const char *text, size_t len)
{
  rados_ioctx_t io;
  char oid[512];
  if (rbd_desc_open(dir, &io, oid, sizeof oid) < 0)
    return -1;
  /* One object written whole: readers see the old text or the new one,
   * and the call returns once every replica has it. */
  int rc = rados_write_full(io, oid, text, len);
  rados_ioctx_destroy(io);
  return rc < 0 ? rbd_fail("write descriptor", dir, rc) : 0;
}

/* ---- the disk lock: RADOS locks on NAME.lock ("writer", "deltas") ---- */
struct rbd_lock {
  int fd; /* the handle: an eventfd, closed by ploop_unlock_disk */
  rados_ioctx_t io;
  char oid[512];
  unsigned what;
};
static struct rbd_lock locks[16];
static pthread_mutex_t locks_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK_COOKIE_LEN 64

/* "ploop-PID@HOST": a later receive can tell a dead local holder (store-rbd-recv.c). */
static void lock_cookie(char *out, size_t len)
{
  char host[48] = "";
  gethostname(host, sizeof host - 1);
  snprintf(out, len, "ploop-%d@%s", (int)getpid(), host);
}

/* "client.4123 (pid 77 on host)" for messages */
static void lock_holder(rados_ioctx_t io, const char *oid, const char *name, char *out, size_t len)
{
  char tag[256], clients[128], cookies[64], addrs[128];
  size_t tl = sizeof tag, cl = sizeof clients, kl = sizeof cookies, al = sizeof addrs;
  int excl;
  snprintf(out, len, "another client");
  if (rados_list_lockers(io, oid, name, &excl, tag, &tl, clients, &cl, cookies, &kl, addrs, &al) > 0) {
    clients[sizeof clients - 1] = cookies[sizeof cookies - 1] = addrs[sizeof addrs - 1] = 0;
    snprintf(out, len, "%.127s at %.127s (%.63s)", clients, addrs, cookies);
  }
}

static int s_lock(const char *dir, unsigned what)
{
  struct rbd_loc l;
  rados_ioctx_t io;
  if (rbd_parse_loc(dir, &l) < 0 || rbd_connect_pool(&l, NULL, &io) < 0)
    return -1;
  char oid[512], cookie[LOCK_COOKIE_LEN], who[768];
  snprintf(oid, sizeof oid, "%s.lock", l.name);
  lock_cookie(cookie, sizeof cookie);
  int rc = 0;
  if (what == PLOOP_LOCK_READER) {
    rc = rados_lock_shared(io, oid, "deltas", cookie, "readers", "ploop snapshot reader", NULL, 0);
    if (rc == -EBUSY || rc == -EEXIST) {
      rados_ioctx_destroy(io);
      return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: snapshots are being merged or removed; try again later", dir);
    }
  } else {
    if (what & PLOOP_LOCK_WRITER) {
      rc = rados_lock_exclusive(io, oid, "writer", cookie, "ploop writer", NULL, 0);
      if (rc == -EBUSY || rc == -EEXIST) {
        lock_holder(io, oid, "writer", who, sizeof who);
        rados_ioctx_destroy(io);
        return ploop_error(PLOOP_ERR_BUSY, EBUSY, "%s: disk is locked by %s", dir, who);
      }
    }
    if (rc == 0 && (what & PLOOP_LOCK_DELTAS)) {
      rc = rados_lock_exclusive(io, oid, "deltas", cookie, "ploop deltas", NULL, 0);
      if (rc == -EBUSY || rc == -EEXIST) {
        if (what & PLOOP_LOCK_WRITER)
          rados_unlock(io, oid, "writer", cookie);
        rados_ioctx_destroy(io);
        return ploop_error(PLOOP_ERR_BUSY, EBUSY,
                           "%s: a snapshot of the disk is open (exported or served); close it first", dir);
      }
    }
  }
  if (rc < 0) {
    rados_ioctx_destroy(io);
    return rbd_fail("lock", dir, rc);
  }
  int fd = eventfd(0, EFD_CLOEXEC);
  pthread_mutex_lock(&locks_lock);
  struct rbd_lock *slot = NULL;
  for (unsigned i = 0; i < sizeof locks / sizeof locks[0] && !slot; i++)
    if (!locks[i].io)
      slot = &locks[i];
  if (fd >= 0 && slot) {
    *slot = (struct rbd_lock){.fd = fd, .io = io, .what = what};
    snprintf(slot->oid, sizeof slot->oid, "%s", oid);
  }
  pthread_mutex_unlock(&locks_lock);
  if (fd < 0 || !slot) {
    if (what & PLOOP_LOCK_WRITER)
      rados_unlock(io, oid, "writer", cookie);
    if (what & (PLOOP_LOCK_DELTAS | PLOOP_LOCK_READER))
      rados_unlock(io, oid, "deltas", cookie);
    rados_ioctx_destroy(io);
    if (fd >= 0)
      close(fd);
    return ploop_error(PLOOP_ERR_GENERIC, EMFILE, "%s: too many disk locks held", dir);
  }
  return fd;
}

static void s_unlock(int handle)
{
  char cookie[LOCK_COOKIE_LEN];
  lock_cookie(cookie, sizeof cookie);
  pthread_mutex_lock(&locks_lock);
  for (unsigned i = 0; i < sizeof locks / sizeof locks[0]; i++) {
    struct rbd_lock *k = &locks[i];
    if (!k->io || k->fd != handle)
      continue;
    if (k->what & PLOOP_LOCK_WRITER)
      rados_unlock(k->io, k->oid, "writer", cookie);
    if (k->what & (PLOOP_LOCK_DELTAS | PLOOP_LOCK_READER))
      rados_unlock(k->io, k->oid, "deltas", cookie);
    rados_ioctx_destroy(k->io);
    memset(k, 0, sizeof *k);
  }
  pthread_mutex_unlock(&locks_lock);
}

const struct store_ops store_rbd_ops = {
    .name = "rbd",
    .open = s_open,
    .open_unlocked = s_open_unlocked,
    .take_lock = s_take_lock,
    .create = s_create,
    .close = s_close,
    .remove = s_remove,
    .link = s_link,
    .sync_names = s_sync_names,
    .pread = s_pread,
    .pwrite = s_pwrite,
    .aio = s_aio,
    .flush = s_flush,
    .size = s_size,
    .truncate = s_truncate,
    .zero = s_zero,
    .resolve = s_resolve,
    .desc_read = s_desc_read,
    .desc_replace = s_desc_replace,
    .lock = s_lock,
    .unlock = s_unlock,
};
