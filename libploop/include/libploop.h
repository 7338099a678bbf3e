/* libploop: ploop/Parallels v2 image stacks in user space, through direct I/O.
 *
 * Error convention (as libnbd): every function returns -1 (or NULL) on error
 * and leaves a one-line message naming the file and the problem in
 * thread-local storage, read with ploop_get_error() / ploop_get_errno().
 * The library never prints, never exits, never parses argv.
 *
 * Thread safety: a struct ploop_disk may be used from many threads at once
 * for pread/pwrite/flush/discard/write_zeroes/block_status; structural
 * operations (snapshot, resize, close) serialise against in-flight I/O
 * internally.  Other objects are single-threaded.
 */
#ifndef LIBPLOOP_H
#define LIBPLOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLOOP_VERSION_STRING "0.1.0"

/* ---- errors -------------------------------------------------------- */

const char *ploop_get_error(void);
int ploop_get_errno(void);

/* Exit-code classes that the CLI maps failures to (documented in README). */
enum ploop_status {
  PLOOP_OK = 0,
  PLOOP_ERR_GENERIC = 1,
  PLOOP_ERR_PARAM = 2,    /* bad argument from the caller */
  PLOOP_ERR_CORRUPT = 3,  /* image or descriptor fails validation */
  PLOOP_ERR_IO = 4,       /* the operating system refused I/O */
  PLOOP_ERR_BUSY = 5,     /* locked by another process, or in use */
  PLOOP_ERR_NOTFOUND = 6, /* no such file, or it cannot be opened */
  PLOOP_ERR_NOSNAP = 7,   /* no such snapshot */
  PLOOP_ERR_READ = 8,     /* the operating system refused a read (IO is for writes, syncs) */
  PLOOP_ERR_CANCELLED = 9, /* stopped by ploop_cancel() */
};
/* Class of the last error in this thread (an enum ploop_status). */
int ploop_get_status(void);
/* For layers built on libploop (NBD server, attach): record an error in the
 * same per-thread slot so callers print one line. Returns -1. */
