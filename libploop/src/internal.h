/* Internal types and helpers shared by libploop's modules. Not installed. */
#ifndef PLOOP_INTERNAL_H
#define PLOOP_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "format.h"
#include "libploop.h"
#include "store.h"

#define PLOOP_ALIGN 4096u    /* buffer alignment for O_DIRECT */
#define PLOOP_BAT_PAGE 4096u /* BAT write granularity */
#define PLOOP_MAX_INFLIGHT_ALLOC 256

/* ---- errors (error.c) ---- */
/* Sets the thread's error: status class, errno value, printf message. Returns -1. */
int ploop_error(int status, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prepends "CONTEXT: " to the current message (keeps status and errno). */
/* -1 with PLOOP_ERR_CANCELLED set once ploop_cancel() was called, else 0. */
int ploop_cancel_check(void);
int ploop_error_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Shorthand: an OS call failed on PATH. */
#define ploop_error_os(path, what)                                                                           \
  ploop_error(PLOOP_ERR_IO, errno, "%s: %s: %s", (path), (what), strerror(errno))

/* ---- small helpers ---- */
static inline bool is_pow2(uint64_t x)
{
  return x && !(x & (x - 1));
}
static inline uint64_t round_up(uint64_t x, uint64_t a)
{
  return (x + a - 1) / a * a;
}
static inline uint64_t div_round_up(uint64_t x, uint64_t a)
{
  return (x + a - 1) / a;
}
static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
  return a < b ? a : b;
}
void *ploop_aligned_alloc(size_t len); /* zeroed, PLOOP_ALIGN-aligned; sets error on failure */
/* The same, not zeroed: for buffers filled before use (no page faults up front). */
void *ploop_aligned_alloc_uninit(size_t len);
bool ploop_is_zero(const void *buf, size_t len);
int ploop_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path);
int ploop_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *path);
int ploop_fsync_dir(const char *dir);
int ploop_fsync_parent(const char *path); /* the directory that holds PATH */
char *ploop_strdup(const char *s);        /* sets error on failure */
/* A step of a structural operation is durable: crash tests may kill the
 * process here (fault.c; PLOOP_FAULT_INJECT / PLOOP_FAULT_TRACE). */
void ploop_fault_point(const char *name);

/* ---- files a descriptor names (beneath.c) ----
 * DIR is the disk's directory and PATH is DIR/NAME from its descriptor:
 * PATH must resolve inside DIR (symlinks included). DIR NULL: PATH is a
 * bare file the caller named itself, opened as given. */
/* openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) on DIRFD; -1 with errno. */
int openat_beneath(int dirfd, const char *name, int flags, mode_t mode);
/* open(2) of a regular file only (a FIFO, socket or device is refused at
 * once, never opened); sets the error and returns -1 on failure. */
int ploop_open_file(const char *dir, const char *path, int flags, mode_t mode);
/* unlink(2) / link(2) of such paths: -1 with errno, no error message. */
int ploop_unlink_file(const char *dir, const char *path);
int ploop_link_file(const char *dir, const char *from, const char *to);
/* PATH resolves inside DIR to a regular file, or to nothing yet (0); else -1. */
int ploop_check_file_beneath(const char *dir, const char *path);

/* ---- delta (delta.c) ---- */
struct ploop_delta {
  char *path;
  char *dir;           /* the disk directory PATH must stay in; NULL for a bare file */
  struct store_obj so; /* where the bytes live (so.fd: the file store's fd, else -1) */
  bool rdwr;
  bool raw; /* Plain image: identity map, no header */
  struct ploop_header_host h;
  uint64_t cluster_bytes;
  uint64_t raw_bytes;   /* raw: file size */
  uint8_t *bat_raw;     /* header + BAT exactly as on disk */
  size_t bat_bytes;     /* first_block * 512 */
  pthread_mutex_t lock; /* alloc_head, dirty pages, inflight */
  pthread_cond_t cond;
  pthread_mutex_t flush_lock; /* one flush at a time: BAT pages go out in order */
  uint64_t flush_started;     /* group commit: flushes begun (under lock) */
  uint64_t flush_done;        /* the start number of the last completed flush */
  uint64_t alloc_head;        /* next free cluster (file size / cluster) */
  uint8_t *page_dirty;        /* one byte per BAT page */
  size_t n_pages;
  bool any_dirty;
  uint32_t inflight[PLOOP_MAX_INFLIGHT_ALLOC];
  unsigned n_inflight;
  uint8_t *bat_unwritten; /* per header/BAT cluster: not yet written whole (extent.c) */
  size_t n_bat_clusters;
  uint64_t *unwritten; /* bitmap per file cluster: data cluster only allocated (extent.c) */
  uint64_t unwritten_bits;
  pthread_mutex_t fill_lock; /* one whole-cluster fill of an unwritten cluster at a time */
};

