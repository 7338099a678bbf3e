/* Freezing, syncing and checkpointing a mounted filesystem: one place for
 * FIFREEZE/FITHAW, syncfs and EXT4_IOC_CHECKPOINT, used by online
 * snapshots and by migration. Each returns 0, or -1 with the error set
 * (ploop_get_error) naming the mount point. */
#ifndef PLOOP_FS_FREEZE_H
#define PLOOP_FS_FREEZE_H

/* An O_RDONLY directory fd on the mount point MNT, or -1 with the error set. */
int ploop_fs_open_mount(const char *mnt);
/* FIFREEZE: flushes the filesystem and blocks writers until the thaw.
 * FIFREEZE waits for RCU grace periods, which idle hosts stretch to tens of
 * milliseconds: /sys/kernel/rcu_expedited is set to 1 around the ioctl
 * only, and set back (PLOOP_CONTAINER_RCU_EXPEDITE=0 leaves it alone). */
int ploop_fs_freeze(const char *mnt);
int ploop_fs_freeze_fd(int fd, const char *mnt);
/* FITHAW; a filesystem that was not frozen (EINVAL) is no error. */
int ploop_fs_thaw(const char *mnt);
int ploop_fs_thaw_fd(int fd, const char *mnt);
/* syncfs(2): every dirty page and inode of the filesystem written. */
int ploop_fs_sync(const char *mnt);
int ploop_fs_sync_fd(int fd, const char *mnt);
/* EXT4_IOC_CHECKPOINT: the journal written back to its home locations and
 * emptied, so that a later freeze has no checkpoint to do. A filesystem
 * without it (not ext4, older kernel: ENOTTY, EOPNOTSUPP) is no error. */
int ploop_fs_checkpoint(const char *mnt);
int ploop_fs_checkpoint_fd(int fd, const char *mnt);

#endif
