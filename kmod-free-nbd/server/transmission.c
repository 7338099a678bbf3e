/* NBD transmission phase: request threads take turns reading one request
 * each (under rlock), validate it in one place, run it on the disk in
 * parallel with the others, and write the whole reply under wlock. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "conn.h"
#include "nbd-protocol.h"

/* A request thread's extent arrays, allocated once when the thread starts,
 * and the payload buffer of the request it runs (from budget.c). */
struct worker {
  struct conn *c;
  struct payload_buf *pb;
  uint8_t *buf; /* pb's data: the request's size or more, 4 KiB aligned for O_DIRECT */
  struct ploop_extent *ext;
  struct nbd_block_descriptor *desc;
};

/* Host errno (from libploop) to the protocol's error values. */
uint32_t nbd_errno(int e) {
  switch (e) {
  case EPERM:
  case EROFS:
  case EACCES:
    return NBD_EPERM;
  case ENOMEM:
    return NBD_ENOMEM;
  case EINVAL:
    return NBD_EINVAL;
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
    return NBD_ENOSPC;
  case EOVERFLOW:
    return NBD_EOVERFLOW;
  case ENOTSUP:
    return NBD_ENOTSUP;
  case ESHUTDOWN:
    return NBD_ESHUTDOWN;
  default:
    return NBD_EIO;
  }
}

static bool has(uint16_t eflags, unsigned f) { return (eflags & f) != 0; }

/* Every check a request must pass before the disk sees it (the door, as in
 * nbdkit): command known and advertised, flags valid for the command,
 * range inside the disk, payload within limits, alignment if promised.
 * Returns 0 or an NBD error value. */
static uint32_t validate_request(const struct conn *c, const struct request *r, uint64_t size) {
  const uint16_t ef = c->eflags;
  const unsigned known = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_DF |
                         NBD_CMD_FLAG_REQ_ONE | NBD_CMD_FLAG_FAST_ZERO;
  bool writes = false, ranged = true;

  switch (r->type) {
  case NBD_CMD_READ:
  case NBD_CMD_CACHE:
    if (r->type == NBD_CMD_CACHE && !has(ef, NBD_FLAG_SEND_CACHE)) return NBD_EINVAL;
    break;
  case NBD_CMD_WRITE:
    writes = true;
    break;
  case NBD_CMD_TRIM:
    if (has(ef, NBD_FLAG_READ_ONLY)) return NBD_EPERM;
    if (!has(ef, NBD_FLAG_SEND_TRIM)) return NBD_EINVAL;
    writes = true;
    break;
  case NBD_CMD_WRITE_ZEROES:
    if (has(ef, NBD_FLAG_READ_ONLY)) return NBD_EPERM;
    if (!has(ef, NBD_FLAG_SEND_WRITE_ZEROES)) return NBD_EINVAL;
    writes = true;
    break;
  case NBD_CMD_FLUSH:
    if (!has(ef, NBD_FLAG_SEND_FLUSH)) return NBD_EINVAL;
    if (r->offset != 0 || r->count != 0) return NBD_EINVAL;
    ranged = false;
    break;
  case NBD_CMD_BLOCK_STATUS:
    if (!c->structured || !(c->meta_base || c->meta_depth || c->meta_dirty)) return NBD_EINVAL;
    break;
  default:
    return NBD_EINVAL;
  }

  if (r->flags & ~known) return NBD_EINVAL;
  /* FUA is valid on any command once advertised (ignored where moot). */
  if ((r->flags & NBD_CMD_FLAG_FUA) && !has(ef, NBD_FLAG_SEND_FUA)) return NBD_EINVAL;
  if ((r->flags & NBD_CMD_FLAG_NO_HOLE) && r->type != NBD_CMD_WRITE_ZEROES) return NBD_EINVAL;
  if ((r->flags & NBD_CMD_FLAG_FAST_ZERO) &&
      (r->type != NBD_CMD_WRITE_ZEROES || !has(ef, NBD_FLAG_SEND_FAST_ZERO)))
    return NBD_EINVAL;
  if ((r->flags & NBD_CMD_FLAG_DF) && (r->type != NBD_CMD_READ || !has(ef, NBD_FLAG_SEND_DF)))
    return NBD_EINVAL;
  if ((r->flags & NBD_CMD_FLAG_REQ_ONE) && r->type != NBD_CMD_BLOCK_STATUS) return NBD_EINVAL;

  if (writes && has(ef, NBD_FLAG_READ_ONLY)) return NBD_EPERM;
  if (!ranged) return 0;

  if (r->count == 0) return NBD_EINVAL;
  uint64_t end;
  if (__builtin_add_overflow(r->offset, (uint64_t)r->count, &end) || end > size)
    return writes ? NBD_ENOSPC : NBD_EINVAL;
  if ((r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE) && r->count > NBD_MAX_PAYLOAD)
    return NBD_EOVERFLOW;
  if (c->block_size_requested && ((r->offset | r->count) & (NBD_MIN_BLOCK - 1)))
    return NBD_EINVAL;
  return 0;
}

