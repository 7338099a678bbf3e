/* ploop_receive: applies one disk stream (formats/ploop-stream.md). Every
 * layer of the stream goes into a new delta file, written direct with many
 * writes in flight; only after the end frame is verified does a descriptor
 * rewrite (.tmp, fsync, rename) make them part of the disk. Before that
 * nothing the disk's descriptor names has changed, so a failure only has
 * to remove the new files. ploop_receive_device writes an incremental
 * stream's clusters in place into a device that shows the base state (an
 * attached disk), with the same checks. */
#include <dirent.h>
#include <libgen.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "store-rbd-recv.h"
#include "stream-receive.h"

static struct ploop_delta *cur_delta(struct receiver *r)
{
  return r->layers[r->n_layers - 1].d;
}

/* Submits the writes started, collects the finished ones (waiting for at
 * least one when WAIT) and publishes their clusters. */
static int collect(struct receiver *r, bool wait)
{
  unsigned fin[RECV_MAX_DEPTH];
  bool failed[RECV_MAX_DEPTH];
  int got = wait ? aio_reap(&r->aio, fin, failed) : aio_poll(&r->aio, fin, failed);
  if (got < 0)
    return -1;
  int rc = 0;
  for (int i = 0; i < got; i++) {
    struct wslot *w = &r->slot[fin[i]];
    if (w->fresh)
      delta_alloc_finish(cur_delta(r), w->vc, failed[i] ? 0 : w->off);
    w->busy = false;
    if (failed[i])
      rc = -1;
  }
  return rc < 0 ? -1 : got;
}

static int drain(struct receiver *r)
{
  int rc = 0, got;
  while ((got = collect(r, true)) != 0)
    if (got < 0)
      rc = -1;
  return rc;
}

static int free_slot(struct receiver *r)
{
  for (;;) {
    for (unsigned s = 0; s < r->depth; s++)
      if (!r->slot[s].busy)
        return (int)s;
    if (collect(r, true) < 0)
      return -1;
  }
}

/* Starts the write of slot S's cluster VC from BUF into the current layer. */
static int start_write(struct receiver *r, unsigned s, uint64_t vc, const uint8_t *buf)
{
  struct wslot *w = &r->slot[s];
  if (r->dev >= 0) {
    /* In place; the device ends at the disk's size, which may cut the last cluster. */
    uint64_t off = vc * r->cb, len = r->dev_bytes - off < r->cb ? r->dev_bytes - off : r->cb;
    *w = (struct wslot){.vc = vc, .off = off, .busy = true};
    aio_start(&r->aio, s, r->dev, "the device", (void *)buf, (size_t)len, off, 1);
    return collect(r, false) < 0 ? -1 : 0;
  }
  struct ploop_delta *d = cur_delta(r);
  uint64_t off;
  int a = delta_alloc_begin(d, vc, &off);
  if (a < 0)
    return -1;
  w->vc = vc;
  w->fresh = a == 0;
  w->off = DELTA_OFF(off);
  /* New clusters are appended: the file is extended ahead of the writes, a
   * queue's worth at a time (direct writes inside i_size run in parallel). */
  if (w->fresh && w->off + r->cb > r->reserved) {
    uint64_t end = w->off + (uint64_t)r->depth * r->cb;
    if (store_truncate(&d->so, end) < 0) {
      delta_alloc_finish(d, vc, 0);
      return ploop_error_wrap("extend");
    }
    r->reserved = end;
  }
  w->busy = true;
  aio_start_obj(&r->aio, s, &d->so, (void *)buf, r->cb, w->off, 1);
  /* Out at once: the disk works while the next frames arrive. */
  return collect(r, false) < 0 ? -1 : 0;
}

static int mark_seen(struct receiver *r, uint64_t vc)
{
  if (r->seen[vc / 8] & (1u << (vc % 8)))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: cluster %llu sent twice in one layer",
                       (unsigned long long)r->frames, (unsigned long long)vc);
  r->seen[vc / 8] |= (uint8_t)(1u << (vc % 8));
  return 0;
}

/* "<base_file>.{uuid}" into OUT (NAME_MAX + 1 bytes). */
static void delta_file_name(struct receiver *r, char *out)
{
  char uuid[PLOOP_UUID_LEN + 1];
  ploop_uuid_generate(uuid);
  size_t b = strlen(r->base_file);
  memcpy(out, r->base_file, b);
  out[b] = '.';
  memcpy(out + b + 1, uuid, sizeof uuid);
}

