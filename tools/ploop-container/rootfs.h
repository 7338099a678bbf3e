/* Inside the new mount namespace: make the rootfs the only thing the
 * container sees (proc, read-only sys, a minimal /dev, masked /proc paths),
 * then pivot_root into it. Runs in the container's first process. */
#ifndef CT_ROOTFS_H
#define CT_ROOTFS_H

#include <stdbool.h>

/* Call with "/" already private. ROOTFD >= 0: the root of an id-mapped
 * mount already on ROOTFS (userns), entered by fd; else ROOTFS is bound on
 * itself. USERNS: devices are bind-mounted (mknod is not allowed there).
 * OWN_NETNS: sysfs can be mounted fresh (else the host's is bound). */
int rootfs_enter(const char *rootfs, int rootfd, bool userns, bool own_netns);

#endif