/* ---- replies -------------------------------------------------------- */

static int send_locked(struct conn *c, struct iovec *iov, int n) {
  pthread_mutex_lock(&c->wlock);
  int r = conn_writev(c, iov, n);
  pthread_mutex_unlock(&c->wlock);
  if (r < 0) {
    /* The client is gone, or took nothing for the idle timeout
     * (SO_SNDTIMEO): stop reading from it too. */
    bool timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
    if (!atomic_exchange(&c->closing, true) && timed_out)
      nbd_log("%s: client took no reply data for %u s: disconnecting", c->exp.de->name,
              g_cfg.idle_timeout);
    shutdown(c->rfd, SHUT_RDWR);
  }
  return r;
}

int reply_simple(struct conn *c, uint64_t cookie, uint32_t err, void *data, size_t len) {
  struct nbd_simple_reply h = {
      .magic = nbd_be32(NBD_SIMPLE_REPLY_MAGIC),
      .error = nbd_be32(err),
      .cookie = cookie,
  };
  struct iovec iov[2] = {{&h, sizeof h}, {data, len}};
  return send_locked(c, iov, len ? 2 : 1);
}

void chunk_header(struct nbd_structured_reply *h, uint64_t cookie, uint16_t flags,
                         uint16_t type, uint32_t len) {
  h->magic = nbd_be32(NBD_STRUCTURED_REPLY_MAGIC);
  h->flags = nbd_be16(flags);
  h->type = nbd_be16(type);
  h->cookie = cookie;
  h->length = nbd_be32(len);
}

/* An error: a structured ERROR chunk when negotiated (carries a message),
 * else a simple reply. */
int reply_error(struct conn *c, const struct request *r, uint64_t cookie, uint32_t err) {
  if (!c->structured) return reply_simple(c, cookie, err, NULL, 0);
  static const char *const names[] = {[NBD_CMD_READ] = "read", [NBD_CMD_WRITE] = "write",
                                      [NBD_CMD_FLUSH] = "flush", [NBD_CMD_TRIM] = "trim",
                                      [NBD_CMD_CACHE] = "cache", [NBD_CMD_WRITE_ZEROES] = "zero",
                                      [NBD_CMD_BLOCK_STATUS] = "block status"};
  char msg[160];
  const char *what = r->type < sizeof names / sizeof names[0] && names[r->type]
                         ? names[r->type]
                         : "unknown command";
  int n = snprintf(msg, sizeof msg, "%s at %llu+%u: %s", what, (unsigned long long)r->offset,
                   r->count, strerror((int)err));
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
  struct nbd_structured_reply h;
  struct nbd_chunk_error e = {.error = nbd_be32(err), .len = nbd_be16((uint16_t)n)};
  chunk_header(&h, cookie, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR,
               (uint32_t)(sizeof e + (size_t)n));
  struct iovec iov[3] = {{&h, sizeof h}, {&e, sizeof e}, {msg, (size_t)n}};
  return send_locked(c, iov, 3);
}

/* ---- commands ------------------------------------------------------- */

#define SPARSE_READ_MIN (64u << 10)

/* READ with structured replies: holes (depth 0) go out as OFFSET_HOLE
 * chunks without touching the disk; everything is read before the first
 * chunk is sent, so an error can still be reported cleanly. */