/* DIR/FILE into OUT (PATH_MAX bytes). */
static int join_path(const struct receiver *r, const char *file, char *out)
{
  size_t a = strlen(r->dir), b = strlen(file);
  if (a + 1 + b >= PATH_MAX)
    return ploop_error(PLOOP_ERR_PARAM, ENAMETOOLONG, "%s: path too long", r->dir);
  memcpy(out, r->dir, a);
  out[a] = '/';
  memcpy(out + a + 1, file, b + 1);
  return 0;
}

/* A new delta of the stream's geometry, marked in use until sealed. */
static struct ploop_delta *new_delta(struct receiver *r, const char *path, bool in_use, struct store_obj *so)
{
  struct ploop_delta_create_params p = {
      .size_bytes = r->h.virtual_bytes, .cluster_sectors = r->h.cluster_bytes / 512, .version = 2};
  if (delta_create_file_nosync(r->dir, path, &p, in_use, so) < 0)
    return NULL;
  if (!in_use)
    return NULL;
  struct ploop_delta *d = delta_open(r->dir, path, PLOOP_OPEN_RDWR | DELTA_OPEN_FRESH);
  store_close(so);
  return d;
}

static int open_layer(struct receiver *r, const char *guid, const char *parent, uint64_t frame)
{
  /* A layer stacks on the one before it, or (a branch of a full stream's
   * tree) on any layer before it; the first on the stream's base. */
  const char *want = r->n_layers ? r->layers[r->n_layers - 1].guid : r->h.base_guid;
  bool known = !strcmp(parent, want);
  for (unsigned i = 0; !known && r->full && i + 1 < r->n_layers; i++)
    known = !strcmp(parent, r->layers[i].guid);
  if (!known)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL,
                       "stream: frame %llu: snapshot %s has parent %s, expected %s",
                       (unsigned long long)frame, guid, parent, want);
  if (!strcmp(guid, PLOOP_NULL_GUID) || !strcmp(guid, PLOOP_TOP_GUID))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: reserved snapshot GUID %s",
                       (unsigned long long)frame, guid);
  for (unsigned i = 0; i < r->n_layers; i++)
    if (!strcmp(r->layers[i].guid, guid))
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: snapshot %s sent twice",
                         (unsigned long long)frame, guid);
  if (r->desc && ploop_descriptor_find_image(r->desc, guid))
    return ploop_error(PLOOP_ERR_PARAM, EEXIST, "%s: already holds snapshot %s", r->dir, guid);
  /* 126 snapshots and the top at most, as ploop_disk_snapshot allows. */
  size_t have = r->desc ? r->desc->n_images : 1;
  if (r->n_layers + have >= PLOOP_MAX_DELTAS - 1)
    return ploop_error(PLOOP_ERR_PARAM, EMLINK, "%s: at most %u snapshots", r->dir, PLOOP_MAX_DELTAS - 2);
  struct layer *l = &r->layers[r->n_layers];
  snprintf(l->guid, sizeof l->guid, "%s", guid);
  snprintf(l->parent, sizeof l->parent, "%s", parent);
  if (r->dev >= 0) { /* every layer goes into the device, the newest last */
    r->n_layers++;
    memset(r->seen, 0, div_round_up(r->clusters, 8));
    r->round_closed = false;
    return 0;
  }
  if (r->full && r->n_layers == 0)
    snprintf(l->file, sizeof l->file, "%s", PLOOP_DEFAULT_IMAGE_NAME);
  else
    delta_file_name(r, l->file);
  if (join_path(r, l->file, l->path) < 0)
    return -1;
  struct store_obj so = {.fd = -1};
  l->d = new_delta(r, l->path, true, &so);
  if (!l->d)
    recv_remove_new(r, l->path);
  if (!l->d)
    return -1;
  r->n_layers++;
  uint64_t size;
  r->reserved = store_size(&l->d->so, &size) == 0 ? size : 0;
  memset(r->seen, 0, div_round_up(r->clusters, 8));
  r->round_closed = false;
  return 0;
}

/* The layer's writes done, its unused reserve given back, then its BAT and
 * a clean header durable: the delta is final. */
static int seal_layer(struct receiver *r)
{
  if (!r->n_layers)
    return 0;
  if (r->dev >= 0)
    return drain(r); /* a layer's clusters in before the next layer's overwrite them */
  struct ploop_delta *d = cur_delta(r);
  if (!d->rdwr)
    return 0;
  if (drain(r) < 0)
    return -1;
  uint64_t used = d->alloc_head * r->cb;
  if (r->reserved > used && store_truncate(&d->so, used) < 0)
    return -1;
  if (delta_seal_begin(d) < 0)
    return -1;
  if (store_flush(&d->so) < 0)
    return -1;
  d->rdwr = false;
  return 0;
}

