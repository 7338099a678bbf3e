/* Local attach of a ploop disk with no kernel module: the ploop-nbd daemon
 * serves the disk as one FUSE file, a loop device (direct I/O) binds that
 * file, and the filesystem on the device is mounted.  Used by the `ploop`
 * CLI (mount, umount, list, init -t, resize, snapshot, compact) and by
 * ploop-container.
 *
 * Errors follow libploop: -1 is returned and ploop_get_error() holds one
 * line, ploop_get_status() its class (PLOOP_ERR_BUSY when already attached
 * or in use, PLOOP_ERR_NOTFOUND when nothing is attached, ...).  A failed
 * call undoes every step it did: no mount, loop device or daemon is left.
 *
 * State of each attachment lives in small files under PLOOP_ATTACH_RUN_DIR
 * (/run/ploop/attach), so umount/list work from any process.  All calls need
 * root (mount, loop, FUSE).
 *
 * The daemon is $PLOOP_NBD if set, else `ploop-nbd` from the directory of
 * the running binary, else from the PATH; its stderr goes to /run/ploop/attach/ID.log
 * (kept as ID.log.dead when it died).  Its NBD socket (for other clients) is
 * /run/ploop/attach/ID.nbd; the control socket of the live top is the disk's
 * usual one (ploop_ctl_socket_path), so online verbs reach it by disk dir. */
#ifndef PLOOP_ATTACH_H
#define PLOOP_ATTACH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "libploop.h"

#define PLOOP_ATTACH_RUN_DIR "/run/ploop/attach"
/* Name of the file inside the FUSE mount that carries the disk's bytes. */
#define PLOOP_ATTACH_FUSE_FILE "disk"

struct ploop_attach_opts {
  bool readonly;               /* read-only device and mount (forced for snapshots) */
  const char *snapshot_guid;   /* NULL: the live top; else that snapshot, read-only */
  const char *mount_point;     /* NULL: attach the device only (for mkfs, fsck) */
  const char *fstype;          /* NULL: probe the device with libblkid */
  const char *mount_data;      /* mount(8)-style options, e.g. "noatime,discard": generic
                                * ones become MS_* flags, the rest goes to the fs */
  unsigned long mount_flags;   /* extra MS_* flags (MS_NOSUID, MS_NODEV, ...) */
  bool standby;                /* a disk in shared storage another host holds: the daemon
                                * starts with it released (ploop-nbd --standby), the device
                                * fails I/O until the control command ACQUIRE; no mount */
};

struct ploop_attach_info {
  char disk_dir[PATH_MAX];       /* absolute directory of DiskDescriptor.xml */
  char snapshot_guid[PLOOP_UUID_LEN + 1]; /* "" for the top */
  char device[64];               /* /dev/loopN (or /dev/nbdN) */
  char kind[16];                 /* "fuse+loop" or "nbd": how the device is backed */
  char fuse_dir[PATH_MAX];       /* FUSE mount holding the disk file ("" for nbd) */
  char mount_point[PATH_MAX];    /* "" when only the device is attached */
  char fstype[32];               /* "" when not mounted and not probed */
  char control_socket[PATH_MAX]; /* the daemon's control socket ("" for a snapshot) */
  char nbd_socket[PATH_MAX];     /* the daemon also serves the disk over NBD here */
  pid_t daemon_pid;
  bool readonly;
  bool daemon_alive;             /* filled by list/find: false after a crash */
};

/* Attaches DISK_DIR (a directory or its DiskDescriptor.xml) and, when
 * O->mount_point is set, mounts its filesystem there.  O may be NULL
 * (read-write top, device only).  OUT (may be NULL) receives the result. */
int ploop_attach_mount(const char *disk_dir, const struct ploop_attach_opts *o,
                       struct ploop_attach_info *out);

/* Mounts the filesystem of a disk attached without a mount point: WHAT names
 * the attachment (as for umount), O->mount_point where to mount it, and
 * O->fstype, mount_data, mount_flags and readonly as for ploop_attach_mount
 * (the rest of O is ignored). ploop_attach_umount then undoes both steps.
 * Lets a caller attach early and mount only when the device holds what it
 * should (a migration applies its last round to the device in between). */
int ploop_attach_mount_fs(const char *what, const struct ploop_attach_opts *o);

/* Undoes an attach in reverse: unmounts the filesystem, detaches the loop
 * device, stops the daemon (SIGTERM, waits for it to close the image cleanly)
 * and removes its FUSE mount and state.  WHAT is the disk directory (its top
 * attachment, or its only one), a mount point or the device.  Works after
 * the daemon died too (the image is then left marked in use: `ploop check -F -d`). */
int ploop_attach_umount(const char *what);

