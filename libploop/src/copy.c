/* Bulk copies through libaio batches: import of a raw file (writing only
 * the clusters that differ), export to a sparse raw file, and merging one
 * delta into the one below it. Each batch reads up to BATCH clusters at
 * once, then writes what it must. */
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "io.h"

#define COPY_BATCH_BYTES (32u << 20)
/* A batch's new clusters are all reserved at once: stay within the delta's
 * table of in-flight allocations. */
#define COPY_MAX_BATCH (PLOOP_MAX_INFLIGHT_ALLOC / 2)

static unsigned batch_clusters(uint64_t cb)
{
  uint64_t n = COPY_BATCH_BYTES / cb;
  return n < 1 ? 1 : n > COPY_MAX_BATCH ? COPY_MAX_BATCH : (unsigned)n;
}

/* Makes room for COUNT new clusters at OFF before they are written: the file
 * is extended with ftruncate so the direct writes fill space inside i_size
 * (an extending direct write is serialised by the filesystem, and writing
 * into fallocated, unwritten extents costs a conversion per write). */
static int reserve_clusters(struct ploop_delta *d, uint64_t off, uint64_t count)
{
  uint64_t size, end = off + count * d->cluster_bytes;
  if (store_size(&d->so, &size) < 0)
    return -1;
  if (size < end && store_truncate(&d->so, end) < 0)
    return ploop_error_wrap("extend");
  return 0;
}

int ploop_export_raw(const char *dir_or_xml, const char *snapshot_guid, const char *dst,
                     ploop_progress_fn progress, void *opaque, struct ploop_copy_stats *stats)
{
  return export_raw(dir_or_xml, snapshot_guid, dst, PLOOP_OPEN_RDONLY, progress, opaque, stats);
}

