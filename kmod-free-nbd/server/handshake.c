/* NBD fixed newstyle negotiation: options until NBD_OPT_GO / EXPORT_NAME
 * picks an export.  Every length from the client is checked before use;
 * a client that breaks the framing is dropped, one that sends a bad option
 * gets the protocol's error reply and may go on. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "nbd-protocol.h"
#include "ploop-tls.h"

static int send_reply(struct conn *c, uint32_t opt, uint32_t reply, const void *data,
                      size_t len) {
  struct nbd_option_reply h = {
      .magic = nbd_be64(NBD_REP_MAGIC),
      .option = nbd_be32(opt),
      .reply = nbd_be32(reply),
      .replylen = nbd_be32((uint32_t)len),
  };
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)data, len}};
  return conn_writev(c, iov, len ? 2 : 1);
}

/* An error reply carrying a human-readable message (as nbdkit does). */
static int send_error(struct conn *c, uint32_t opt, uint32_t err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int send_error(struct conn *c, uint32_t opt, uint32_t err, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
  nbd_debug("option %u: error 0x%x: %s", opt, err, msg);
  return send_reply(c, opt, err, msg, (size_t)n);
}

static int send_info(struct conn *c, uint32_t opt, uint16_t type, const void *payload,
                     size_t len) {
  char buf[2 + NBD_MAX_STRING];
  uint16_t t = nbd_be16(type);
  if (len > NBD_MAX_STRING) len = NBD_MAX_STRING;
  memcpy(buf, &t, 2);
  memcpy(buf + 2, payload, len);
  return send_reply(c, opt, NBD_REP_INFO, buf, 2 + len);
}

/* The canonical name of the export REF (the one listed by NBD_OPT_LIST). */
static void export_name_of(const struct export_ref *ref, char *out, size_t len) {
  if (ref->snap) {
    /* Listed without braces: they need escaping in URIs. */
    snprintf(out, len, "%s@%.36s", ref->de->name, ref->snap->guid + 1);
  } else {
    snprintf(out, len, "%s", ref->de->name);
  }
}

static int list_one(void *opaque, const char *name, const char *desc) {
  struct conn *c = opaque;
  size_t nl = strlen(name), dl = strlen(desc);
  char buf[4 + 2 * NBD_MAX_STRING];
  if (nl > NBD_MAX_STRING || dl > NBD_MAX_STRING) return 0;
  uint32_t be = nbd_be32((uint32_t)nl);
  memcpy(buf, &be, 4);
  memcpy(buf + 4, name, nl);
  memcpy(buf + 4 + nl, desc, dl);
  return send_reply(c, NBD_OPT_LIST, NBD_REP_SERVER, buf, 4 + nl + dl);
}

/* NBD_OPT_INFO and NBD_OPT_GO: u32 namelen, name, u16 n, u16 info[n].
 * Returns 1 when GO succeeded (enter transmission), 0 to go on, -1 to drop. */
static int opt_info_go(struct conn *c, uint32_t opt, const uint8_t *data, uint32_t len) {
  if (len < 6) return send_error(c, opt, NBD_REP_ERR_INVALID, "option too short");
  uint32_t namelen = nbd_get32(data);
  if (namelen > NBD_MAX_STRING || namelen > len - 6)
    return send_error(c, opt, NBD_REP_ERR_INVALID, "bad export name length");
  uint16_t nreq = nbd_get16(data + 4 + namelen);
  if ((uint64_t)len != 6ull + namelen + 2ull * nreq)
    return send_error(c, opt, NBD_REP_ERR_INVALID, "option length does not match its content");
  char name[NBD_MAX_STRING + 1];
  memcpy(name, data + 4, namelen);
  name[namelen] = 0;

  bool want_name = false, want_desc = false, want_bs = false;
  for (uint16_t i = 0; i < nreq; i++) {
    uint16_t t = nbd_get16(data + 6 + namelen + 2u * i);
    if (t == NBD_INFO_NAME) want_name = true;
    else if (t == NBD_INFO_DESCRIPTION) want_desc = true;
    else if (t == NBD_INFO_BLOCK_SIZE) want_bs = true;
  }

  struct export_ref ref;
  char msg[256];
  if (export_acquire(name, &ref, msg, sizeof msg) < 0)
    return send_error(c, opt, NBD_REP_ERR_UNKNOWN, "%s", msg);

  uint16_t eflags = export_flags(&ref, c->structured);
  struct nbd_info_export ie = {
      .info = nbd_be16(NBD_INFO_EXPORT),
      .exportsize = nbd_be64(ploop_disk_size(ref.disk)),
      .eflags = nbd_be16(eflags),
  };
  struct nbd_info_block_size bs = {
      .info = nbd_be16(NBD_INFO_BLOCK_SIZE),
      .minimum = nbd_be32(NBD_MIN_BLOCK),
      .preferred = nbd_be32(NBD_PREFERRED_BLOCK),
      .maximum = nbd_be32(NBD_MAX_PAYLOAD),
  };
  int r = send_reply(c, opt, NBD_REP_INFO, &ie, sizeof ie);
  /* Sent even when not asked: the spec allows it, and it is the truth. */
  if (r == 0) r = send_reply(c, opt, NBD_REP_INFO, &bs, sizeof bs);
  if (r == 0 && want_name) {
    char canon[NBD_MAX_STRING];
    export_name_of(&ref, canon, sizeof canon);
    r = send_info(c, opt, NBD_INFO_NAME, canon, strlen(canon));
  }
  if (r == 0 && want_desc) {
    char desc[NBD_MAX_STRING];
    if (ref.snap)
      snprintf(desc, sizeof desc, "ploop snapshot %s of %s (read-only)", ref.snap->guid,
               ref.de->dir);
    else
      snprintf(desc, sizeof desc, "ploop disk %s", ref.de->dir);
    r = send_info(c, opt, NBD_INFO_DESCRIPTION, desc, strlen(desc));
  }
  if (r == 0) r = send_reply(c, opt, NBD_REP_ACK, NULL, 0);
  if (r < 0 || opt == NBD_OPT_INFO) {
    export_release(&ref);
    return r;
  }
  c->exp = ref;
  c->eflags = eflags;
  c->block_size_requested = want_bs;
  /* Contexts were chosen for one export: they do not carry over to another. */
  if (strcmp(c->meta_export, name) != 0) c->meta_base = c->meta_depth = c->meta_dirty = false;
  return 1;
}

/* NBD_OPT_EXPORT_NAME: data is the bare name; no error reply exists, so an
 * unknown name drops the connection.  Returns 1 on success, -1 to drop. */
static int opt_export_name(struct conn *c, const uint8_t *data, uint32_t len) {
  if (len > NBD_MAX_STRING) return -1;
  char name[NBD_MAX_STRING + 1], msg[256];
  memcpy(name, data, len);
  name[len] = 0;
  struct export_ref ref;
  if (export_acquire(name, &ref, msg, sizeof msg) < 0) {
    nbd_log("client asked for export '%s': %s; dropping it", name, msg);
    return -1;
  }
  struct nbd_export_name_reply r;
  memset(&r, 0, sizeof r);
  c->eflags = export_flags(&ref, c->structured);
  r.exportsize = nbd_be64(ploop_disk_size(ref.disk));
  r.eflags = nbd_be16(c->eflags);
  if (conn_write(c, &r, c->no_zeroes ? 10 : sizeof r) < 0) {
    export_release(&ref);
    return -1;
  }
  c->exp = ref;
  if (strcmp(c->meta_export, name) != 0) c->meta_base = c->meta_depth = c->meta_dirty = false;
  return 1;
}

static int send_meta(struct conn *c, uint32_t opt, uint32_t id, const char *name) {
  char buf[4 + 64];
  size_t nl = strlen(name);
  uint32_t be = nbd_be32(id);
  memcpy(buf, &be, 4);
  memcpy(buf + 4, name, nl);
  return send_reply(c, opt, NBD_REP_META_CONTEXT, buf, 4 + nl);
}

/* LIST_META_CONTEXT / SET_META_CONTEXT: u32 namelen, name, u32 n,
 * n x (u32 len, query).  Unknown namespaces are ignored, as required. */
static int opt_meta(struct conn *c, uint32_t opt, const uint8_t *data, uint32_t len) {
  bool set = opt == NBD_OPT_SET_META_CONTEXT;
  if (set && !c->structured)
    return send_error(c, opt, NBD_REP_ERR_INVALID, "structured replies not negotiated");
  if (len < 8) return send_error(c, opt, NBD_REP_ERR_INVALID, "option too short");
  uint32_t namelen = nbd_get32(data);
  if (namelen > NBD_MAX_STRING || namelen > len - 8)
    return send_error(c, opt, NBD_REP_ERR_INVALID, "bad export name length");
  char name[NBD_MAX_STRING + 1];
  memcpy(name, data + 4, namelen);
  name[namelen] = 0;
  uint32_t nq = nbd_get32(data + 4 + namelen);
  /* First pass validates the framing, second one answers. */
  uint32_t pos = 8 + namelen;
  for (uint32_t i = 0; i < nq; i++) {
    if (len - pos < 4) return send_error(c, opt, NBD_REP_ERR_INVALID, "truncated query");
    uint32_t ql = nbd_get32(data + pos);
    if (ql > NBD_MAX_STRING || ql > len - pos - 4)
      return send_error(c, opt, NBD_REP_ERR_INVALID, "bad query length");
    pos += 4 + ql;
  }
  if (pos != len) return send_error(c, opt, NBD_REP_ERR_INVALID, "trailing option data");

  struct export_ref ref;
  char msg[256];
  if (export_acquire(name, &ref, msg, sizeof msg) < 0)
    return send_error(c, opt, NBD_REP_ERR_UNKNOWN, "%s", msg);
  bool dirty_ok = !ref.snap && ref.de->dirty_tracking;
  export_release(&ref);

  if (set) {
    c->meta_base = c->meta_depth = c->meta_dirty = false;
    snprintf(c->meta_export, sizeof c->meta_export, "%s", name);
  }
  int r = 0;
  if (!set && nq == 0) {
    r = send_meta(c, opt, META_ID_BASE_ALLOCATION, META_BASE_ALLOCATION);
    if (r == 0) r = send_meta(c, opt, META_ID_ALLOCATION_DEPTH, META_ALLOCATION_DEPTH);
    if (r == 0 && dirty_ok) r = send_meta(c, opt, META_ID_DIRTY, META_DIRTY);
  }
  pos = 8 + namelen;
  for (uint32_t i = 0; i < nq && r == 0; i++) {
    uint32_t ql = nbd_get32(data + pos);
    const char *q = (const char *)data + pos + 4;
    pos += 4 + ql;
#define QUERY_IS(s) (ql == sizeof(s) - 1 && memcmp(q, s, ql) == 0)
    bool base = QUERY_IS(META_BASE_ALLOCATION) || (!set && QUERY_IS("base:"));
    bool depth = QUERY_IS(META_ALLOCATION_DEPTH) || (!set && QUERY_IS("ploop:"));
    bool dirty = dirty_ok && (QUERY_IS(META_DIRTY) || (!set && QUERY_IS("ploop:")));
#undef QUERY_IS
    if (base && !(set && c->meta_base)) {
      if (set) c->meta_base = true;
      r = send_meta(c, opt, META_ID_BASE_ALLOCATION, META_BASE_ALLOCATION);
    }
    if (depth && r == 0 && !(set && c->meta_depth)) {
      if (set) c->meta_depth = true;
      r = send_meta(c, opt, META_ID_ALLOCATION_DEPTH, META_ALLOCATION_DEPTH);
    }
    if (dirty && r == 0 && !(set && c->meta_dirty)) {
      if (set) c->meta_dirty = true;
      r = send_meta(c, opt, META_ID_DIRTY, META_DIRTY);
    }
  }
  if (r == 0) r = send_reply(c, opt, NBD_REP_ACK, NULL, 0);
  return r;
}

/* ploop:dirty answers from a copy taken now: one drain of in-flight I/O per
 * client instead of one per BLOCK_STATUS.  Without a copy, every cluster
 * reads as changed, which is always a safe answer for a backup. */
static void take_dirty_map(struct conn *c) {
  if (!c->meta_dirty) return;
  struct ploop_disk *disk = c->exp.disk;
  uint64_t cl = ploop_disk_cluster_size(disk);
  uint64_t clusters = (ploop_disk_size(disk) + cl - 1) / cl;
  uint8_t *map = calloc(1, (size_t)((clusters + 7) / 8) + 1);
  if (map && ploop_disk_dirty_get(disk, map, (size_t)((clusters + 7) / 8), false) == 0) {
    c->dirty_map = map;
    c->dirty_clusters = clusters;
  } else {
    free(map);
  }
  c->dirty_cluster_bytes = cl;
}

/* NBD_OPT_STARTTLS: ACK, then the TLS handshake on the same socket.  What
 * was negotiated in the clear is forgotten, as the protocol requires.
 * Returns 0 to go on (in TLS), -1 to drop the client. */
static int opt_starttls(struct conn *c, uint32_t len) {
  const uint32_t opt = NBD_OPT_STARTTLS;
  if (len != 0) return send_error(c, opt, NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
  if (g_cfg.tls == TLS_OFF) return send_error(c, opt, NBD_REP_ERR_UNSUP, "TLS is not enabled on this server");
  if (c->tls) return send_error(c, opt, NBD_REP_ERR_INVALID, "TLS already negotiated");
  if (send_reply(c, opt, NBD_REP_ACK, NULL, 0) < 0) return -1;
  char err[512];
  c->tls = ploop_tls_server(g_cfg.tls_creds, c->rfd, c->wfd, err, sizeof err);
  if (!c->tls) {
    nbd_log("client refused: %s", err);
    return -1;
  }
  nbd_debug("TLS established with %s", ploop_tls_peer(c->tls));
  c->structured = false;
  c->meta_base = c->meta_depth = c->meta_dirty = false;
  c->meta_export[0] = 0;
  return 0;
}

int handshake(struct conn *c) {
  struct nbd_new_handshake hs = {
      .nbdmagic = nbd_be64(NBD_MAGIC),
      .version = nbd_be64(NBD_OPTS_MAGIC),
      .gflags = nbd_be16(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES),
  };
  if (conn_write(c, &hs, sizeof hs) < 0) return -1;
  uint32_t cflags;
  if (conn_read(c, &cflags, sizeof cflags) < 0) return -1;
  cflags = nbd_h32(cflags);
  if (cflags & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
    nbd_debug("client sent unknown handshake flags 0x%x; dropping it", cflags);
    return -1;
  }
  if (!(cflags & NBD_FLAG_C_FIXED_NEWSTYLE)) {
    nbd_debug("client does not speak fixed newstyle; dropping it");
    return -1;
  }
  c->no_zeroes = cflags & NBD_FLAG_C_NO_ZEROES;

  uint8_t *data = malloc(NBD_MAX_OPTION_DATA);
  if (!data) return -1;
  int result = -1;
  for (unsigned n = 0; n < NBD_MAX_OPTIONS; n++) {
    struct nbd_option_header oh;
    if (conn_read(c, &oh, sizeof oh) < 0) break;
    if (nbd_h64(oh.version) != NBD_OPTS_MAGIC) {
      nbd_debug("bad option magic; dropping client");
      break;
    }
    uint32_t opt = nbd_h32(oh.option), len = nbd_h32(oh.optlen);
    if (len > NBD_MAX_OPTION_DATA) {
      nbd_debug("option %u with %u bytes of data is too long; dropping client", opt, len);
      break;
    }
    if (conn_read(c, data, len) < 0) break;
    if (g_stopping) {
      send_error(c, opt, NBD_REP_ERR_SHUTDOWN, "server is shutting down");
      break;
    }
    int r;
    /* FORCEDTLS: nothing but STARTTLS and ABORT before TLS, and no export
     * name or list leaks out. EXPORT_NAME has no error reply: hang up. */
    if (g_cfg.tls == TLS_REQUIRE && !c->tls && opt != NBD_OPT_STARTTLS && opt != NBD_OPT_ABORT) {
      if (opt == NBD_OPT_EXPORT_NAME) {
        nbd_debug("plaintext client asked for an export while TLS is required; dropping it");
        break;
      }
      if (send_error(c, opt, NBD_REP_ERR_TLS_REQD, "TLS is required: use STARTTLS first") < 0)
        break;
      continue;
    }
    switch (opt) {
    case NBD_OPT_STARTTLS:
      r = opt_starttls(c, len);
      break;
    case NBD_OPT_EXPORT_NAME:
      r = opt_export_name(c, data, len);
      break;
    case NBD_OPT_ABORT:
      send_reply(c, opt, NBD_REP_ACK, NULL, 0); /* the client may already be gone */
      r = -1;
      break;
    case NBD_OPT_LIST:
      if (len != 0) {
        r = send_error(c, opt, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
      } else {
        r = export_list(list_one, c);
        if (r == 0) r = send_reply(c, opt, NBD_REP_ACK, NULL, 0);
      }
      break;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
      r = opt_info_go(c, opt, data, len);
      break;
    case NBD_OPT_STRUCTURED_REPLY:
      if (len != 0) {
        r = send_error(c, opt, NBD_REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
      } else if (c->structured) {
        r = send_error(c, opt, NBD_REP_ERR_INVALID, "structured replies already negotiated");
      } else {
        c->structured = true;
        r = send_reply(c, opt, NBD_REP_ACK, NULL, 0);
      }
      break;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
      r = opt_meta(c, opt, data, len);
      break;
    default: /* EXTENDED_HEADERS and anything newer */
      r = send_error(c, opt, NBD_REP_ERR_UNSUP, "option %u not supported", opt);
      break;
    }
    if (r != 0) {
      result = r > 0 ? 0 : -1;
      if (result == 0) take_dirty_map(c);
      break;
    }
  }
  free(data);
  return result;
}