static int read_payload(struct receiver *r, void *buf, size_t len)
{
  char what[64];
  snprintf(what, sizeof what, "frame %llu", (unsigned long long)r->frames);
  return stream_read_full(&r->in, buf, len, what);
}

static int on_data(struct receiver *r, const struct stream_frame *f)
{
  if (mark_seen(r, f->arg) < 0)
    return -1;
  int s = free_slot(r);
  if (s < 0)
    return -1;
  uint8_t *b = r->buf + (size_t)s * r->cb;
  if (f->flags & PLOOP_FRAME_DEFLATED) {
    if (read_payload(r, r->zin, f->payload_bytes) < 0)
      return -1;
    uLongf out = (uLongf)f->length;
    if (uncompress(b, &out, r->zin, f->payload_bytes) != Z_OK || out != f->length)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: bad deflated payload",
                         (unsigned long long)r->frames);
  } else if (read_payload(r, b, f->payload_bytes) < 0) {
    return -1;
  }
  if (!stream_sum_ok(stream_hash(b, f->length), f->payload_hash))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: payload checksum mismatch",
                       (unsigned long long)r->frames);
  if (f->length < r->cb)
    memset(b + f->length, 0, r->cb - f->length);
  r->data_frames++;
  r->data_bytes += f->length;
  if (r->progress && (r->data_frames % 16 == 0))
    r->progress(r->opaque, r->data_frames * r->cb, r->h.data_clusters * r->cb);
  return start_write(r, (unsigned)s, f->arg, b);
}

/* The range must read as zeros in this layer's state. With nothing below
 * (the first layer of a full stream) that is what an absent cluster reads. */
static int on_zero(struct receiver *r, const struct stream_frame *f)
{
  bool nothing_below = r->full && r->n_layers == 1;
  for (uint64_t vc = f->arg; vc < f->arg + f->length; vc++) {
    if (mark_seen(r, vc) < 0)
      return -1;
    if (nothing_below)
      continue;
    int s = free_slot(r);
    if (s < 0 || start_write(r, (unsigned)s, vc, r->zero) < 0)
      return -1;
  }
  return 0;
}

static void round_add(struct receiver *r, const struct stream_frame *f)
{
  uint64_t le = htole64(f->checksum);
  XXH3_64bits_update(r->round, &le, sizeof le);
  r->round_frames++;
}

/* Reads frames up to and including the end frame. */
static int read_frames(struct receiver *r)
{
  bool snapshots = r->h.flags & PLOOP_STREAM_SNAPSHOTS;
  if (!snapshots && open_layer(r, r->h.guid, r->h.base_guid, 0) < 0)
    return -1;
  for (;; r->frames++) {
    struct ploop_stream_frame raw;
    struct stream_frame f;
    char what[64];
    snprintf(what, sizeof what, "frame %llu", (unsigned long long)r->frames);
    if (stream_read_full(&r->in, &raw, sizeof raw, what) < 0 ||
        stream_frame_decode(&raw, &r->h, r->frames, &f) < 0)
      return -1;
    unsigned long long n = r->frames;
    if (f.type != PLOOP_FRAME_SNAPSHOT && f.type != PLOOP_FRAME_END && !r->n_layers)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL,
                         "stream: frame %llu: data before the first snapshot frame", n);
    if ((f.type == PLOOP_FRAME_DATA || f.type == PLOOP_FRAME_ZERO) && r->round_closed)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: data after the end of its round", n);
    switch (f.type) {
    case PLOOP_FRAME_DATA:
      if (on_data(r, &f) < 0)
        return -1;
      break;
    case PLOOP_FRAME_ZERO:
      if (on_zero(r, &f) < 0)
        return -1;
      break;
    case PLOOP_FRAME_SNAPSHOT: {
      struct ploop_stream_snapshot shot;
      if (read_payload(r, &shot, sizeof shot) < 0)
        return -1;
      if (!stream_sum_ok(stream_hash(&shot, sizeof shot), f.payload_hash))
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: payload checksum mismatch", n);
      if (r->n_layers && !r->round_closed)
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL,
                           "stream: frame %llu: snapshot before the end of a round", n);
      char g[PLOOP_UUID_LEN + 1], p[PLOOP_UUID_LEN + 1];
      stream_guid_from_wire(shot.guid, g);
      stream_guid_from_wire(shot.parent, p);
      if (seal_layer(r) < 0 || open_layer(r, g, p, n) < 0)
        return -1;
      break;
    }
    case PLOOP_FRAME_ROUND:
      if (r->round_closed)
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: empty round", n);
      if (f.length != r->round_frames || !stream_sum_ok(f.arg, XXH3_64bits_digest(r->round)))
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: round digest mismatch", n);
      XXH3_64bits_reset(r->round);
      r->round_frames = 0;
      r->round_closed = true;
      continue; /* not part of the next round's digest */
    case PLOOP_FRAME_END:
      if (!r->round_closed)
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: end before the end of a round", n);
      if (f.arg != r->frames || f.length != r->data_frames)
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: end frame counts disagree", n);
      if (strcmp(r->layers[r->n_layers - 1].guid, r->h.guid))
        return ploop_error(PLOOP_ERR_CORRUPT, EINVAL,
                           "stream: frame %llu: last snapshot is not the stream's %s", n, r->h.guid);
      return 0;
    }
    round_add(r, &f);
  }
}