static int do_read_structured(struct worker *w, const struct request *r, uint64_t cookie) {
  struct conn *c = w->c;
  struct ploop_disk *disk = c->exp.disk;
  enum { MAXCH = 64 };
  struct ploop_extent *ext = w->ext;
  int n = 0;
  /* Small reads skip the map: a hole in them saves a few KiB on the wire,
   * less than the lookup costs (a hole is read as zeros without I/O). */
  if (!(r->flags & NBD_CMD_FLAG_DF) && r->count >= SPARSE_READ_MIN) {
    n = ploop_disk_block_status(disk, r->offset, r->count, ext, MAXCH);
    if (n < 0) n = 0; /* no map: read it all as data */
  }
  /* Normalise to extents covering exactly the request, data where unknown. */
  uint64_t pos = r->offset, end = r->offset + r->count;
  int m = 0;
  for (int i = 0; i < n && pos < end; i++) {
    if (ext[i].offset != pos || ext[i].length == 0) break;
    uint64_t len = ext[i].length < end - pos ? ext[i].length : end - pos;
    bool hole = ext[i].depth == 0;
    if (m > 0 && (ext[m - 1].depth == 0) == hole) {
      ext[m - 1].length += len;
    } else {
      ext[m] = (struct ploop_extent){pos, len, hole ? 0 : 1};
      m++;
    }
    pos += len;
  }
  if (pos < end) {
    if (m > 0 && ext[m - 1].depth != 0) {
      ext[m - 1].length += end - pos;
    } else {
      ext[m] = (struct ploop_extent){pos, end - pos, 1};
      m++;
    }
  }
  for (int i = 0; i < m; i++) {
    if (ext[i].depth == 0) continue;
    uint8_t *dst = w->buf + (ext[i].offset - r->offset);
    if (ploop_disk_pread(disk, dst, ext[i].length, ext[i].offset) < 0) {
      nbd_debug("read %llu+%llu: %s", (unsigned long long)ext[i].offset,
                (unsigned long long)ext[i].length, ploop_get_error());
      return reply_error(c, r, cookie, nbd_errno(ploop_get_errno()));
    }
  }
  /* Up to 3 iovecs per chunk; send in batches to keep the wlock short. */
  /* M <= MAXCH + 1: the tail the map did not cover adds one extent. */
  struct iovec iov[3 * (MAXCH + 1)];
  struct nbd_structured_reply hdr[MAXCH + 1];
  struct nbd_chunk_offset_hole holes[MAXCH + 1];
  uint64_t offs[MAXCH + 1];
  int k = 0;
  for (int i = 0; i < m; i++) {
    uint16_t fl = i == m - 1 ? NBD_REPLY_FLAG_DONE : 0;
    if (ext[i].depth == 0) {
      holes[i].offset = nbd_be64(ext[i].offset);
      holes[i].length = nbd_be32((uint32_t)ext[i].length);
      chunk_header(&hdr[i], cookie, fl, NBD_REPLY_TYPE_OFFSET_HOLE, sizeof holes[i]);
      iov[k++] = (struct iovec){&hdr[i], sizeof hdr[i]};
      iov[k++] = (struct iovec){&holes[i], sizeof holes[i]};
    } else {
      offs[i] = nbd_be64(ext[i].offset);
      chunk_header(&hdr[i], cookie, fl, NBD_REPLY_TYPE_OFFSET_DATA,
                   (uint32_t)(8 + ext[i].length));
      iov[k++] = (struct iovec){&hdr[i], sizeof hdr[i]};
      iov[k++] = (struct iovec){&offs[i], 8};
      iov[k++] = (struct iovec){w->buf + (ext[i].offset - r->offset), ext[i].length};
    }
  }
  return send_locked(c, iov, k);
}

static int do_read(struct worker *w, const struct request *r, uint64_t cookie) {
  struct conn *c = w->c;
  if (c->structured) return do_read_structured(w, r, cookie);
  if (ploop_disk_pread(c->exp.disk, w->buf, r->count, r->offset) < 0) {
    nbd_debug("read: %s", ploop_get_error());
    return reply_simple(c, cookie, nbd_errno(ploop_get_errno()), NULL, 0);
  }
  return reply_simple(c, cookie, 0, w->buf, r->count);
}

/* ploop:dirty descriptors for [OFF, OFF+LEN) from the connection's copy
 * of the dirty bitmap (see take_dirty_map in handshake.c). */