/* Finds the attachment WHAT names (as for umount); -1 / PLOOP_ERR_NOTFOUND if none. */
int ploop_attach_find(const char *what, struct ploop_attach_info *out);

/* Every attachment, in no particular order: *OUT is a malloc'ed array the
 * caller frees (NULL when none), *N its length. */
int ploop_attach_list(struct ploop_attach_info **out, size_t *n);

/* Snapshot of an attached read-write disk: freezes its mounted filesystem
 * (FIFREEZE) so the snapshot is consistent with a clean journal, asks the
 * daemon to snapshot, thaws.  GUID may be NULL (generated); the new
 * snapshot's GUID is written to GUID_OUT (PLOOP_UUID_LEN + 1 bytes). */
int ploop_attach_snapshot(const char *what, const char *guid, char *guid_out);

/* Online resize of an attached read-write disk: grows the disk through the
 * daemon, refreshes the loop device's capacity and grows the mounted
 * filesystem (ext4: EXT4_IOC_RESIZE_FS, xfs: xfs_growfs).  Shrinking a
 * mounted filesystem is refused; shrinking an attached but unmounted ext4
 * runs e2fsck -f and resize2fs first, then shrinks the disk. */
int ploop_attach_resize(const char *what, uint64_t new_bytes);

/* Compaction of a mounted read-write disk: FITRIM hands the filesystem's
 * free space to the disk as discards, then the daemon moves tail clusters
 * into the holes so the image file shrinks.  *RECLAIMED (may be NULL)
 * receives the bytes the image file shrank by. */
int ploop_attach_compact(const char *what, uint64_t *trimmed, uint64_t *reclaimed);

/* Offline compaction of a disk nobody serves (OpenVZ users' `ploop
 * compact` / `balloon discard` of a stopped container): the ext2/3/4
 * filesystem on it is read through libext2fs straight from the image (no
 * device), the top delta's clusters that hold only free blocks (or lie
 * past the filesystem's end) are discarded, then the image is compacted as
 * online.  Other filesystems are refused before anything is opened for
 * writing (they are compacted mounted), as is a filesystem that is not
 * clean (journal to replay, errors).  ploop_cancel() stops it between two
 * clusters with a consistent image (PLOOP_ERR_CANCELLED). */
struct ploop_offline_compact_stats {
  char fstype[32];             /* "ext2/3/4", or what was found instead */
  uint64_t clusters_discarded; /* top clusters given back */
  uint64_t bytes_discarded;
  uint64_t bytes_reclaimed;    /* the image file shrank by */
};
int ploop_fs_compact_offline(const char *disk_dir, struct ploop_offline_compact_stats *st);

/* ---- filesystem helpers (on a device path) ---------------------------- */

/* mkfs.ext4 / mkfs.xfs on DEVICE; FSTYPE "ext4", "ext3" or "xfs". */
int ploop_fs_make(const char *device, const char *fstype);
/* Options of mkfs (OpenVZ's init -B and -n). */
struct ploop_fs_opts {
  unsigned block_size; /* filesystem block size in bytes; 0 = mkfs's default */
  bool nolazy;         /* ext3/4: initialise inode tables and journal now */
  bool prezeroed;      /* ext3/4: DEVICE reads as zeros (a new disk): nothing to zero */
};
int ploop_fs_make_opts(const char *device, const char *fstype, const struct ploop_fs_opts *o);
/* Probes DEVICE's filesystem type with libblkid into TYPE; -1 with
 * PLOOP_ERR_NOTFOUND when there is none. */
int ploop_fs_probe(const char *device, char *type, size_t len);
/* Checks the unmounted filesystem on DEVICE (ext*: e2fsck -p, fixing what
 * is safe; xfs: xfs_repair -n). OpenVZ's mount -F. */
int ploop_fs_check(const char *device, const char *fstype);
/* Grows the filesystem mounted on MOUNT_POINT to fill its device. */
int ploop_fs_grow_online(const char *mount_point, const char *device, const char *fstype);
/* Offline resize of an unmounted filesystem on DEVICE to NEW_BYTES (ext2/3/4:
 * e2fsck -f -p, then resize2fs; xfs can only grow, and only when mounted). */
int ploop_fs_resize_offline(const char *device, const char *fstype, uint64_t new_bytes);

/* Convenience for `ploop init -t FSTYPE`: attaches DISK_DIR without a
 * mount, makes the filesystem, detaches. DISK_DIR is a new disk: it reads
 * as zeros, so mkfs is told so (ploop_fs_opts.prezeroed). */
int ploop_attach_format(const char *disk_dir, const char *fstype);
int ploop_attach_format_opts(const char *disk_dir, const char *fstype, const struct ploop_fs_opts *o);

#endif