/* Virtual clusters this delta can hold. */
static inline uint64_t delta_clusters(const struct ploop_delta *d)
{
  return d->raw ? d->raw_bytes / d->cluster_bytes : d->h.bat_entries;
}
static inline uint32_t *delta_bat(const struct ploop_delta *d)
{
  return (uint32_t *)d->bat_raw + PLOOP_BAT_FIRST_SLOT;
}
/* Byte offset in the file of virtual cluster VC, or 0 when this delta lacks it. */
static inline uint64_t delta_lookup(const struct ploop_delta *d, uint64_t vc)
{
  if (vc >= delta_clusters(d))
    return 0;
  if (d->raw)
    return vc * d->cluster_bytes | (1ull << 63); /* raw cluster 0 sits at byte 0: tag it */
  uint32_t e = le32toh(__atomic_load_n(&delta_bat(d)[vc], __ATOMIC_ACQUIRE));
  if (e == 0)
    return 0;
  return d->h.version == 1 ? (uint64_t)e * 512u : (uint64_t)e * d->cluster_bytes;
}
#define DELTA_OFF(x) ((x) & ~(1ull << 63))

/* Opens with full validation of header and BAT. FLAGS: PLOOP_OPEN_*. */
/* DIR: as ploop_open_file. */
struct ploop_delta *delta_open(const char *dir, const char *path, unsigned flags);
struct ploop_delta *delta_open_raw(const char *dir, const char *path, uint32_t cluster_sectors, bool rdwr);
/* A read-write delta whose store object is open without its lock and
 * nothing read yet (a shared disk another host still writes):
 * delta_open_preopened takes the lock and reads and validates everything
 * as delta_open does (FLAGS: PLOOP_OPEN_*), freeing D on failure. NULL
 * from delta_preopen (error set) when the store cannot open so. */
struct ploop_delta *delta_preopen(const char *dir, const char *path);
int delta_open_preopened(struct ploop_delta *d, unsigned flags);
void delta_discard_preopened(struct ploop_delta *d);
int delta_close(struct ploop_delta *d, bool clean);
/* Reserve a fresh cluster for VC; waits while another thread allocates VC.
 * Returns 1 with *OFF set if VC turned out allocated meanwhile, 0 with
 * *OFF = new cluster's byte offset (caller must call delta_alloc_finish), -1 on error. */
int delta_alloc_begin(struct ploop_delta *d, uint64_t vc, uint64_t *off);
/* Publish (OFF != 0) or abandon (OFF == 0) a reservation. */
void delta_alloc_finish(struct ploop_delta *d, uint64_t vc, uint64_t off);
/* Abandon the reservation of OFF after a failed write: the last cluster
 * handed out goes back to the append point (abandon in reverse order). */
void delta_alloc_abandon(struct ploop_delta *d, uint64_t vc, uint64_t off);
/* Set or clear a BAT entry in memory; marks the page for the next flush. */
void delta_set_entry(struct ploop_delta *d, uint64_t vc, uint64_t off);
/* Data durable, then dirty BAT pages written, then durable again. */
int delta_flush(struct ploop_delta *d);
/* Rewrite the header (in bat_raw) and make it durable. */
int delta_write_header(struct ploop_delta *d);
int delta_set_in_use(struct ploop_delta *d, bool in_use);
/* Makes a read-write delta immutable on disk: its data durable, its BAT
 * pages and the cleared in-use mark written; the caller issues the final
 * store flush of d->so (together with others). The caller excludes all I/O. */