static unsigned dirty_extents(const struct conn *c, uint64_t off, uint64_t len, bool one,
                              struct nbd_block_descriptor *d) {
  const uint64_t cb = c->dirty_cluster_bytes, end = off + len;
  unsigned n = 0;
  for (uint64_t pos = off; pos < end;) {
    uint64_t vc = pos / cb, next = (vc + 1) * cb < end ? (vc + 1) * cb : end;
    uint32_t st = !c->dirty_map || vc >= c->dirty_clusters ||
                  ((c->dirty_map[vc / 8] >> (vc % 8)) & 1);
    if (n > 0 && d[n - 1].status_flags == st) {
      d[n - 1].length += (uint32_t)(next - pos);
    } else {
      if (n == NBD_MAX_EXTENTS || (one && n == 1)) break;
      d[n].length = (uint32_t)(next - pos);
      d[n].status_flags = st;
      n++;
    }
    pos = next;
  }
  return n;
}

/* One BLOCK_STATUS chunk per selected context; extents of equal status
 * merged; with REQ_ONE exactly one descriptor per context. */
static int do_block_status(struct worker *w, const struct request *r, uint64_t cookie) {
  struct conn *c = w->c;
  bool one = r->flags & NBD_CMD_FLAG_REQ_ONE;
  /* The contexts share the descriptor array, a third each. */
  struct nbd_block_descriptor *d[3] = {w->desc, w->desc + NBD_MAX_EXTENTS,
                                       w->desc + 2 * NBD_MAX_EXTENTS};
  unsigned nd[3] = {0, 0, 0};
  if (c->meta_base || c->meta_depth) {
    int n = ploop_disk_block_status(c->exp.disk, r->offset, r->count, w->ext,
                                    one ? 1 : NBD_MAX_EXTENTS);
    if (n <= 0) {
      nbd_debug("block status: %s", ploop_get_error());
      return reply_error(c, r, cookie, n < 0 ? nbd_errno(ploop_get_errno()) : NBD_EIO);
    }
    uint64_t end = r->offset + r->count, pos = r->offset;
    for (int i = 0; i < n && pos < end; i++) {
      if (w->ext[i].offset != pos || w->ext[i].length == 0) break;
      uint64_t len = w->ext[i].length < end - pos ? w->ext[i].length : end - pos;
      uint32_t st[2] = {w->ext[i].depth == 0 ? NBD_STATE_HOLE | NBD_STATE_ZERO : 0,
                        w->ext[i].depth};
      for (int k = 0; k < 2; k++) {
        if (nd[k] > 0 && d[k][nd[k] - 1].status_flags == st[k]) {
          d[k][nd[k] - 1].length += (uint32_t)len; /* total <= count < 2^32 */
        } else {
          d[k][nd[k]].length = (uint32_t)len;
          d[k][nd[k]].status_flags = st[k];
          nd[k]++;
        }
      }
      pos += len;
      if (one) break;
    }
    if (nd[0] == 0) return reply_error(c, r, cookie, NBD_EIO);
  }
  if (c->meta_dirty) nd[2] = dirty_extents(c, r->offset, r->count, one, d[2]);

  struct nbd_structured_reply h[3];
  uint32_t ids[3] = {nbd_be32(META_ID_BASE_ALLOCATION), nbd_be32(META_ID_ALLOCATION_DEPTH),
                     nbd_be32(META_ID_DIRTY)};
  bool sel[3] = {c->meta_base, c->meta_depth, c->meta_dirty};
  int last = sel[2] ? 2 : sel[1] ? 1 : 0;
  struct iovec iov[9];
  int k = 0;
  for (int x = 0; x < 3; x++) {
    if (!sel[x]) continue;
    for (unsigned i = 0; i < nd[x]; i++) {
      d[x][i].length = nbd_be32(d[x][i].length);
      d[x][i].status_flags = nbd_be32(d[x][i].status_flags);
    }
    size_t bytes = nd[x] * sizeof(struct nbd_block_descriptor);
    chunk_header(&h[x], cookie, x == last ? NBD_REPLY_FLAG_DONE : 0, NBD_REPLY_TYPE_BLOCK_STATUS,
                 (uint32_t)(4 + bytes));
    iov[k++] = (struct iovec){&h[x], sizeof h[x]};
    iov[k++] = (struct iovec){&ids[x], 4};
    iov[k++] = (struct iovec){d[x], bytes};
  }
  return send_locked(c, iov, k);
}