/* The received layers become snapshots, a new empty top above them: one
 * descriptor rewrite, after every new file is durable. */
static int commit(struct receiver *r)
{
  if (seal_layer(r) < 0)
    return -1;
  struct ploop_descriptor *d = r->desc;
  struct ploop_descriptor *fresh = NULL;
  if (!d) {
    d = fresh = descriptor_new(r->dir, r->h.virtual_bytes / 512, r->h.cluster_bytes / 512);
    if (!d)
      return -1;
  } else {
    descriptor_remove_image(d, PLOOP_TOP_GUID);
  }
  int rc = -1, tfd = -1;
  struct store_obj dso = {.fd = -1};
  char top_file[NAME_MAX + 1];
  delta_file_name(r, top_file);
  if (join_path(r, top_file, r->top_path) < 0)
    goto out;
  new_delta(r, r->top_path, false, &dso);
  if (!dso.ops)
    goto out;
  r->made_top = true;
  /* The disk's size is the size of its newest state (ploop deltas hold whole clusters). */
  d->size_sectors = round_up(r->h.virtual_bytes, r->cb) / 512;
  ploop_chs(d->size_sectors, &d->cylinders, &d->heads, &d->sectors);
  for (unsigned i = 0; i < r->n_layers; i++)
    if (descriptor_add_image(d, r->layers[i].guid, r->layers[i].file, r->layers[i].parent) < 0)
      goto out;
  if (descriptor_add_image(d, PLOOP_TOP_GUID, top_file, r->layers[r->n_layers - 1].guid) < 0 ||
      ploop_descriptor_validate(d) < 0 || descriptor_write_tmp(d, &tfd) < 0)
    goto out;
  struct store_obj *objs[1] = {&dso};
  if (store_flush_all(objs, 1, &tfd, 1) < 0) {
    descriptor_abort_tmp(d, tfd);
    goto out;
  }
  ploop_fault_point("receive-synced");
  if (descriptor_commit_tmp(d, tfd, true) < 0 || recv_publish(r) < 0)
    goto out;
  rc = 0;
  /* The replaced top was empty; it is no longer named by the descriptor. */
  if (r->old_top[0] && store_remove(r->dir, r->old_top) < 0)
    ploop_error_os(r->old_top, "remove");
out:
  store_close(&dso);
  ploop_descriptor_free(fresh);
  return rc;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The device holds BASE's state: the stream must build on it and fit. */
static int prepare_device(struct receiver *r, const char *base)
{
  if (r->full)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "the device: a full stream needs a new disk, not a device");
  if (base && strcmp(base, r->h.base_guid))
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "the device holds snapshot %s, the stream builds on %s", base,
                       r->h.base_guid);
  struct stat sb;
  uint64_t bytes = 0;
  if (fstat(r->dev, &sb) < 0)
    return ploop_error_os("the device", "stat");
  if (S_ISBLK(sb.st_mode) ? ioctl(r->dev, BLKGETSIZE64, &bytes) < 0 : (bytes = (uint64_t)sb.st_size, false))
    return ploop_error_os("the device", "size");
  if (bytes < r->h.virtual_bytes || bytes % 512)
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "the device has %llu bytes, the stream's disk %llu",
                       (unsigned long long)bytes, (unsigned long long)r->h.virtual_bytes);
  r->dev_bytes = r->h.virtual_bytes;
  return 0;
}

/* Every write in, then durable. */
static int commit_device(struct receiver *r)
{
  if (drain(r) < 0)
    return -1;
  if (fsync(r->dev) < 0)
    return ploop_error_os("the device", "fsync");
  return 0;
}

