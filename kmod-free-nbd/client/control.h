/* Client side of ploop-nbd's control socket: lets `ploop snapshot`,
 * `snapshot-merge`, `resize`, `info` (and backup/migration tools) act on a
 * disk ONLINE while ploop-nbd serves it, instead of opening it themselves.
 *
 * Usage from the CLI:
 *
 *     int fd = ploop_ctl_connect(dir);
 *     if (fd < 0 && errno == ENOENT)  -> nobody serves DIR: do it offline
 *     else if (fd < 0)                -> error (ploop_ctl_error())
 *     else { close(fd); ploop_ctl_snapshot(dir, NULL, guid); ... }
 *
 * Each ploop_ctl_* call opens its own connection, sends one request and
 * waits for the answer; they are safe to call from several threads.
 * Errors: -1 with errno set and a one-line message (naming the disk and the
 * server's reason) in ploop_ctl_error(), kept per thread.
 *
 * Where the socket lives: $PLOOP_RUN_DIR (default /run/ploop) /
 * <16 hex digits of FNV-1a-64 of the realpath of DIR>.ctl, mode 0600.  The
 * server greets with "ploop-nbd 1 <realpath>\n" so a client never talks to
 * a server of another disk by a hash collision.
 *
 * Wire protocol (text lines, '\n'-terminated, at most 4096 bytes):
 *   C: SNAPSHOT [GUID]          S: OK {guid}
 *   C: MERGE [GUID|-] [ALL]     S: OK
 *   C: RESIZE SIZE              S: OK BYTES          (SIZE: bytes or 10G; the new size)
 *   C: COMPACT                  S: OK BYTES          (bytes reclaimed)
 *   C: INFO                     S: OK {json...}      (one line)
 *   C: DIRTY START|STOP         S: OK
 *   C: DIRTY GET [CLEAR]        S: OK NBYTES CLUSTER_BYTES, then NBYTES raw bytes
 *   any failure                 S: ERR ERRNO message
 */
#ifndef PLOOP_CONTROL_H
#define PLOOP_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLOOP_CTL_DEFAULT_RUN_DIR "/run/ploop"
#define PLOOP_CTL_PROTO_VERSION 1
#define PLOOP_CTL_MAX_LINE 4096

/* The message of the last failed ploop_ctl_* call in this thread. */
const char *ploop_ctl_error(void);

/* The control socket path for disk directory DIR (or its DiskDescriptor.xml)
 * into OUT.  Returns 0, or -1 (DIR does not exist, or path too long). */
int ploop_ctl_socket_path(const char *dir, char *out, size_t len);

/* Connects to the server of DIR and checks its greeting.  Returns a socket
 * fd (caller closes), or -1: errno ENOENT when no live server serves DIR
 * (no socket, or a stale one), other errno on real errors. */
int ploop_ctl_connect(const char *dir);

/* Takes an online snapshot (atomic w.r.t. writes: every write acknowledged
 * before the call is in it).  GUID NULL = generate one.  The snapshot's
 * GUID ("{...}") is written to OUT_GUID (at least 39 bytes) if non-NULL.
 * The snapshot becomes visible as export NAME@UUID at once. */
int ploop_ctl_snapshot(const char *dir, const char *guid, char *out_guid);

/* Online merge, as ploop_disk_merge: GUID NULL = the snapshot below the
 * top into... (see libploop.h); ALL = the whole chain into the base.
 * Fails with EBUSY while a client reads a snapshot export of the disk. */
int ploop_ctl_merge(const char *dir, const char *guid, bool all);

/* Online grow/shrink to NEW_BYTES.  Clients already connected keep the
 * size they negotiated; new connections see the new one. */
int ploop_ctl_resize(const char *dir, uint64_t new_bytes);
/* FLAGS: PLOOP_RESIZE_FORCE (1, libploop.h) passes --force on to the daemon. */
int ploop_ctl_resize_flags(const char *dir, uint64_t new_bytes, unsigned flags);

/* Online compaction (ploop_disk_compact): moves the top delta's tail
 * clusters into holes left by discard and truncates the file; the number
 * of bytes given back goes to *RECLAIMED if non-NULL. */
int ploop_ctl_compact(const char *dir, uint64_t *reclaimed);

/* Fills JSON with one JSON object describing the served disk:
 *   {"dir":..., "name":..., "pid":N, "size":N, "cluster_size":N,
 *    "depth":N, "top_guid":"{...}", "snapshots":[{"guid":...,"parent":...}],
 *    "exports":["name","name@uuid",...], "connections":N,
 *    "dirty_tracking":bool, "control_socket":"...", "fuse":"path"|null}
 * Returns 0, or -1 (ERANGE if LEN is too small). */
int ploop_ctl_info(const char *dir, char *json, size_t len);

/* Dirty tracking: clusters written since the mark. */
int ploop_ctl_dirty_start(const char *dir);
int ploop_ctl_dirty_stop(const char *dir);
/* Fetches the bitmap (bit i = cluster i written; LSB first in each byte),
 * malloc'd into *BITMAP (caller frees), its size into *BYTES and the
 * cluster size into *CLUSTER_BYTES.  CLEAR resets it atomically with the
 * copy, so successive calls give disjoint "changed since the last call". */
int ploop_ctl_dirty_get(const char *dir, bool clear, uint8_t **bitmap, size_t *bytes,
                        uint64_t *cluster_bytes);

/* Sends one raw command line (without '\n') and returns the text after
 * "OK" into REPLY (may be empty).  For tools and tests. */
int ploop_ctl_command(const char *dir, const char *line, char *reply, size_t len);

#ifdef __cplusplus
}
#endif
#endif