/* Runs a validated request and sends its reply. */
static int execute(struct worker *w, const struct request *r, uint64_t cookie) {
  struct conn *c = w->c;
  struct ploop_disk *disk = c->exp.disk;
  bool fua = r->flags & NBD_CMD_FLAG_FUA;
  int rc = 0;
  switch (r->type) {
  case NBD_CMD_READ:
    return do_read(w, r, cookie);
  case NBD_CMD_BLOCK_STATUS:
    return do_block_status(w, r, cookie);
  case NBD_CMD_WRITE:
    rc = ploop_disk_pwrite(disk, w->buf, r->count, r->offset, fua ? PLOOP_WRITE_FUA : 0);
    break;
  case NBD_CMD_FLUSH:
    rc = ploop_disk_flush(disk);
    break;
  case NBD_CMD_TRIM:
    rc = ploop_disk_discard(disk, r->offset, r->count);
    if (rc == 0 && fua) rc = ploop_disk_flush(disk);
    break;
  case NBD_CMD_WRITE_ZEROES: {
    /* Whole clusters are zeroed in the BAT; a partial one is a real write
     * of zeros, which FAST_ZERO asks us to refuse so the client can choose
     * (libploop does not tell, so the rule is applied here). */
    uint64_t cb = ploop_disk_cluster_size(disk);
    if ((r->flags & NBD_CMD_FLAG_FAST_ZERO) && (r->offset % cb != 0 || r->count % cb != 0))
      return reply_error(c, r, cookie, NBD_ENOTSUP);
    unsigned f = (r->flags & NBD_CMD_FLAG_NO_HOLE ? PLOOP_ZERO_NO_HOLE : 0) |
                 (r->flags & NBD_CMD_FLAG_FAST_ZERO ? PLOOP_ZERO_FAST : 0);
    rc = ploop_disk_write_zeroes(disk, r->offset, r->count, f);
    if (rc == 0 && fua) rc = ploop_disk_flush(disk);
    break;
  }
  case NBD_CMD_CACHE:
    /* Advisory; the disk is read with O_DIRECT, so there is no cache to fill. */
    break;
  }
  if (rc < 0) {
    int e = ploop_get_errno();
    /* FAST_ZERO's ENOTSUP is an expected answer, not a failure worth logging. */
    if (!(r->type == NBD_CMD_WRITE_ZEROES && e == ENOTSUP))
      nbd_log("%s: request %u at %llu+%u failed: %s", c->exp.de->name, r->type,
              (unsigned long long)r->offset, r->count, ploop_get_error());
    uint32_t err = nbd_errno(e);
    if (err == NBD_ENOTSUP && !(r->flags & NBD_CMD_FLAG_FAST_ZERO)) err = NBD_EIO;
    return reply_error(c, r, cookie, err);
  }
  return reply_simple(c, cookie, 0, NULL, 0);
}

/* ---- request threads ------------------------------------------------ */

/* Why threads take turns at the socket (as nbdkit's do) rather than one
 * reader handing requests to a pool: the thread that parsed a request runs
 * it, so a request costs no hand-off to another thread.  Measured on the
 * 2-core machine with a RAM-backed disk (fio nbd engine, 4k randrw QD32):
 * ~19k IOPS at ~18 us of server CPU per request, against ~16k IOPS at
 * ~22 us with a dedicated reader + pool; equal at QD1.  The read buffer is
 * shared (under rlock), so at depth the next header is usually there
 * already and costs no system call. */

#define READ_BUF (256u << 10)

static void worker_free(struct worker *w) {
  if (!w) return;
  free(w->ext);
  free(w->desc);
  free(w);
}

static struct worker *worker_alloc(struct conn *c) {
  struct worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->c = c;
  w->ext = calloc(NBD_MAX_EXTENTS, sizeof *w->ext);
  w->desc = calloc(3 * NBD_MAX_EXTENTS, sizeof *w->desc);
  if (!w->ext || !w->desc) {
    worker_free(w);
    return NULL;
  }
  return w;
}