int export_raw(const char *dir_or_xml, const char *snapshot_guid, const char *dst, unsigned open_flags,
               ploop_progress_fn progress, void *opaque, struct ploop_copy_stats *stats)
{
  struct ploop_copy_stats st = {0};
  struct ploop_disk *disk = ploop_disk_open(dir_or_xml, snapshot_guid, open_flags & ~EXPORT_NEW_IN_DIR);
  if (!disk)
    return -1;
  int rc = -1, fd = -1;
  uint8_t *bufs = NULL;
  struct ploop_aio aio = {0};
  struct wb_kicker wb = {0};
  uint64_t cb = disk->cluster_bytes, size = disk->size_bytes;
  uint64_t clusters = div_round_up(size, cb);
  unsigned batch = batch_clusters(cb);
  struct stat sb;
  if (stat(dst, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: export writes a regular file", dst);
    goto out;
  }
  /* The output is a new file nobody reads back through us: writing it
   * through the page cache lets writeback stream it, and the fsync below
   * makes it durable before we return. The image side stays O_DIRECT. */
  if (open_flags & EXPORT_NEW_IN_DIR)
    fd = ploop_open_file(disk->dir, dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
  else if ((fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    ploop_error_os(dst, "create");
  if (fd < 0)
    goto out;
  /* The file starts as one hole of the disk's size: zero clusters are
   * simply never written. */
  if (ftruncate(fd, (off_t)size) < 0) {
    ploop_error_os(dst, "truncate");
    goto out;
  }
  bufs = ploop_aligned_alloc((size_t)cb * batch * 2);
  if (!bufs || aio_init(&aio, batch * 2) < 0)
    goto out;
  wb_kicker_start(&wb, fd, false);
  /* Double buffering: batch k's writes go out with batch k+1's reads. */
  uint64_t pending_first = 0, written = 0;
  unsigned pending_n = 0, half = 0;
  unsigned char wmask[COPY_MAX_BATCH];
  for (uint64_t first = 0;; first += batch) {
    if (ploop_cancel_check() < 0)
      goto out;
    unsigned n = first < clusters ? (unsigned)min_u64(batch, clusters - first) : 0;
    uint8_t *rbuf = bufs + (size_t)half * cb * batch;
    uint8_t *wbuf = bufs + (size_t)(half ^ 1) * cb * batch;
    unsigned char owner[COPY_MAX_BATCH];
    for (unsigned i = 0; i < n; i++) {
      uint64_t vc = first + i, off;
      unsigned depth = disk_find(disk, 0, vc, &off);
      owner[i] = depth != 0;
      if (depth) {
        struct ploop_delta *d = disk->deltas[depth - 1];
        aio_queue_obj(&aio, &d->so, rbuf + (size_t)i * cb, cb, off, 0);
      }
    }
    for (unsigned i = 0; i < pending_n; i++)
      if (wmask[i]) {
        uint64_t vc = pending_first + i;
        size_t len = (size_t)min_u64(cb, size - vc * cb);
        aio_queue(&aio, fd, dst, wbuf + (size_t)i * cb, round_up(len, 512), vc * cb, 1);
        st.clusters_written++;
        written += cb;
      }
    if (aio_run(&aio) < 0)
      goto out;
    /* Writeback of what was just written starts beside the next reads
     * instead of piling up for the final fsync. */
    wb_kicker_wrote(&wb, written);
    written = 0;
    if (pending_n && progress)
      progress(opaque, min_u64((pending_first + pending_n) * cb, size), size);
    if (n == 0)
      break;
    for (unsigned i = 0; i < n; i++) {
      size_t len = (size_t)min_u64(cb, size - (first + i) * cb);
      wmask[i] = owner[i] && !ploop_is_zero(rbuf + (size_t)i * cb, len);
      st.clusters_skipped += !wmask[i];
    }
    pending_first = first;
    pending_n = n;
    half ^= 1;
  }
  wb_kicker_stop(&wb);
  /* Writes of a last partial sector may have extended the file. */
  if (ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0) {
    ploop_error_os(dst, "sync");
    goto out;
  }
  st.bytes_total = size;
  rc = 0;
out:
  wb_kicker_stop(&wb);
  aio_destroy(&aio);
  free(bufs);
  if (fd >= 0)
    close(fd);
  if (rc < 0)
    ploop_error_wrap("export");
  if (ploop_disk_close(disk) < 0)
    rc = -1;
  if (stats)
    *stats = st;
  return rc;
}

static int create_for_import(const char *dir, uint64_t size)
{
  char path[COPY_MAX_BATCH];
  snprintf(path, sizeof path, "%s/%s", dir, PLOOP_DEFAULT_IMAGE_NAME);
  struct ploop_delta_create_params p = {.size_bytes = size};
  return ploop_disk_create(path, &p);
}

int ploop_import_raw(const char *src, const char *dir_or_xml, ploop_progress_fn progress, void *opaque,
                     struct ploop_copy_stats *stats)
{
  struct ploop_copy_stats st = {0};
  /* The source is the user's raw file, read once front to back: the page
   * cache's readahead streams it best. The image side stays O_DIRECT. */
  int sfd = open(src, O_RDONLY | O_CLOEXEC);
  if (sfd < 0)
    return ploop_error(errno == ENOENT ? PLOOP_ERR_NOTFOUND : PLOOP_ERR_IO, errno, "%s: open: %s", src,
                       strerror(errno));
  struct stat sb;
  if (fstat(sfd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(sfd);
    return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: import reads a regular raw file", src);
  }
  uint64_t src_size = (uint64_t)sb.st_size;
  struct stat db;
  char xml[COPY_MAX_BATCH];
  snprintf(xml, sizeof xml, "%s/%s", dir_or_xml, PLOOP_DESCRIPTOR_NAME);
  if (stat(dir_or_xml, &db) == 0 && S_ISDIR(db.st_mode) && access(xml, F_OK) < 0) {
    if (src_size == 0) {
      close(sfd);
      return ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: empty source", src);
    }
    if (create_for_import(dir_or_xml, src_size) < 0) {
      close(sfd);
      return -1;
    }
  }
  struct ploop_disk *disk = ploop_disk_open(dir_or_xml, NULL, PLOOP_OPEN_RDWR);
  if (!disk) {
    close(sfd);
    return -1;
  }
  int rc = -1;
  uint8_t *sbuf = NULL, *dbuf = NULL;
  struct ploop_aio aio = {0};
  uint64_t cb = disk->cluster_bytes, size = disk->size_bytes;
  if (src_size > size) {
    ploop_error(PLOOP_ERR_PARAM, EINVAL, "%s: source (%llu bytes) is larger than the disk (%llu bytes)", src,
                (unsigned long long)src_size, (unsigned long long)size);
    goto out;
  }
  struct ploop_delta *top = disk->deltas[0];
  uint64_t clusters = div_round_up(size, cb);
  unsigned batch = batch_clusters(cb);
  sbuf = ploop_aligned_alloc((size_t)cb * batch * 2);
  dbuf = ploop_aligned_alloc((size_t)cb * batch * 2);
  if (!sbuf || !dbuf || aio_init(&aio, batch * 3) < 0)
    goto out;
  /* Double buffering: the writes of batch k go out with the reads of batch
   * k+1. Batch k's new clusters are reserved in one step (reserve_clusters). */
  uint64_t alloc_off[COPY_MAX_BATCH], pending_first = 0;
  unsigned pending_n = 0, half = 0;
  unsigned char wmask[COPY_MAX_BATCH], depth[COPY_MAX_BATCH];
  for (uint64_t first = 0;; first += batch) {
    unsigned n = first < clusters ? (unsigned)min_u64(batch, clusters - first) : 0;
    uint8_t *sbh = sbuf + (size_t)half * cb * batch, *dbh = dbuf + (size_t)half * cb * batch;
    uint8_t *wb = sbuf + (size_t)(half ^ 1) * cb * batch;
    for (unsigned i = 0; i < n; i++) {
      uint64_t vc = first + i, off;
      if (vc * cb < src_size)
        aio_queue(&aio, sfd, src, sbh + (size_t)i * cb,
                  (size_t)min_u64(cb, round_up(src_size - vc * cb, 512)), vc * cb, 0);
      depth[i] = (unsigned char)disk_find(disk, 0, vc, &off);
      if (depth[i]) {
        struct ploop_delta *d = disk->deltas[depth[i] - 1];
        aio_queue_obj(&aio, &d->so, dbh + (size_t)i * cb, cb, off, 0);
      }
    }
    for (unsigned i = 0; i < pending_n; i++)
      if (wmask[i]) {
        uint64_t off = alloc_off[i] ? alloc_off[i] : DELTA_OFF(delta_lookup(top, pending_first + i));
        aio_queue_obj(&aio, &top->so, wb + (size_t)i * cb, cb, off, 1);
      }
    int arc = aio_run(&aio);
    for (unsigned i = pending_n; i-- > 0;)
      if (alloc_off[i] && arc == 0)
        delta_alloc_finish(top, pending_first + i, alloc_off[i]);
      else if (alloc_off[i])
        delta_alloc_abandon(top, pending_first + i, alloc_off[i]);
    if (arc < 0)
      goto out;
    if (pending_n && progress)
      progress(opaque, min_u64((pending_first + pending_n) * cb, size), size);
    pending_n = 0;
    if (n == 0)
      break;
    /* Between batches nothing is in flight and every cluster written is
     * published: stopping here leaves a consistent image. */
    if (ploop_cancel_check() < 0)
      goto out;
    uint64_t new_first = 0, new_count = 0;
    for (unsigned i = 0; i < n; i++) {
      uint64_t vc = first + i;
      uint8_t *s = sbh + (size_t)i * cb;
      /* Past the end of the source the disk must read zeros. */
      if (vc * cb >= src_size)
        memset(s, 0, cb);
      else if (vc * cb + cb > src_size)
        memset(s + (src_size - vc * cb), 0, cb - (src_size - vc * cb));
      alloc_off[i] = 0;
      wmask[i] = 0;
      bool zero = ploop_is_zero(s, cb);
      /* A zero cluster the top holds and nothing below shadows reads the
       * same as a hole: free it (an import into an existing disk merges
       * its new top down, writing zeros, then runs again to punch them). */
      bool punch = zero && depth[i] == 1 && !top->raw && !disk_find(disk, 1, vc, NULL);
      if (!punch && (depth[i] ? !memcmp(s, dbh + (size_t)i * cb, cb) : zero)) {
        st.clusters_skipped++;
        continue;
      }
      if (zero) {
        if (ploop_disk_discard(disk, vc * cb, min_u64(cb, size - vc * cb)) < 0)
          goto out;
        st.clusters_zeroed++;
        continue;
      }
      wmask[i] = 1;
      st.clusters_written++;
      if (!delta_lookup(top, vc)) {
        uint64_t off;
        if (delta_alloc_begin(top, vc, &off) < 0)
          goto out;
        alloc_off[i] = off;
        if (!new_count)
          new_first = off;
        new_count++;
      }
    }
    /* One thread allocates here, so the new clusters are contiguous. */
    if (new_count && reserve_clusters(top, new_first, new_count) < 0) {
      for (unsigned i = n; i-- > 0;)
        if (alloc_off[i])
          delta_alloc_abandon(top, first + i, alloc_off[i]);
      goto out;
    }
    pending_first = first;
    pending_n = n;
    half ^= 1;
  }
  if (ploop_disk_flush(disk) < 0)
    goto out;
  /* A cluster that became zero was punched out of the file: move tail
   * clusters into the holes and cut the tail, so the image is left without
   * holes (OpenVZ refuses a sparse image) and smaller. */
  if (st.clusters_zeroed && ploop_disk_compact(disk, NULL) < 0)
    goto out;
  st.bytes_total = src_size;
  rc = 0;
out:
  aio_destroy(&aio);
  free(sbuf);
  free(dbuf);
  close(sfd);
  if (rc < 0)
    ploop_error_wrap("import");
  if (ploop_disk_close(disk) < 0)
    rc = -1;
  if (stats)
    *stats = st;
  return rc;
}

/* Bytes of a merge in flight at once. The child's reads stream through one
 * queue whose slots are refilled the moment they complete: waiting for a
 * whole batch left the disk idle at every batch's tail (the 1 GiB merge
 * bench copied at about half the disk's speed). */
#define MERGE_INFLIGHT_BYTES (64u << 20)
/* The writes go through the page cache (as export's do): a write is a copy
 * into memory, so the loop goes straight back to reading, and writeback,
 * started by a wb_kicker thread every WB_KICK_BYTES, streams the data out
 * in large requests beside the reads. Direct writes into new clusters of
 * the same queue took twice as long on the 1 GiB merge bench, and all of
 * their data was still to flush at the end (the disk's write cache). */

struct merge_slot {
  uint64_t vc; /* the cluster being read into the slot */
};

struct merge_state {
  struct ploop_delta *x, *p;
  bool skip_zero;
  bool holes_only; /* copy only the clusters P lacks (never overwrite P's) */
  uint64_t cb, next_vc, nclusters;
  uint64_t reserved;   /* P's file size: new clusters below it can be written */
  uint64_t fresh_left; /* clusters X holds and P lacks, not placed yet */
  unsigned depth;
  int wfd; /* the destination through the page cache */
  /* Starts writeback of WFD's pages beside the loop. New clusters are
   * appended, so the dirty pages are the file's tail: the whole file is as
   * good a range as any. Pages already written back are dropped on the way
   * (the destination is read direct): the cache holds little more than
   * what is in flight, and next to nothing is left to drop at the end. */
  struct wb_kicker wb;
  struct ploop_aio aio;
  uint8_t *buf;
  struct merge_slot *slot;
};

/* Starts reading X's next allocated cluster into slot S; false at the end. */
static bool merge_next_read(struct merge_state *ms, unsigned s)
{
  for (; ms->next_vc < ms->nclusters; ms->next_vc++) {
    uint64_t off = delta_lookup(ms->x, ms->next_vc);
    if (!off ||
        (ms->holes_only && (ms->next_vc >= delta_clusters(ms->p) || delta_lookup(ms->p, ms->next_vc))))
      continue;
    ms->slot[s].vc = ms->next_vc++;
    aio_start_obj(&ms->aio, s, &ms->x->so, ms->buf + (size_t)s * ms->cb, ms->cb, DELTA_OFF(off), 0);
    return true;
  }
  return false;
}

/* New clusters are appended: extend P (reserve_clusters) for
 * this one and as many of the next as can be in flight, so the extension is
 * one call per queue's worth, not one per cluster. A crash leaves the extra
 * tail unreferenced (lost space, which check reports), never a bad entry. */
static int merge_reserve(struct merge_state *ms, uint64_t off)
{
  if (off + ms->cb <= ms->reserved)
    return 0;
  uint64_t ahead = min_u64(ms->fresh_left + 1, ms->depth);
  if (reserve_clusters(ms->p, off, ahead) < 0)
    return -1;
  ms->reserved = off + ahead * ms->cb;
  return 0;
}

/* Slot S holds a cluster read from X: writes it into P (through the page
 * cache). Returns 0 when written, 1 when there is nothing to write (a zero
 * cluster P lacks, with skip_zero), -1 on error. */
static int merge_place(struct merge_state *ms, unsigned s)
{
  uint64_t vc = ms->slot[s].vc;
  struct ploop_delta *p = ms->p;
  uint8_t *b = ms->buf + (size_t)s * ms->cb;
  uint64_t off = delta_lookup(p, vc);
  bool fresh = false;
  if (!off) {
    if (ms->fresh_left)
      ms->fresh_left--;
    if (ms->skip_zero && ploop_is_zero(b, ms->cb))
      return 1;
    int r = delta_alloc_begin(p, vc, &off);
    if (r < 0)
      return -1;
    fresh = r == 0;
    if (fresh && merge_reserve(ms, off) < 0) {
      delta_alloc_abandon(p, vc, DELTA_OFF(off));
      return -1;
    }
  }
  int rc = ms->wfd >= 0 ? ploop_pwrite_full(ms->wfd, b, ms->cb, DELTA_OFF(off), p->path)
                        : store_pwrite(&p->so, b, ms->cb, DELTA_OFF(off));
  if (rc == 0)
    wb_kicker_wrote(&ms->wb, ms->cb);
  /* A new entry is published in memory only: it reaches the disk after the
   * data is durable (delta_flush or merge_seal below, or P's close). */
  if (fresh && rc == 0)
    delta_alloc_finish(p, vc, DELTA_OFF(off));
  else if (fresh)
    delta_alloc_abandon(p, vc, DELTA_OFF(off));
  return rc;
}

static void *merge_aio_destroy(void *arg)
{
  aio_destroy(arg);
  return NULL;
}

/* The end of a merge into P when nothing is written to P afterwards: the
 * data made durable, then the BAT pages and a clean header in one pass
 * (delta_seal_begin, as a snapshot seals its old top) and one fdatasync,
 * where delta_flush and the clean close after it would sync three times
 * more (each sync a round trip to a disk still busy with the copy). */
static int merge_seal(struct ploop_delta *p)
{
  if (delta_seal_begin(p) < 0)
    return -1;
  ploop_fault_point("merge-sealed");
  if (store_flush(&p->so) < 0)
    return -1;
  ploop_fault_point("flush-bat-written");
  p->rdwr = false; /* nothing more goes to P: its close writes nothing */
  return 0;
}

static int merge_copy(struct ploop_delta *x, struct ploop_delta *p, bool skip_zero, bool holes_only,
                      bool seal, ploop_progress_fn progress, void *opaque, uint64_t done_base, uint64_t total)
{
  struct merge_state ms = {
      .x = x, .p = p, .skip_zero = skip_zero, .holes_only = holes_only, .cb = x->cluster_bytes, .wfd = -1};
  ms.nclusters = delta_clusters(x);
  uint64_t n = MERGE_INFLIGHT_BYTES / ms.cb;
  ms.depth = n < 2 ? 2 : n > COPY_MAX_BATCH ? COPY_MAX_BATCH : (unsigned)n;
  ms.buf = ploop_aligned_alloc((size_t)ms.cb * ms.depth);
  ms.slot = calloc(ms.depth, sizeof *ms.slot);
  if (!ms.buf || !ms.slot || aio_init(&ms.aio, ms.depth) < 0) {
    if (ms.buf && !ms.slot)
      ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    free(ms.buf);
    free(ms.slot);
    return -1;
  }
  /* A second, buffered descriptor of P for the data. P's own (direct)
   * descriptor keeps the header and BAT, and its fdatasync (delta_flush,
   * merge_seal) covers these pages too (one inode). */
  int rc = 0;
  if (store_is_file(p->so.ops)) {
    ms.wfd = ploop_open_file(p->dir, p->path, O_WRONLY, 0);
    if (ms.wfd < 0)
      rc = ploop_error_wrap("open for writing");
    else
      wb_kicker_start(&ms.wb, ms.wfd, true);
  }
  uint64_t size0 = 0;
  if (!p->raw) {
    if (store_size(&p->so, &size0) < 0)
      rc = -1;
    else
      ms.reserved = size0;
    for (uint64_t vc = 0; vc < ms.nclusters; vc++)
      ms.fresh_left += delta_lookup(x, vc) && !delta_lookup(p, vc) && (!holes_only || vc < delta_clusters(p));
  }
  for (unsigned s = 0; rc == 0 && s < ms.depth && merge_next_read(&ms, s); s++)
    ;
  uint64_t done = done_base, reported = done_base;
  unsigned fin[COPY_MAX_BATCH];
  bool failed[COPY_MAX_BATCH];
  for (;;) {
    int got = aio_reap(&ms.aio, fin, failed);
    if (got <= 0) {
      rc = got < 0 ? -1 : rc;
      break;
    }
    /* A cancel stops new reads; what is in flight drains below, and the
     * merge ends as a failed one does (crash-consistent: X still on top). */
    if (rc == 0 && ploop_cancel_check() < 0)
      rc = -1;
    for (int i = 0; i < got; i++) {
      if (failed[i] || rc < 0 || merge_place(&ms, fin[i]) < 0) {
        rc = -1;
        continue;
      }
      done++;
      merge_next_read(&ms, fin[i]);
    }
    /* In bytes, as import and export report (the CLI shows a rate). */
    if (progress && rc == 0 && (done - reported >= ms.depth || (done > reported && !ms.aio.inflight))) {
      progress(opaque, done * ms.cb, total * ms.cb);
      reported = done;
    }
  }
  /* A progress display reaches its end even when there was nothing to copy. */
  if (progress && rc == 0 && reported == done_base)
    progress(opaque, done * ms.cb, total * ms.cb);
  /* Over-reserved tail (zero clusters skipped): give it back. */
  uint64_t used = p->alloc_head * ms.cb;
  if (rc == 0 && !p->raw && ms.reserved > size0 && ms.reserved > used &&
      store_truncate(&p->so, used > size0 ? used : size0) < 0)
    rc = -1;
  /* io_destroy waits for an RCU grace period (~40 ms): run it beside the
   * flush. It also waits for requests a failed wait left in flight, before
   * the buffers are freed below. */
  pthread_t tid;
  bool async = pthread_create(&tid, NULL, merge_aio_destroy, &ms.aio) == 0;
  if (!async)
    aio_destroy(&ms.aio);
  wb_kicker_stop(&ms.wb);
  if (rc == 0)
    rc = seal ? merge_seal(p) : delta_flush(p);
  if (ms.wfd >= 0) {
    /* The last pages are clean now. */
    if (rc == 0)
      posix_fadvise(ms.wfd, 0, 0, POSIX_FADV_DONTNEED);
    close(ms.wfd);
  }
  if (async)
    pthread_join(tid, NULL);
  free(ms.buf);
  free(ms.slot);
  return rc;
}

int merge_delta_into(struct ploop_delta *x, struct ploop_delta *p, bool skip_zero, ploop_progress_fn progress,
                     void *opaque, uint64_t done_base, uint64_t total)
{
  return merge_copy(x, p, skip_zero, false, false, progress, opaque, done_base, total);
}

int merge_delta_into_sealed(struct ploop_delta *x, struct ploop_delta *p, ploop_progress_fn progress,
                            void *opaque, uint64_t total)
{
  return merge_copy(x, p, false, false, true, progress, opaque, 0, total);
}

int merge_fill_holes(struct ploop_delta *src, struct ploop_delta *dst, ploop_progress_fn progress,
                     void *opaque, uint64_t total)
{
  return merge_copy(src, dst, false, true, true, progress, opaque, 0, total);
}

/* Reads for a stream (ploop_send) as export reads, direct and in flight
 * together, but with the queue refilled slot by slot as merge does: a
 * slow consumer (a pipe, a socket) then never leaves the disk idle while
 * the next batch waits. */
struct held_reader {
  struct ploop_disk *disk;
  unsigned from, to;
  uint64_t next_vc, nclusters, cb;
  struct ploop_aio aio;
  uint8_t *buf;
  uint64_t *slot_vc;
};

static bool held_next_read(struct held_reader *r, unsigned s)
{
  for (; r->next_vc < r->nclusters; r->next_vc++) {
    uint64_t off = 0;
    unsigned depth = disk_find(r->disk, r->from, r->next_vc, &off);
    if (!depth || depth > r->to)
      continue;
    struct ploop_delta *d = r->disk->deltas[depth - 1];
    r->slot_vc[s] = r->next_vc++;
    aio_start_obj(&r->aio, s, &d->so, r->buf + (size_t)s * r->cb, r->cb, off, 0);
    return true;
  }
  return false;
}

uint64_t copy_count_held(struct ploop_disk *disk, unsigned from, unsigned to)
{
  uint64_t n = 0, clusters = div_round_up(disk->size_bytes, disk->cluster_bytes);
  for (uint64_t vc = 0; vc < clusters; vc++) {
    unsigned depth = disk_find(disk, from, vc, NULL);
    n += depth && depth <= to;
  }
  return n;
}

int copy_read_held(struct ploop_disk *disk, unsigned from, unsigned to, held_sink_fn sink, void *opaque)
{
  struct held_reader r = {.disk = disk, .from = from, .to = to, .cb = disk->cluster_bytes};
  r.nclusters = div_round_up(disk->size_bytes, r.cb);
  uint64_t n = MERGE_INFLIGHT_BYTES / r.cb;
  /* No more buffers than clusters to read: a migration's last round holds
   * a few, and faulting in 64 MiB of buffers cost it 0.3-0.4 s. */
  uint64_t held = copy_count_held(disk, from, to);
  if (n > held)
    n = held;
  unsigned depth = n < 2 ? 2 : n > COPY_MAX_BATCH ? COPY_MAX_BATCH : (unsigned)n;
  r.buf = ploop_aligned_alloc_uninit((size_t)r.cb * depth);
  r.slot_vc = calloc(depth, sizeof *r.slot_vc);
  if (!r.buf || !r.slot_vc || aio_init(&r.aio, depth) < 0) {
    if (r.buf && !r.slot_vc)
      ploop_error(PLOOP_ERR_GENERIC, ENOMEM, "out of memory");
    free(r.buf);
    free(r.slot_vc);
    return -1;
  }
  int rc = 0;
  for (unsigned s = 0; s < depth && held_next_read(&r, s); s++)
    ;
  unsigned fin[COPY_MAX_BATCH];
  bool failed[COPY_MAX_BATCH];
  for (;;) {
    int got = aio_reap(&r.aio, fin, failed);
    if (got <= 0) {
      rc = got < 0 ? -1 : rc;
      break;
    }
    for (int i = 0; i < got; i++) {
      unsigned s = fin[i];
      if (failed[i] || rc < 0) {
        rc = -1;
        continue;
      }
      uint64_t vc = r.slot_vc[s];
      size_t len = (size_t)min_u64(r.cb, round_up(disk->size_bytes - vc * r.cb, 512));
      if (sink(opaque, vc, r.buf + (size_t)s * r.cb, len) < 0) {
        rc = -1;
        continue;
      }
      held_next_read(&r, s);
    }
  }
  /* Waits for whatever a failure left in flight before the buffers go. */
  aio_destroy(&r.aio);
  free(r.buf);
  free(r.slot_vc);
  return rc;
}
