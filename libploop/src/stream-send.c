/* ploop_send: one disk stream (formats/ploop-stream.md) of a state of the
 * disk, full or since an older snapshot, as one layer or a layer per
 * snapshot. The clusters come from copy_read_held (direct, in flight
 * together); each becomes a data frame as its read completes. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "internal.h"
#include "stream.h"

struct sender {
  struct ploop_disk *disk;
  struct stream_fd out;
  struct stream_header h;
  bool compress;
  uint8_t *zbuf; /* deflate output */
  size_t zcap;
  uint8_t *zeros;  /* clusters of the layer that read as zeros */
  bool skip_zeros; /* the layer has nothing below it: a zero cluster is a hole */
  XXH3_state_t *round;
  uint64_t round_frames, frames, data_frames, data_bytes;
  uint64_t done, total; /* clusters read, for progress */
  ploop_progress_fn progress;
  void *opaque;
};

static int send_frame(struct sender *s, struct stream_frame *f, const void *payload)
{
  struct ploop_stream_frame raw;
  stream_frame_encode(f, &raw);
  if (stream_writev_full(&s->out, &raw, sizeof raw, payload, f->payload_bytes) < 0)
    return -1;
  s->frames++;
  if (f->type != PLOOP_FRAME_ROUND && f->type != PLOOP_FRAME_END) {
    uint64_t le = htole64(f->checksum);
    XXH3_64bits_update(s->round, &le, sizeof le);
    s->round_frames++;
  }
  return 0;
}

static int send_cluster(void *opaque, uint64_t vc, const uint8_t *buf, size_t len)
{
  struct sender *s = opaque;
  s->done++;
  if (s->progress && (s->done % 16 == 0 || s->done == s->total))
    s->progress(s->opaque, s->done * s->h.cluster_bytes, s->total * s->h.cluster_bytes);
  if (ploop_is_zero(buf, len)) {
    if (!s->skip_zeros)
      s->zeros[vc / 8] |= (uint8_t)(1u << (vc % 8));
    return 0;
  }
  struct stream_frame f = {
      .type = PLOOP_FRAME_DATA, .arg = vc, .length = len, .payload_bytes = (uint32_t)len};
  f.payload_hash = stream_hash(buf, len);
  const void *payload = buf;
  if (s->compress) {
    uLongf zlen = s->zcap;
    /* Stored as is when deflate does not shrink it (formats/ploop-stream.md). */
    if (compress2(s->zbuf, &zlen, buf, len, Z_BEST_SPEED) == Z_OK && zlen < len) {
      f.flags = PLOOP_FRAME_DEFLATED;
      f.payload_bytes = (uint32_t)zlen;
      payload = s->zbuf;
    }
  }
  s->data_frames++;
  s->data_bytes += len;
  return send_frame(s, &f, payload);
}

/* The zero clusters of a layer, as ranges, then the round's mark. */
static int end_layer(struct sender *s, uint64_t clusters)
{
  for (uint64_t vc = 0; vc < clusters;) {
    if (!(s->zeros[vc / 8] & (1u << (vc % 8)))) {
      vc++;
      continue;
    }
    uint64_t first = vc;
    while (vc < clusters && (s->zeros[vc / 8] & (1u << (vc % 8))))
      vc++;
    struct stream_frame f = {.type = PLOOP_FRAME_ZERO, .arg = first, .length = vc - first};
    if (send_frame(s, &f, NULL) < 0)
      return -1;
  }
  memset(s->zeros, 0, div_round_up(clusters, 8));
  struct stream_frame f = {
      .type = PLOOP_FRAME_ROUND, .arg = XXH3_64bits_digest(s->round), .length = s->round_frames};
  XXH3_64bits_reset(s->round);
  s->round_frames = 0;
  return send_frame(s, &f, NULL);
}

/* GUID of deltas[I] of the open disk: its image in the descriptor. */
static void delta_guid(const struct ploop_disk *disk, const size_t *idx, int n, unsigned i, char *out)
{
  snprintf(out, PLOOP_UUID_LEN + 1, "%s", disk->desc->images[idx[n - 1 - (int)i]].guid);
}

/* One layer: its SNAPSHOT frame, the clusters delta I of DISK holds, the
 * zero ranges and the round's mark. */
static int send_layer(struct sender *s, struct ploop_disk *disk, unsigned i, const char *g, const char *parent,
                      uint64_t clusters)
{
  struct ploop_stream_snapshot shot;
  stream_guid_to_wire(g, shot.guid);
  stream_guid_to_wire(parent, shot.parent);
  struct stream_frame f = {.type = PLOOP_FRAME_SNAPSHOT, .payload_bytes = sizeof shot};
  f.payload_hash = stream_hash(&shot, sizeof shot);
  s->skip_zeros = i + 1 == disk->n;
  if (send_frame(s, &f, &shot) < 0 || copy_read_held(disk, i, i + 1, send_cluster, s) < 0 ||
      end_layer(s, clusters) < 0)
    return -1;
  return 0;
}