/* Marks this thread as the one to interrupt at shutdown while it may block
 * in read(); cleared before any disk I/O, which a signal must not cut. */
static void set_reader(struct conn *c, bool on) {
  pthread_mutex_lock(&c->wk_lock);
  c->reader = pthread_self();
  atomic_store(&c->reader_valid, on);
  pthread_mutex_unlock(&c->wk_lock);
}

/* With --idle-timeout, waits until the client sends something; a client
 * that sent nothing for that long while owed no reply is disconnected.
 * 0 = readable, -1 = end the connection. */
static int wait_readable(struct conn *c) {
  const unsigned t = g_cfg.idle_timeout;
  if (t == 0 || conn_pending(c) > 0) return 0;
  for (;;) {
    struct pollfd p = {.fd = c->rfd, .events = POLLIN};
    int r = poll(&p, 1, (int)(t > INT32_MAX / 1000 ? INT32_MAX : t * 1000));
    if (r > 0) return 0;
    if (r < 0 && (errno != EINTR || atomic_load(&c->closing))) return -1;
    if (r == 0 && atomic_load(&c->inflight) == 0) {
      nbd_log("%s: client sent no request for %u s: disconnecting", c->exp.de->name, t);
      return -1;
    }
  }
}

/* Makes N bytes available in the read buffer (caller holds rlock). */
static int rb_need(struct conn *c, size_t n) {
  if (c->rb.len - c->rb.pos >= n) return 0;
  memmove(c->rb.p, c->rb.p + c->rb.pos, c->rb.len - c->rb.pos);
  c->rb.len -= c->rb.pos;
  c->rb.pos = 0;
  int rc = 0;
  set_reader(c, true);
  while (c->rb.len < n) {
    if (wait_readable(c) < 0) {
      rc = -1;
      break;
    }
    ssize_t r = conn_read_some(c, c->rb.p + c->rb.len, READ_BUF - c->rb.len);
    if (r > 0) {
      c->rb.len += (size_t)r;
    } else if (r == 0 || errno != EINTR || atomic_load(&c->closing)) {
      rc = -1;
      break;
    }
  }
  set_reader(c, false);
  return rc;
}

/* Moves N payload bytes into DST (NULL: drop them), buffered ones first. */
static int rb_take(struct conn *c, uint8_t *dst, uint64_t n) {
  size_t avail = c->rb.len - c->rb.pos;
  size_t have = avail < n ? avail : (size_t)n;
  if (dst) memcpy(dst, c->rb.p + c->rb.pos, have);
  c->rb.pos += have;
  n -= have;
  if (n == 0) return 0;
  set_reader(c, true);
  int rc = dst ? conn_read(c, dst + have, (size_t)n) : conn_discard(c, n);
  set_reader(c, false);
  if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    nbd_log("%s: client sent no data for %u s in the middle of a request: disconnecting",
            c->exp.de->name, g_cfg.idle_timeout);
  return rc;
}

/* Reads and validates one request (caller holds rlock); a write's payload
 * lands in W's buffer, or is dropped when the request is rejected.
 * Returns 0, or -1 when the connection must end (EOF, DISC, bad magic). */
static int read_request(struct conn *c, struct worker *w, struct request *r, uint32_t *err) {
  if (rb_need(c, sizeof(struct nbd_request)) < 0) return -1;
  struct nbd_request raw;
  memcpy(&raw, c->rb.p + c->rb.pos, sizeof raw);
  c->rb.pos += sizeof raw;
  *r = (struct request){
      .flags = nbd_h16(raw.flags),
      .type = nbd_h16(raw.type),
      .cookie = raw.cookie, /* echoed as sent, never byte-swapped */
      .offset = nbd_h64(raw.offset),
      .count = nbd_h32(raw.count),
  };
  if (nbd_h32(raw.magic) != NBD_REQUEST_MAGIC) {
    nbd_debug("bad request magic 0x%08x; dropping client", nbd_h32(raw.magic));
    return -1;
  }
  if (r->type == NBD_CMD_DISC) return -1; /* no reply; in-flight requests finish */
  *err = validate_request(c, r, ploop_disk_size(c->exp.disk));
  if (*err == 0 && (r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE)) {
    /* Waits here, holding rlock, while the bounds are reached: the
     * connection's next requests stay unread until replies drain. */
    w->pb = budget_acquire(c, r->count);
    if (!w->pb) {
      if (atomic_load(&c->closing)) return -1;
      *err = NBD_ENOMEM;
    } else {
      w->buf = budget_data(w->pb);
    }
  }
  /* A write's payload follows its header whatever we think of it. */
  if (r->type == NBD_CMD_WRITE) return rb_take(c, *err ? NULL : w->buf, r->count);
  return 0;
}

