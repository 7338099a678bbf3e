/* The container's disk, behind one small interface so the backend can be
 * switched: the product backend is a ploop image stack attached through
 * kmod-free-nbd (FUSE file + loop + mount); the fallback is a raw ext4 image
 * on a direct-I/O loop device. Both give an ext4 mounted on a directory. */
#ifndef CT_DISK_H
#define CT_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DISK_SNAPSHOT_ID_MAX 64

/* "ploop" or "raw": the backend of the disk in DIR. */
const char *disk_backend(const char *dir);
/* Makes the disk in the (existing, empty) directory DIR, BYTES big, with an
 * ext4 inside; RAW picks the loop-on-raw-image alternative. */
int disk_create(const char *dir, uint64_t bytes, bool raw);
/* Mounts the disk's top read-write on MNT (an existing directory). */
int disk_mount(const char *dir, const char *mnt);
/* Mounts snapshot ID read-only on MNT. */
int disk_mount_snapshot(const char *dir, const char *id, const char *mnt);
/* Unmounts MNT and releases everything the mount used (loop, daemon). */
int disk_umount(const char *dir, const char *mnt);
/* The disk of DIR attached but mounted nowhere (a shared disk's standby,
 * a migration committed but not started) is detached: 1; 0 when it is not
 * attached so (or mounted); -1 with the error set. */
int disk_detach_unmounted(const char *dir);
bool disk_is_mounted(const char *mnt);
/* Instant snapshot of the mounted disk; the filesystem on MNT is frozen
 * (FIFREEZE) around it so the snapshot is clean; MNT NULL: the disk is
 * not mounted. Writes the id to ID. */
int disk_snapshot(const char *dir, const char *mnt, char *id, size_t idlen);
/* One snapshot of the disk, for snapshot-list. */
struct disk_snapshot_info {
  char id[DISK_SNAPSHOT_ID_MAX];
  char parent[DISK_SNAPSHOT_ID_MAX]; /* "" for the base */
  char file[256];                    /* relative to the disk directory */
  uint64_t bytes;                    /* space the file takes on the host */
};
/* Every snapshot, oldest first for raw, descriptor order for ploop: *OUT is
 * malloc'd (NULL when none), *N its length. */
int disk_snapshot_list(const char *dir, struct disk_snapshot_info **out, size_t *n);
/* Removes snapshot ID of a disk that is not attached (ploop: a leaf goes,
 * a snapshot with one child is merged into it). */
int disk_snapshot_delete(const char *dir, const char *id);
/* Makes snapshot ID the disk's content again (the current top is dropped);
 * the disk must not be attached. */
int disk_rollback(const char *dir, const char *id);
/* New size of the disk and its ext4. MNT: where it is mounted (grow only,
 * live), or NULL: the disk is not attached (grow or shrink). */
int disk_resize(const char *dir, const char *mnt, uint64_t bytes);
/* Bytes the disk's files take on the host. */
int disk_usage(const char *dir, uint64_t *bytes);

/* ---- the rbd backend (disk-rbd.c): a ploop disk in a Ceph pool ---- */
/* True when the disk directory DIR names an rbd disk; its name to NAME. */
bool disk_rbd_name(const char *dir, char *name, size_t len);
/* Usage error unless RBD is rbd:POOL/NAME[?conf=PATH]. */
int disk_rbd_check_name(const char *rbd);
/* Records RBD as the disk of DIR, making it (BYTES, ext4) unless it
 * exists; *MADE says whether it was made here. */
int disk_rbd_create(const char *dir, const char *rbd, uint64_t bytes, bool *made);
/* Names RBD as the disk of DIR (without making it). */
int disk_rbd_set_name(const char *dir, const char *rbd);
/* Removes the rbd disk RBD whole (refused while anyone holds it). */
int disk_rbd_remove(const char *rbd);
/* disk_mount / disk_mount_snapshot of an rbd disk; a disk attached
 * without a mount (a migration's) only gets its filesystem mounted. */
int disk_rbd_mount(const char *dir, const char *snapshot, const char *mnt);
/* DIR's rbd name in BUF, or DIR itself for a local disk. */
const char *disk_rbd_where(const char *dir, char *buf, size_t len);

#endif