/* The snapshots off the chain sent (left by snapshot-switch): each branch
 * is opened at its newest snapshot; its deltas that are not on the chain
 * and not sent yet become layers, parents first. */
struct branches {
  struct ploop_disk *disk[PLOOP_MAX_DELTAS];
  unsigned n;
  char sent[PLOOP_MAX_DELTAS][PLOOP_UUID_LEN + 1]; /* GUIDs on the chain or sent */
  unsigned n_sent;
  uint64_t clusters; /* what the branches' layers hold */
};

static bool is_sent(const struct branches *b, const char *g)
{
  for (unsigned i = 0; i < b->n_sent; i++)
    if (!strcmp(b->sent[i], g))
      return true;
  return false;
}

/* Whether image G descends from STATE (the state sent, or the top). */
static bool descends(const struct ploop_descriptor *d, const char *g, const char *state)
{
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(d, g, idx, PLOOP_MAX_DELTAS);
  for (int i = 0; i < n; i++)
    if (!strcmp(d->images[idx[i]].guid, state))
      return true;
  return false;
}

static int plan_branches(struct branches *b, struct ploop_disk *disk, const size_t *idx, int n, const char *state)
{
  const struct ploop_descriptor *d = disk->desc;
  for (int i = 0; i < n; i++)
    snprintf(b->sent[b->n_sent++], PLOOP_UUID_LEN + 1, "%s", d->images[idx[i]].guid);
  for (size_t i = 0; i < d->n_images; i++) {
    const char *g = d->images[i].guid;
    bool leaf = true;
    for (size_t j = 0; j < d->n_snapshots && leaf; j++)
      leaf = strcmp(d->snapshots[j].parent, g) != 0;
    if (!leaf || is_sent(b, g) || descends(d, g, state))
      continue;
    struct ploop_disk *bd = ploop_disk_open(disk->dir, g, PLOOP_OPEN_RDONLY);
    if (!bd)
      return -1;
    b->disk[b->n++] = bd;
    size_t bidx[PLOOP_MAX_DELTAS];
    int bn = ploop_descriptor_chain(bd->desc, g, bidx, PLOOP_MAX_DELTAS);
    for (int j = 0; j < bn; j++)
      if (!is_sent(b, bd->desc->images[bidx[bn - 1 - j]].guid))
        b->clusters += copy_count_held(bd, (unsigned)j, (unsigned)j + 1);
  }
  return 0;
}

