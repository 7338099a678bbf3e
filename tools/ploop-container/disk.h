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
bool disk_is_mounted(const char *mnt);
/* Instant snapshot of the mounted disk; the filesystem on MNT is frozen
 * (FIFREEZE) around it so the snapshot is clean; MNT NULL: the disk is
 * not mounted. Writes the id to ID. */
int disk_snapshot(const char *dir, const char *mnt, char *id, size_t idlen);
/* Bytes the disk's files take on the host. */
int disk_usage(const char *dir, uint64_t *bytes);

#endif