int delta_seal_begin(struct ploop_delta *d);
uint64_t delta_count_allocated(const struct ploop_delta *d);
/* A new delta file, durable; IN_USE: created already marked (for a new top). */
int delta_create_file(const char *dir, const char *path, const struct ploop_delta_create_params *p,
                      bool in_use);
/* The same, left unsynced: *SO is the open delta, for the caller to flush
 * (store_flush_all) and close. */
int delta_create_file_nosync(const char *dir, const char *path, const struct ploop_delta_create_params *p,
                             bool in_use, struct store_obj *so);
/* delta_open flag: the file was just created by delta_create_file(in_use=true). */
#define DELTA_OPEN_FRESH (1u << 16)
void delta_fill_geometry(struct ploop_header_host *h, uint64_t size_sectors);
/* ploop's legacy CHS geometry for a size, shared by header and descriptor. */
void ploop_chs(uint64_t size_sectors, uint32_t *cylinders, uint32_t *heads, uint32_t *sectors);

/* ---- host-file extents OpenVZ accepts (extent.c) ---- */
/* LEN bytes at OFF allocated and reading as zeros: fallocate, or zeros
 * written where the filesystem has no fallocate. */
int ploop_reserve_zeroed(int fd, const char *path, uint64_t off, uint64_t len);
/* LEN bytes of zeros written at OFF. */
int ploop_reserve_written(int fd, const char *path, uint64_t off, uint64_t len);
size_t delta_bat_clusters(const struct ploop_delta *d);
/* Which header/BAT clusters are not written whole yet, and which data
 * clusters are only allocated (FIEMAP; none where the filesystem cannot
 * say). Read-write opens call it. */
int delta_extent_scan(struct ploop_delta *d, uint64_t file_size);
/* The data cluster at file offset OFF is allocated but not written (a
 * fallocate or zero range made it): a write into part of it must write it
 * whole. Lock-free; clusters past the bitmap read as written. */
void delta_unwritten_set(struct ploop_delta *d, uint64_t off, bool on);
bool delta_unwritten_get(const struct ploop_delta *d, uint64_t off);
/* Bitmap room for the delta's current BAT and file (after a resize). */
int delta_unwritten_grow(struct ploop_delta *d);
/* Under d->lock: every unwritten BAT cluster with a dirty page gets all its
 * pages marked dirty, so the flush writes it whole; returns how many
 * (their indexes in TAKEN, at most MAX); unmaterialize puts them back when
 * that write failed. */
size_t delta_bat_materialize(struct ploop_delta *d, uint32_t *taken, size_t max);
void delta_bat_unmaterialize(struct ploop_delta *d, const uint32_t *taken, size_t k);

/* ---- locking (lock.c) ---- */
/* Locks of a disk directory (lock.c); each returns an fd to close for
 * unlock, -1 on error, or -2 (READER only) where the directory is read-only
 * media and no lock is needed. */
#define PLOOP_LOCK_WRITER 1u /* one process changes the disk at a time */
#define PLOOP_LOCK_DELTAS                                                                                    \
  2u /* existing deltas get rewritten or removed (alone: the writer already holds byte 0) */
#define PLOOP_LOCK_READER 4u                         /* shared: a snapshot is open read-only */
int ploop_lock_disk(const char *dir, unsigned what); /* the store's lock for DIR */
void ploop_unlock_disk(int fd);
int lock_disk_file(const char *dir, unsigned what); /* the file store's: OFD locks in DIR */