static int send_branches(struct sender *s, struct branches *b)
{
  uint64_t clusters = div_round_up(s->disk->size_bytes, s->disk->cluster_bytes);
  for (unsigned k = 0; k < b->n; k++) {
    struct ploop_disk *bd = b->disk[k];
    size_t idx[PLOOP_MAX_DELTAS];
    int n = ploop_descriptor_chain(bd->desc, bd->snapshot_guid, idx, PLOOP_MAX_DELTAS);
    if (n < 0 || (unsigned)n != bd->n)
      return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: descriptor changed while opening", bd->dir);
    for (int i = n - 1; i >= 0; i--) {
      char g[PLOOP_UUID_LEN + 1], parent[PLOOP_UUID_LEN + 1];
      delta_guid(bd, idx, n, (unsigned)i, g);
      if (is_sent(b, g))
        continue;
      delta_guid(bd, idx, n, (unsigned)i + 1, parent); /* never the base: that is on the chain */
      if (send_layer(s, bd, (unsigned)i, g, parent, clusters) < 0)
        return -1;
      snprintf(b->sent[b->n_sent++], PLOOP_UUID_LEN + 1, "%s", g);
    }
  }
  return 0;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int ploop_send(const char *dir_or_xml, const struct ploop_send_opts *o, int fd, struct ploop_stream_stats *st)
{
  static const struct ploop_send_opts defaults;
  if (!o)
    o = &defaults;
  double t0 = now();
  char guid[PLOOP_UUID_LEN + 1], since[PLOOP_UUID_LEN + 1];
  if ((o->guid && ploop_uuid_normalize(o->guid, guid) < 0) ||
      (o->since && ploop_uuid_normalize(o->since, since) < 0))
    return -1;
  /* A snapshot is opened read-only with the shared reader lock: the disk
   * may be served read-write meanwhile (its top is not touched). */
  struct ploop_disk *disk = ploop_disk_open(dir_or_xml, o->guid ? guid : NULL, PLOOP_OPEN_RDONLY);
  if (!disk)
    return -1;
  struct sender s = {
      .disk = disk, .out = {.fd = fd}, .compress = o->compress, .progress = o->progress, .opaque = o->opaque};
  int rc = -1;
  struct branches br = {.n = 0}; /* before any goto out: closed there */
  size_t idx[PLOOP_MAX_DELTAS];
  int n = ploop_descriptor_chain(disk->desc, disk->snapshot_guid, idx, PLOOP_MAX_DELTAS);
  if (n < 0 || (unsigned)n != disk->n) {
    if (n >= 0)
      ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "%s: descriptor changed while opening", disk->dir);
    goto out;
  }
  /* The top has no GUID of its own: the state sent gets a new one, which
   * the receiver records (a later --since needs a snapshot of the sender). */
  if (disk->snapshot_guid)
    snprintf(s.h.guid, sizeof s.h.guid, "%s", disk->snapshot_guid);
  else
    ploop_uuid_generate(s.h.guid);
  unsigned upper = disk->n; /* deltas[0 .. upper) are sent */
  snprintf(s.h.base_guid, sizeof s.h.base_guid, "%s", PLOOP_NULL_GUID);
  if (o->since) {
    upper = 0;
    for (unsigned i = 0; i < disk->n && !upper; i++) {
      char g[PLOOP_UUID_LEN + 1];
      delta_guid(disk, idx, n, i, g);
      if (!strcmp(g, since))
        upper = i;
      if (!strcmp(g, since) && i == 0) {
        ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: --since %s is the state being sent", disk->dir, since);
        goto out;
      }
    }
    if (!upper) {
      ploop_error(PLOOP_ERR_NOTFOUND, ENOENT, "%s: snapshot %s is not below the state being sent", disk->dir,
                  since);
      goto out;
    }
    snprintf(s.h.base_guid, sizeof s.h.base_guid, "%s", since);
    s.h.flags |= PLOOP_STREAM_INCREMENTAL;
  }
  s.h.virtual_bytes = round_up(disk->size_bytes, 512);
  s.h.cluster_bytes = (uint32_t)disk->cluster_bytes;
  s.h.flags |= (o->snapshots ? PLOOP_STREAM_SNAPSHOTS : 0) | (o->compress ? PLOOP_STREAM_COMPRESSED : 0);
  uint64_t clusters = div_round_up(disk->size_bytes, disk->cluster_bytes);
  if (o->snapshots) {
    for (unsigned i = 0; i < upper; i++)
      s.total += copy_count_held(disk, i, i + 1);
    /* A full send carries the whole tree: the branches too. */
    if (!o->since && plan_branches(&br, disk, idx, n, disk->snapshot_guid ? disk->snapshot_guid : PLOOP_TOP_GUID) < 0)
      goto out;
    s.total += br.clusters;
  } else
    s.total = copy_count_held(disk, 0, upper);
  s.h.data_clusters = s.total;
  s.zcap = compressBound(disk->cluster_bytes);
  s.zbuf = o->compress ? malloc(s.zcap) : NULL;
  s.zeros = calloc(div_round_up(clusters, 8) + 1, 1);
  s.round = XXH3_createState();
  if ((o->compress && !s.zbuf) || !s.zeros || !s.round) {
    ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    goto out;
  }
  XXH3_64bits_reset(s.round);
  struct ploop_stream_header raw;
  stream_header_encode(&s.h, &raw);
  if (stream_write_full(&s.out, &raw, sizeof raw) < 0)
    goto out;
  if (o->progress)
    o->progress(o->opaque, 0, s.total * s.h.cluster_bytes);
  if (!o->snapshots) {
    /* Nothing below a full send: its zero clusters are simply holes. */
    s.skip_zeros = upper == disk->n;
    if (copy_read_held(disk, 0, upper, send_cluster, &s) < 0 || end_layer(&s, clusters) < 0)
      goto out;
  } else {
    /* A layer per delta, from the lowest sent up, each opened by its GUIDs;
     * the branches' layers go before the state sent, which comes last. */
    for (int i = (int)upper - 1; i >= 0; i--) {
      if (i == 0 && send_branches(&s, &br) < 0)
        goto out;
      char g[PLOOP_UUID_LEN + 1], parent[PLOOP_UUID_LEN + 1];
      if (i == 0)
        snprintf(g, sizeof g, "%s", s.h.guid);
      else
        delta_guid(disk, idx, n, (unsigned)i, g);
      if ((unsigned)i + 1 < disk->n)
        delta_guid(disk, idx, n, (unsigned)i + 1, parent);
      else
        snprintf(parent, sizeof parent, "%s", PLOOP_NULL_GUID);
      if (send_layer(&s, disk, (unsigned)i, g, parent, clusters) < 0)
        goto out;
    }
  }
  struct stream_frame end = {.type = PLOOP_FRAME_END, .arg = s.frames, .length = s.data_frames};
  if (send_frame(&s, &end, NULL) < 0)
    goto out;
  if (o->progress)
    o->progress(o->opaque, s.total * s.h.cluster_bytes, s.total * s.h.cluster_bytes);
  rc = 0;
out:
  if (st) {
    st->bytes = s.out.bytes;
    st->clusters = s.data_frames;
    st->data_bytes = s.data_bytes;
    st->seconds = now() - t0;
    snprintf(st->guid, sizeof st->guid, "%s", s.h.guid);
  }
  free(s.zbuf);
  free(s.zeros);
  XXH3_freeState(s.round);
  for (unsigned k = 0; k < br.n; k++)
    ploop_disk_close(br.disk[k]);
  ploop_disk_close(disk);
  return rc;
}