/* ploop_receive (DIR) or ploop_receive_device (R->dev, BASE). */
static int receive(struct receiver *r, const char *dir, const char *base, const struct ploop_receive_opts *o,
                   struct ploop_stream_stats *st, char *received_guid)
{
  double t0 = now();
  if (o) {
    r->progress = o->progress;
    r->opaque = o->opaque;
  }
  int rc = -1;
  struct ploop_stream_header raw;
  if (stream_read_full(&r->in, &raw, sizeof raw, "the stream header") < 0 ||
      stream_header_decode(&raw, &r->h) < 0)
    goto out;
  r->cb = r->h.cluster_bytes;
  r->clusters = div_round_up(r->h.virtual_bytes, r->cb);
  r->full = !(r->h.flags & PLOOP_STREAM_INCREMENTAL);
  if ((r->dev >= 0 ? prepare_device(r, base)
       : r->full   ? recv_prepare_full(r, dir)
                   : recv_prepare_incremental(r, dir)) < 0)
    goto out;
  uint64_t n = RECV_INFLIGHT_BYTES / r->cb;
  /* No more buffers than the stream has data clusters (its header says how
   * many): a migration's last round holds a few, and 64 MiB of buffers
   * faulted in up front cost it 0.25-0.4 s. Zero ranges write r->zero. */
  if (n > r->h.data_clusters)
    n = r->h.data_clusters;
  r->depth = n < 2 ? 2 : n > RECV_MAX_DEPTH ? RECV_MAX_DEPTH : (unsigned)n;
  r->zin_cap = r->cb;
  r->buf = ploop_aligned_alloc_uninit((size_t)r->cb * r->depth);
  r->zero = ploop_aligned_alloc(r->cb);
  r->zin = malloc(r->zin_cap);
  r->slot = calloc(r->depth, sizeof *r->slot);
  r->seen = calloc(div_round_up(r->clusters, 8) + 1, 1);
  r->round = XXH3_createState();
  if (!r->buf || !r->zero || !r->zin || !r->slot || !r->seen || !r->round) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    goto out;
  }
  XXH3_64bits_reset(r->round);
  if (aio_init(&r->aio, r->depth) < 0)
    goto out;
  if (r->progress)
    r->progress(r->opaque, 0, r->h.data_clusters * r->cb);
  if (read_frames(r) < 0 || (r->dev >= 0 ? commit_device(r) : commit(r)) < 0)
    goto out;
  if (r->progress)
    r->progress(r->opaque, r->h.data_clusters * r->cb, r->h.data_clusters * r->cb);
  if (received_guid)
    snprintf(received_guid, PLOOP_UUID_LEN + 1, "%s", r->h.guid);
  rc = 0;
out:
  if (r->aio.ctx)
    drain(r);
  aio_destroy(&r->aio);
  if (rc < 0) {
    recv_undo(r);
  } else {
    for (unsigned i = 0; i < r->n_layers; i++)
      delta_close(r->layers[i].d, false);
    recv_adopt(r);
  }
  if (st) {
    st->bytes = r->in.bytes;
    st->clusters = r->data_frames;
    st->data_bytes = r->data_bytes;
    st->seconds = now() - t0;
    snprintf(st->guid, sizeof st->guid, "%s", r->h.guid);
  }
  ploop_unlock_disk(r->lock);
  if (rc < 0 && r->store && r->full && r->made_lock)
    rbd_recv_forget_lock(r->dir);
  ploop_descriptor_free(r->desc);
  XXH3_freeState(r->round);
  free(r->buf);
  free(r->zero);
  free(r->zin);
  free(r->slot);
  free(r->seen);
  free(r);
  return rc;
}

int ploop_receive(const char *dir, const struct ploop_receive_opts *o, int fd, struct ploop_stream_stats *st,
                  char *received_guid)
{
  struct receiver *r = calloc(1, sizeof *r);
  if (!r)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  r->in.fd = fd;
  r->lock = -1;
  r->dev = -1;
  return receive(r, dir, NULL, o, st, received_guid);
}

int ploop_receive_device(int dev, const char *base_guid, const struct ploop_receive_opts *o, int fd,
                         struct ploop_stream_stats *st, char *received_guid)
{
  if (dev < 0)
    return ploop_error(PLOOP_ERR_PARAM, EBADF, "receive into a device: no device");
  struct receiver *r = calloc(1, sizeof *r);
  if (!r)
    return ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
  r->in.fd = fd;
  r->lock = -1;
  r->dev = dev;
  return receive(r, NULL, base_guid, o, st, received_guid);
}