/* ---- disk (disk.c) ---- */
struct ploop_disk {
  char *dir;
  struct ploop_descriptor *desc;
  struct ploop_delta *deltas[PLOOP_MAX_DELTAS]; /* [0] = top ... [n-1] = base */
  unsigned n;
  bool rdwr;
  unsigned open_flags;
  uint64_t size_bytes;
  uint64_t cluster_bytes;
  pthread_rwlock_t rw; /* I/O: read side; structure changes: disk_lock_exclusive */
  unsigned pins;       /* mappings handed out by ploop_disk_map, not yet unmapped */
  unsigned draining;   /* structure changes waiting for the pins to go */
  unsigned exclusive_gen; /* disk_lock_exclusive calls: a change to the structure since a read-side look */
  uint64_t snapshot_pause_us; /* the last online snapshot's exclusive section */
  pthread_mutex_t pin_lock;
  pthread_cond_t pin_cond;
  int lock_fd;
  uint8_t *dirty; /* dirty-tracking bitmap, one bit per cluster */
  size_t dirty_bytes;
  bool dirty_on;
  char *snapshot_guid; /* set for a read-only snapshot view */
  struct ploop_delta *pre; /* standby: the top opened ahead, unlocked (disk_preopen_top) */
  bool acquired_ahead;     /* the last ACQUIRE used it */
};
/* Structure changes take the disk this way: no I/O in flight through the
 * library or through a pinned mapping (ploop_disk_map). */
void disk_lock_exclusive(struct ploop_disk *disk);
void disk_unlock_exclusive(struct ploop_disk *disk);
/* Read virtual cluster VC range from deltas starting at depth index FROM (0 = top). */
int disk_read_cluster_range(struct ploop_disk *disk, unsigned from, uint64_t vc, uint64_t coff, void *buf,
                            size_t len);
/* Depth (1-based) of the first delta from index FROM that holds VC; 0 if none. */
unsigned disk_find(struct ploop_disk *disk, unsigned from, uint64_t vc, uint64_t *off);
/* Makes whole cluster VC read as zeros (KEEP: stay allocated in the top). Caller holds disk->rw. */
int disk_zero_cluster(struct ploop_disk *disk, uint64_t vc, bool keep);
/* Opens one image of a descriptor (raw or ploop1) with delta_open FLAGS. */
struct ploop_delta *delta_open_image(const struct ploop_descriptor *desc, const struct ploop_image_desc *im,
                                     unsigned flags);
/* Opens the chain of descriptor images ending at GUID. */
int disk_open_chain(struct ploop_disk *disk, const char *guid, unsigned flags);
/* The same with the top taken from PRE (delta_preopen), which it owns from
 * then on; on failure every delta is closed, the top clean. */
int disk_open_chain_top(struct ploop_disk *disk, const char *guid, unsigned flags, struct ploop_delta *pre);
/* Standby (disk-handover.c): the top's image opened ahead, without its
 * lock, so that ACQUIRE only locks and reads it (disk->pre). Best effort:
 * nothing is kept when the store cannot. */
void disk_preopen_top(struct ploop_disk *disk);
/* ACQUIRE with the top opened ahead: the descriptor DISK->desc's chain
 * over disk->pre. -1 (error set, every delta closed, disk->pre gone): the
 * caller opens in full (disk_open_chain). */
int disk_open_preopened(struct ploop_disk *disk, unsigned flags);
/* The error of I/O on a released disk (disk-handover.c): -1, ESHUTDOWN. */
int disk_released_error(struct ploop_disk *disk);
void disk_close_deltas(struct ploop_disk *disk, bool clean);
/* Marks [OFF, OFF+LEN) written for dirty tracking (a no-op while it is off). */
void disk_mark_dirty(struct ploop_disk *disk, uint64_t off, uint64_t len);

/* ---- copy helpers (copy.c) ---- */
/* ploop_export_raw with explicit open flags (PLOOP_OPEN_NO_LOCK when the caller holds the lock). */
/* export_raw flag: DST is a new file inside the disk's directory (beneath it). */
#define EXPORT_NEW_IN_DIR (1u << 17)
int export_raw(const char *dir_or_xml, const char *snapshot_guid, const char *dst, unsigned open_flags,
               ploop_progress_fn progress, void *opaque, struct ploop_copy_stats *stats);
/* Copy every cluster X holds into P (below it), appending in P as needed. */
int merge_delta_into(struct ploop_delta *x, struct ploop_delta *p, bool skip_zero, ploop_progress_fn progress,
                     void *opaque, uint64_t done_base, uint64_t total);
/* Copies into DST every cluster SRC holds and DST lacks, within DST's size;
 * DST's own clusters are never written. Ends with DST sealed: data, then
 * BAT and a clean header, durable; DST is read-only in memory after. */