int ploop_set_error(int status, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Cancellation of long operations (import, export, merge, convert, send,
 * receive): ploop_cancel() only sets a flag, so a signal handler may call
 * it; those operations look at it between clusters (and when a blocking
 * read or write of a stream is interrupted) and fail with
 * PLOOP_ERR_CANCELLED, leaving what a failure there leaves: the old state
 * or a crash-consistent one. The flag is process-wide and stays set until
 * ploop_cancel_reset(). */
void ploop_cancel(void);
void ploop_cancel_reset(void);
bool ploop_cancelled(void);

/* ---- constants ------------------------------------------------------ */

#define PLOOP_SECTOR_SIZE 512u
#define PLOOP_DEFAULT_CLUSTER_SECTORS 2048u /* 1 MiB */
#define PLOOP_MIN_CLUSTER_SECTORS 64u       /* 32 KiB */
#define PLOOP_MAX_CLUSTER_SECTORS 131072u   /* 64 MiB */
#define PLOOP_MAX_DELTAS 128u               /* 126 snapshots + base + top */
#define PLOOP_UUID_LEN 38                   /* "{xxxxxxxx-...-xxxxxxxxxxxx}" */
#define PLOOP_TOP_GUID "{5fbaabe3-6958-40ff-92a7-860e329aab41}"
#define PLOOP_NULL_GUID "{00000000-0000-0000-0000-000000000000}"
#define PLOOP_DESCRIPTOR_NAME "DiskDescriptor.xml"
#define PLOOP_DEFAULT_IMAGE_NAME "root.hds"

/* ---- single delta file ---------------------------------------------- */

struct ploop_delta;

struct ploop_delta_create_params {
  uint64_t size_bytes;      /* virtual size; rounded up to the cluster */
  uint32_t cluster_sectors; /* 0 = default (2048) */
  int version;              /* 0 = 2; 1 or 2 */
};

enum ploop_open_flags {
  PLOOP_OPEN_RDONLY = 0,
  PLOOP_OPEN_RDWR = 1 << 0,
  PLOOP_OPEN_ALLOW_DIRTY = 1 << 1, /* open even if the in-use mark is set */
  PLOOP_OPEN_NO_LOCK = 1 << 2,     /* disk: skip the descriptor lock (caller holds it) */
  PLOOP_OPEN_STANDBY = 1 << 3,     /* disk, RDWR: opened released (ploop_disk_acquire opens it) */
};

struct ploop_delta_info {
  int version; /* 1 or 2 */
  uint32_t cluster_sectors;
  uint64_t cluster_bytes;
  uint64_t virtual_bytes; /* m_SizeInSectors * 512 */
  uint32_t bat_entries;   /* m_Size */
  uint32_t first_block_sectors;
  uint64_t allocated_clusters;
  uint64_t file_bytes; /* st_size */
  uint64_t disk_bytes; /* st_blocks * 512 */
  bool in_use;
  uint32_t flags;
};

/* Create a new, empty delta; fails if PATH exists. */
int ploop_delta_create(const char *path, const struct ploop_delta_create_params *p);
struct ploop_delta *ploop_delta_open(const char *path, unsigned flags);
/* Flush, clear the in-use mark (if opened read-write) and close. */
int ploop_delta_close(struct ploop_delta *d);
int ploop_delta_get_info(struct ploop_delta *d, struct ploop_delta_info *out);
const char *ploop_delta_path(const struct ploop_delta *d);

/* ---- checking a delta ---------------------------------------------- */

struct ploop_check_report {
  uint64_t clusters_beyond_eof;  /* BAT entry points past the file end */
  uint64_t clusters_beyond_size; /* BAT slot past the virtual size used */
  uint64_t clusters_misaligned;  /* v1: entry not cluster-aligned */
  uint64_t clusters_duplicate;   /* one data cluster referenced twice */
  uint64_t clusters_in_bat_area; /* entry points into header/BAT */
  uint64_t clusters_lost;        /* data cluster nobody references */
  bool header_bad;               /* unusable header: nothing else checked */
  bool file_size_unaligned;
  bool in_use;
  bool repaired; /* repair was asked for and done */
  char header_problem[256];
  bool in_use_dropped; /* the in-use mark was cleared */
};
enum ploop_check_flags {
  PLOOP_CHECK_REPAIR = 1 << 0,  /* fix what can be fixed (clears bad slots) */
  PLOOP_CHECK_FORCE = 1 << 1,   /* check even when the in-use mark is clear */
  PLOOP_CHECK_READONLY = 1 << 2, /* never write, even the in-use mark */
  PLOOP_CHECK_KEEP_INUSE = 1 << 3, /* REPAIR leaves the in-use mark (OpenVZ's -F without -d) */
  PLOOP_CHECK_DROP_INUSE = 1 << 4, /* clear the in-use mark when nothing else is wrong (OpenVZ's -d) */
};
/* Returns 0 when clean (or repaired), 1 when problems remain (an in-use
 * mark left set included), -1 on error. An image that cannot be opened
 * is PLOOP_ERR_NOTFOUND whatever the reason (OpenVZ's SYSEXIT_OPEN). */
int ploop_delta_check(const char *path, unsigned flags, struct ploop_check_report *r);
/* Writes zeros into every hole of the file (OpenVZ's check -S: its
 * kernel and its check refuse a sparse image); *FILLED = bytes filled. */
int ploop_delta_fill_holes(const char *path, uint64_t *filled);
/* One line per problem found, for printing; writes into BUF. */
void ploop_check_report_format(const struct ploop_check_report *r, char *buf, size_t len);

/* ---- DiskDescriptor.xml --------------------------------------------- */

struct ploop_image_desc {
  char guid[PLOOP_UUID_LEN + 1];
  char *file; /* relative to the descriptor's directory */
  bool plain; /* Type=Plain (raw), else Compressed (ploop1) */
};
struct ploop_snapshot_desc {
  char guid[PLOOP_UUID_LEN + 1];
  char parent[PLOOP_UUID_LEN + 1];
  bool temporary;
};
struct ploop_descriptor {
  char *dir;                /* absolute directory of the descriptor */
  uint64_t size_sectors;    /* Disk_size */
  uint32_t cluster_sectors; /* Blocksize */
  uint32_t cylinders, heads, sectors;
  char top_guid[PLOOP_UUID_LEN + 1];
  struct ploop_image_desc *images;
  size_t n_images;
  struct ploop_snapshot_desc *snapshots;
  size_t n_snapshots;
};
/* DIR_OR_XML is a directory holding DiskDescriptor.xml or the file itself. */
struct ploop_descriptor *ploop_descriptor_load(const char *dir_or_xml);
/* Atomic replace: .tmp, fsync, rename, fsync dir. */
int ploop_descriptor_save(const struct ploop_descriptor *d);
void ploop_descriptor_free(struct ploop_descriptor *d);
/* Validation of structure: cycles, two tops, missing files, paths leaving the dir. */
int ploop_descriptor_validate(const struct ploop_descriptor *d);
/* The chain base..GUID (GUID NULL = top); returns count, fills indexes into images[]. */
int ploop_descriptor_chain(const struct ploop_descriptor *d, const char *guid, size_t *idx, size_t max);
const struct ploop_image_desc *ploop_descriptor_find_image(const struct ploop_descriptor *d,
                                                           const char *guid);
/* Absolute path of an image; caller frees. NULL (with the error set) when
 * the path resolves outside the descriptor's directory (a symlink on the
 * way) or names something other than a regular file; a missing file is
 * not an error here. */
char *ploop_descriptor_image_path(const struct ploop_descriptor *d, const struct ploop_image_desc *img);
/* Opens a ploop1 image of D as a delta (ploop_delta_open FLAGS), resolved
 * inside D's directory as every libploop open of a descriptor's image is. */
struct ploop_delta *ploop_descriptor_open_image(const struct ploop_descriptor *d,
                                                const struct ploop_image_desc *img, unsigned flags);

/* Make a new disk: DIR/root.hds (or the given delta path) + DiskDescriptor.xml.
 * In Ceph: "rbd:POOL/NAME[?conf=PATH]" (Ceph configuration from the URI or
 * CEPH_CONF) makes the RBD image NAME.root.hds and the RADOS object
 * NAME.DiskDescriptor.xml; every disk verb accepts such a name. */
int ploop_disk_create(const char *delta_path, const struct ploop_delta_create_params *p);
/* Fences whoever holds the RBD disk DIR (librbd blocklists it: its next
 * write fails) and removes its locks; HOLDER gets its name ("" if none). */
int ploop_rbd_lock_break(const char *dir, char *holder, size_t holder_len);
/* Removes the RBD disk DIR whole (its images, descriptor and lock
 * objects); refused while anyone holds it. */
int ploop_rbd_disk_remove(const char *dir);

/* ---- the disk: a stack of deltas ------------------------------------ */

struct ploop_disk;

/* Opens the stack the descriptor describes, top read-write when
 * PLOOP_OPEN_RDWR.  SNAPSHOT_GUID non-NULL opens that snapshot's state
 * read-only (the chain base..snapshot). Takes the disk lock for RDWR. */
struct ploop_disk *ploop_disk_open(const char *dir_or_xml, const char *snapshot_guid, unsigned flags);
int ploop_disk_close(struct ploop_disk *disk);
/* Handing a disk in shared storage (rbd:) to another host without closing
 * it here: RELEASE flushes, closes the deltas cleanly (the in-use mark goes,
 * librbd's exclusive lock is released) and drops the disk lock; until
 * ACQUIRE reopens the stack from the store (taking the locks again) every
 * I/O fails with ESHUTDOWN. ACQUIRE_FLAGS may hold PLOOP_OPEN_ALLOW_DIRTY
 * (the other holder was fenced and left its mark). The size stays the
 * one the disk was opened with: a stack that grew or shrank meanwhile is
 * refused. Both wait for I/O in flight. */
int ploop_disk_release(struct ploop_disk *disk);
int ploop_disk_acquire(struct ploop_disk *disk, unsigned acquire_flags);
bool ploop_disk_released(const struct ploop_disk *disk);
/* The last ploop_disk_acquire used the top image opened ahead (a standby
 * open of a disk in shared storage keeps it open without its lock); false:
 * it opened the image in full. */
bool ploop_disk_acquired_ahead(const struct ploop_disk *disk);

uint64_t ploop_disk_size(const struct ploop_disk *disk);         /* bytes */
uint64_t ploop_disk_cluster_size(const struct ploop_disk *disk); /* bytes */
bool ploop_disk_readonly(const struct ploop_disk *disk);
/* Number of deltas in the stack (base = depth n, top = depth 1). */
unsigned ploop_disk_depth(const struct ploop_disk *disk);
const char *ploop_disk_dir(const struct ploop_disk *disk);
/* A snapshot of the descriptor as it is now (caller frees). */
struct ploop_descriptor *ploop_disk_descriptor(struct ploop_disk *disk);

/* Any offset/length/buffer; aligned (512 B offset+len, 4 KiB buffer) is the fast path. */
int ploop_disk_pread(struct ploop_disk *disk, void *buf, size_t len, uint64_t off);

enum ploop_write_flags {
  PLOOP_WRITE_FUA = 1 << 0,    /* durable before return */
  PLOOP_ZERO_NO_HOLE = 1 << 1, /* write_zeroes: keep clusters allocated */
  PLOOP_ZERO_FAST = 1 << 2,    /* write_zeroes: fail with ENOTSUP if slow */
};
int ploop_disk_pwrite(struct ploop_disk *disk, const void *buf, size_t len, uint64_t off, unsigned flags);
/* Every write that returned before this call is durable when it returns. */
int ploop_disk_flush(struct ploop_disk *disk);
/* Frees whole clusters of the top delta that the range covers (reads as
 * zero afterwards when no lower delta holds them; otherwise zeroes are
 * written), zeroes partial clusters. */
int ploop_disk_discard(struct ploop_disk *disk, uint64_t off, uint64_t len);
int ploop_disk_write_zeroes(struct ploop_disk *disk, uint64_t off, uint64_t len, unsigned flags);

/* Allocation map: extents of equal state from OFF, at most MAX. */
struct ploop_extent {
  uint64_t offset, length;
  unsigned depth; /* 0 = in no delta (hole), 1 = top, 2 = the one below, ... */
};
int ploop_disk_block_status(struct ploop_disk *disk, uint64_t off, uint64_t len, struct ploop_extent *out,
                            size_t max);

/* Direct access, for callers that run their own asynchronous I/O (ploop-nbd's
 * FUSE export over io_uring): where the library would do one plain pread or
 * pwrite for [OFF, OFF+LEN), it says which file and offset, and the caller
 * does the I/O itself. The range must lie within one cluster.
 *   PLOOP_MAP_FILE: read or write LEN bytes at MAP->file_offset of MAP->fd
 *     (opened O_DIRECT: 512-byte aligned offset, length and buffer; a raw
 *     base may end mid-cluster, and a short read past its end means zeros),
 *     then call ploop_disk_unmap(). Until then the mapping is pinned:
 *     snapshots, merges, resizes, compaction and dirty-map reads wait.
 *   PLOOP_MAP_ZERO (reads only): no delta holds the range; it reads as zeros.
 *   PLOOP_MAP_NONE: the library has to do it (a write that allocates or
 *     copies up, a range across clusters, a structure change waiting): use
 *     ploop_disk_pread / ploop_disk_pwrite.
 * A mapped write counts for dirty tracking; it is durable after a later
 * ploop_disk_flush, as any write. Unmap everything before ploop_disk_close. */
enum ploop_map_result { PLOOP_MAP_NONE = 0, PLOOP_MAP_FILE = 1, PLOOP_MAP_ZERO = 2 };
struct ploop_mapping {
  int fd;
  uint64_t file_offset;
};
#define PLOOP_MAP_WRITE 1u
int ploop_disk_map(struct ploop_disk *disk, uint64_t off, size_t len, unsigned flags,
                   struct ploop_mapping *map);
void ploop_disk_unmap(struct ploop_disk *disk);

/* Asynchronous I/O, for a server that keeps many requests in flight on a
 * disk whose store has its own (Ceph RBD: librbd's aio). Completions are
 * collected in a queue whose eventfd turns readable when some wait, so
 * they feed the caller's own loop; nothing is allocated per request once
 * the queue has records for the depth in use.
 *   ploop_disk_has_aio: whether the disk's store has it (a file disk has
 *     not: use ploop_disk_map or the synchronous calls).
 *   ploop_disk_aio_start: starts a READ or WRITE of LEN bytes at OFF when
 *     one delta holds the whole range already (inside one cluster; a write
 *     only where the top holds it written: no allocation, no copy-up).
 *     1: started; its (TAG, result) comes out of ploop_aio_queue_reap, and
 *     until then BUF stays the caller's and the range is pinned as with
 *     ploop_disk_map. 0: not this way (a hole, an allocation, a structure
 *     change waiting, no aio): use ploop_disk_pread / ploop_disk_pwrite.
 *     -1: error set (range, read-only disk, out of memory).
 *   A write is on the store's replicas when reaped with 0 (what a FUA
 *   write needs still takes ploop_disk_flush).
 *   ploop_aio_queue_reap: up to MAX finished requests, without waiting:
 *     their TAGS and RESULTS (0 or -errno); their count, 0 when none.
 *   ploop_aio_queue_free: only once nothing started on it is unreaped. */
struct ploop_aio_queue;
struct ploop_aio_queue *ploop_aio_queue_new(void);
void ploop_aio_queue_free(struct ploop_aio_queue *q);
int ploop_aio_queue_fd(const struct ploop_aio_queue *q);
int ploop_aio_queue_reap(struct ploop_aio_queue *q, void **tags, int *results, unsigned max);
bool ploop_disk_has_aio(const struct ploop_disk *disk);
int ploop_disk_aio_start(struct ploop_disk *disk, struct ploop_aio_queue *q, bool write, void *buf,
                         size_t len, uint64_t off, void *tag);

/* Dirty tracking: clusters written since the mark (bitmap of clusters). */
int ploop_disk_dirty_start(struct ploop_disk *disk); /* clear and start */
int ploop_disk_dirty_stop(struct ploop_disk *disk);
/* Copies the bitmap (one bit per cluster, ceil(clusters/8) bytes) and, if
 * CLEAR, resets it atomically with the copy. */
int ploop_disk_dirty_get(struct ploop_disk *disk, uint8_t *bitmap, size_t bytes, bool clear);

/* ---- snapshots ------------------------------------------------------ */

/* Instant snapshot of an open read-write disk: drains in-flight I/O,
 * flushes, pushes a new empty top.  GUID may be NULL (generated).  The new
 * snapshot's GUID is written to OUT (PLOOP_UUID_LEN+1 bytes). */
int ploop_disk_snapshot(struct ploop_disk *disk, const char *guid, char *out);
/* How long the last ploop_disk_snapshot held the disk's I/O (drain, seal,
 * flush, descriptor), in microseconds; 0 before any. */
uint64_t ploop_disk_snapshot_pause_us(const struct ploop_disk *disk);
/* Offline form: opens, snapshots, closes. */
int ploop_snapshot_create(const char *dir_or_xml, const char *guid, char *out);
/* Delete: leaf removed; one child merged into it; else refused. */
int ploop_snapshot_delete(const char *dir_or_xml, const char *guid);
typedef void (*ploop_progress_fn)(void *opaque, uint64_t done, uint64_t total);
/* Merge GUID into its parent (GUID NULL = the top's parent chain, ALL = everything into base). */
int ploop_snapshot_merge(const char *dir_or_xml, const char *guid, bool all, ploop_progress_fn progress,
                         void *opaque);
/* Online merge on an open disk (merges the snapshot below the top into ... as above). */
int ploop_disk_merge(struct ploop_disk *disk, const char *guid, bool all, ploop_progress_fn progress,
                     void *opaque);
int ploop_snapshot_switch(const char *dir_or_xml, const char *guid);

/* Compaction of an open read-write disk: moves the top delta's tail
 * clusters into holes left by discards (data made durable before the BAT
 * entry moves), then truncates the file. Serialised against in-flight I/O.
 * ploop_cancel() stops it between two moves: what was moved so far is
 * truncated away, the image is consistent, PLOOP_ERR_CANCELLED returned. */
int ploop_disk_compact(struct ploop_disk *disk, uint64_t *bytes_reclaimed);

/* ---- resize, convert ------------------------------------------------ */

enum ploop_resize_flags { PLOOP_RESIZE_FORCE = 1 << 0 };
int ploop_resize(const char *dir_or_xml, uint64_t new_bytes, unsigned flags);
/* Online grow/shrink of an open read-write disk. */
int ploop_disk_resize(struct ploop_disk *disk, uint64_t new_bytes, unsigned flags);
int ploop_convert_version(const char *dir_or_xml, int version);
int ploop_convert_format(const char *dir_or_xml, bool to_raw);

/* ---- import / export ------------------------------------------------ */

struct ploop_copy_stats {
  uint64_t bytes_total, clusters_written, clusters_zeroed, clusters_skipped;
};
/* Make the disk equal to the raw file SRC; writes only clusters that differ. */
int ploop_import_raw(const char *src, const char *dir_or_xml, ploop_progress_fn progress, void *opaque,
                     struct ploop_copy_stats *stats);
/* Write the virtual disk (at SNAPSHOT_GUID, or the top) as a sparse raw file. */
int ploop_export_raw(const char *dir_or_xml, const char *snapshot_guid, const char *dst,
                     ploop_progress_fn progress, void *opaque, struct ploop_copy_stats *stats);

/* ---- check of a whole disk ------------------------------------------ */

/* Checks the descriptor and every delta. Returns 0 clean/repaired, 1 broken,
 * 2 intact but some delta left marked in use, -1 error. MSG receives one
 * line per problem. */
int ploop_disk_check(const char *dir_or_xml, unsigned flags, char *msg, size_t msglen);

/* ---- helpers -------------------------------------------------------- */

/* "{8-4-4-4-12}" random UUID into OUT (PLOOP_UUID_LEN+1). */
void ploop_uuid_generate(char *out);
/* Accepts with or without braces; normalises to braced lowercase. */
int ploop_uuid_normalize(const char *in, char *out);
/* Parses "10G", "512M", "4096" (bytes), K/M/G/T suffixes (binary). */
int ploop_parse_size(const char *s, uint64_t *out);

/* ---- disk streams: send / receive (formats/ploop-stream.md) --------- */

/* Byte counts of one stream. */
struct ploop_stream_stats {
  uint64_t bytes;      /* on the wire, headers included */
  uint64_t clusters;   /* data frames */
  uint64_t data_bytes; /* payload bytes before compression */
  double seconds;
  char guid[PLOOP_UUID_LEN + 1]; /* the state the stream carries */
};
struct ploop_send_opts {
  const char *guid;  /* state to send: a snapshot GUID; NULL = the top */
  const char *since; /* only clusters changed after this snapshot; NULL = full */
  bool snapshots;    /* the whole chain up to GUID, snapshot GUIDs kept */
  bool compress;     /* deflate each frame's payload (zlib) where it shrinks */
  ploop_progress_fn progress;
  void *opaque;
};
/* Both ends handle short reads and writes, EINTR and non-blocking fds. On
 * a socket, writes use MSG_NOSIGNAL (a vanished peer is an EPIPE error, not
 * a SIGPIPE; on a pipe the caller ignores SIGPIPE itself), and a blocking
 * socket's SO_RCVTIMEO / SO_SNDTIMEO running out ends the transfer with
 * ETIMEDOUT: the caller's way to bound a stalled peer.
 *
 * ploop_send writes exactly one stream of the disk's state to FD (a file,
 * pipe or socket) and never closes FD. Sending a snapshot (GUID given)
 * takes only the shared reader lock, so it works while the disk is served
 * read-write (ploop-nbd). The top (GUID NULL; it must not be in use) is
 * sent under a new GUID, reported in ST->guid. "Changed after SINCE" = the
 * clusters the deltas above SINCE up to the sent state hold. O may be NULL
 * (full send of the top); ST may be NULL. */
int ploop_send(const char *dir_or_xml, const struct ploop_send_opts *o, int fd, struct ploop_stream_stats *st);

struct ploop_receive_opts {
  ploop_progress_fn progress;
  void *opaque;
};
/* ploop_receive reads exactly one stream from FD, never past its end frame
 * (other data may follow on FD), verifying every checksum as frames arrive.
 * A full stream creates the disk in DIR (absent or empty): the sent state
 * becomes a snapshot with the sent GUID, a new empty top above it. It is
 * built in a hidden ".NAME.receive-XXXXXX" beside DIR and renamed to DIR at
 * the end, so even a killed receive leaves DIR as it was. An incremental
 * stream applies to a DIR whose newest snapshot is the stream's base with
 * an empty top above it; the sent state becomes the next snapshot. On any
 * error a full receive removes what it made and an incremental one leaves
 * DIR as it was. RECEIVED_GUID (may be NULL) gets the GUID of the state now
 * held, braced as everywhere in libploop: it must hold PLOOP_UUID_LEN+1 =
 * 39 bytes (not 37). */
int ploop_receive(const char *dir, const struct ploop_receive_opts *o, int fd, struct ploop_stream_stats *st,
                  char *received_guid);
/* ploop_receive_device applies one incremental stream in place to DEV, an
 * open block device or file (O_DIRECT is fine) that reads as snapshot
 * BASE_GUID's state of a disk of the stream's size, e.g. an attached disk
 * whose top is empty above that snapshot: each cluster of the stream is
 * written at its virtual offset (zero ranges as zeros), every checksum
 * verified as with ploop_receive, then DEV is fsync'd. BASE_GUID NULL
 * skips the check of the stream's base. Nothing is atomic here: after an
 * error DEV holds part of the stream, and the caller throws it away (a
 * migration's destination discards the whole copy). */
int ploop_receive_device(int dev, const char *base_guid, const struct ploop_receive_opts *o, int fd,
                         struct ploop_stream_stats *st, char *received_guid);

#ifdef __cplusplus
}
#endif
#endif