static void *worker_thread(void *arg);

/* Another thread joins when none is waiting to read, up to the limit: a
 * client with one request in flight costs one thread, QD32 gets more. */
static void maybe_spawn(struct conn *c) {
  if (atomic_load(&c->idle) > 0 || atomic_load(&c->closing)) return;
  pthread_mutex_lock(&c->wk_lock);
  unsigned max = g_cfg.max_workers < CONN_MAX_WORKERS ? g_cfg.max_workers : CONN_MAX_WORKERS;
  if (!c->no_more_workers && c->nworkers < max &&
      pthread_create(&c->workers[c->nworkers], NULL, worker_thread, c) == 0)
    c->nworkers++;
  pthread_mutex_unlock(&c->wk_lock);
}

static void worker_loop(struct conn *c) {
  struct worker *w = worker_alloc(c);
  if (!w) {
    nbd_log("out of memory for a request thread");
    atomic_store(&c->closing, true);
    return;
  }
  for (;;) {
    atomic_fetch_add(&c->idle, 1);
    pthread_mutex_lock(&c->rlock);
    atomic_fetch_sub(&c->idle, 1);
    if (atomic_load(&c->closing)) {
      pthread_mutex_unlock(&c->rlock);
      break;
    }
    struct request r;
    uint32_t err = 0;
    if (read_request(c, w, &r, &err) < 0) {
      atomic_store(&c->closing, true);
      pthread_mutex_unlock(&c->rlock);
      break;
    }
    atomic_fetch_add(&c->inflight, 1);
    pthread_mutex_unlock(&c->rlock);
    if (!err && c->async && async_start(c, &r, w->pb, w->buf)) {
      /* In flight on the store: its reply and the buffer's release are
       * the completion thread's; this thread reads the next request. */
      w->pb = NULL;
      w->buf = NULL;
      continue;
    }
    maybe_spawn(c);
    if (err) {
      nbd_debug("request %u at %llu+%u rejected: error %u", r.type,
                (unsigned long long)r.offset, r.count, err);
      reply_error(c, &r, r.cookie, err);
    } else {
      execute(w, &r, r.cookie);
    }
    budget_release(c, w->pb);
    w->pb = NULL;
    w->buf = NULL;
    atomic_fetch_sub(&c->inflight, 1);
  }
  budget_release(c, w->pb);
  worker_free(w);
}

static void *worker_thread(void *arg) {
  /* Shutdown is the main thread's business (signalfd); request threads
   * only take the wake-up signal that interrupts a blocked read. */
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  worker_loop(arg);
  return NULL;
}

void transmission(struct conn *c) {
  if (g_cfg.idle_timeout > 0) {
    /* A reply the client takes nothing of for that long ends it too (a
     * stuck reader must not hold its payload memory forever), and so does
     * a request whose payload stops coming.  Pipes (-s) refuse the
     * options; there is one trusted client there. */
    struct timeval tv = {.tv_sec = (time_t)g_cfg.idle_timeout};
    setsockopt(c->wfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(c->rfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* mid-request stalls */
  }
  c->rb.p = malloc(READ_BUF);
  c->rb.pos = c->rb.len = 0;
  if (ploop_disk_has_aio(c->exp.disk)) async_begin(c); /* without it, every request is a thread's */
  if (c->rb.p) worker_loop(c);
  pthread_mutex_lock(&c->wk_lock);
  c->no_more_workers = true;
  unsigned n = c->nworkers;
  pthread_mutex_unlock(&c->wk_lock);
  for (unsigned i = 0; i < n; i++) pthread_join(c->workers[i], NULL);
  async_end(c); /* after the workers: nothing starts any more; waits for what is in flight */
  free(c->rb.p);
  c->rb.p = NULL;
}
