/* Inside the new mount namespace: make the rootfs the only thing the
 * container sees (proc, read-only sys, a minimal /dev, masked /proc paths),
 * then pivot_root into it. Runs in the container's first process. */
#ifndef CT_ROOTFS_H
#define CT_ROOTFS_H

#include <stdbool.h>

/* USERNS: devices are bind-mounted (mknod is not allowed there).
 * OWN_NETNS: sysfs can be mounted fresh (else the host's is bound). */
int rootfs_enter(const char *rootfs, bool userns, bool own_netns);

#endif