int merge_fill_holes(struct ploop_delta *src, struct ploop_delta *dst, ploop_progress_fn progress,
                     void *opaque, uint64_t total);
/* merge_delta_into for a P that is written no more after it: P ends
 * durable with its BAT pages and a clean header on disk in one pass, so the
 * caller closes it without another write (rdwr cleared). */
int merge_delta_into_sealed(struct ploop_delta *x, struct ploop_delta *p, ploop_progress_fn progress,
                            void *opaque, uint64_t total);
/* Streaming reads for ploop_send: every cluster whose topmost holder is one
 * of the deltas at depths FROM+1..TO (FROM = 0: the top) is read, many in
 * flight, and handed to SINK (LEN: the bytes of it inside the disk, 512
 * aligned) as its read completes, in any order. A sink error stops it. */
typedef int (*held_sink_fn)(void *opaque, uint64_t vc, const uint8_t *buf, size_t len);
int copy_read_held(struct ploop_disk *disk, unsigned from, unsigned to, held_sink_fn sink, void *opaque);
/* How many clusters copy_read_held would read. */
uint64_t copy_count_held(struct ploop_disk *disk, unsigned from, unsigned to);
/* Undo an interrupted version conversion from its backup (check -F). 1 = restored, 0 = no backup. */
int convert_restore_backup(const char *dir, const char *path);
/* ploop_delta_check of a descriptor's image (DIR: as ploop_open_file). */
int delta_check(const char *dir, const char *path, unsigned flags, struct ploop_check_report *r);

/* ---- snapshots, merge, resize ---- */
struct ploop_descriptor *descriptor_load_locked(const char *dir_or_xml, int *lock, unsigned what);
/* Offline: merge image CHILD_GUID into its parent; the parent's file takes
 * the child's GUID. D is loaded with the disk lock held and is updated. */
int merge_child_into_parent(struct ploop_descriptor *d, const char *child_guid, ploop_progress_fn progress,
                            void *opaque);
/* Grow or shrink a delta's virtual size, relocating data clusters that sit
 * where a bigger BAT must go. FORCE drops clusters past a smaller end. */
int delta_set_size(struct ploop_delta *d, uint64_t size_sectors, bool force);
/* Moves tail clusters into unreferenced ones and cuts the file after the
 * last referenced cluster. The caller excludes all I/O. */
int delta_compact(struct ploop_delta *d, uint64_t *bytes_reclaimed);

/* ---- descriptor internals (descriptor.c) ---- */
/* A local disk directory or its DiskDescriptor.xml -> canonical DIR and XML. */
int descriptor_resolve_file(const char *dir_or_xml, char **dir_out, char **xml_out);
/* descriptor_write_tmp's handle where the store replaces the descriptor itself. */
#define DESCRIPTOR_TMP_STORE (-2)
struct ploop_descriptor *descriptor_new(const char *dir, uint64_t size_sectors, uint32_t cluster_sectors);
int descriptor_add_image(struct ploop_descriptor *d, const char *guid, const char *file, const char *parent);
void descriptor_remove_image(struct ploop_descriptor *d, const char *guid);
struct ploop_snapshot_desc *descriptor_find_shot(struct ploop_descriptor *d, const char *guid);
struct ploop_descriptor *descriptor_dup(const struct ploop_descriptor *d);
/* The atomic save in two halves, so a caller can sync the .tmp together
 * with other files: write DIR/DiskDescriptor.xml.tmp (not synced), then
 * fsync (unless SYNCED) + rename + fsync the directory. */
int descriptor_write_tmp(const struct ploop_descriptor *d, int *tmp_fd);
int descriptor_commit_tmp(const struct ploop_descriptor *d, int tmp_fd, bool synced);
void descriptor_abort_tmp(const struct ploop_descriptor *d, int tmp_fd);
/* Renames image GUID FROM to TO everywhere (images, shots, parents, top). */
void descriptor_rename_guid(struct ploop_descriptor *d, const char *from, const char *to);
/* Number of shots whose parent is GUID. */
size_t descriptor_children(const struct ploop_descriptor *d, const char *guid, const char **child);

#endif
