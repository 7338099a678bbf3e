/* Migration of a container whose disk is in shared storage (an rbd: disk
 * both hosts see): no disk bytes move, the disk's lock does. The source
 * freezes, flushes and releases the disk (its mount stays, FIFREEZE'd);
 * the destination, attached in standby since HELLO, acquires it, and
 * mounts it only after COMMIT (before, the source may still roll back and
 * take the disk again: a mount would write its journal and superblock),
 * then restores or restarts. formats/migration-protocol.md, "Shared disk". */
#ifndef CT_MIGRATE_SHARED_H
#define CT_MIGRATE_SHARED_H

#include <stdbool.h>
#include <stddef.h>

/* The rbd disk of the container whose disk directory is DISKDIR: its name
 * here (LOCAL, with this host's ?conf=) and on the wire (rbd:POOL/NAME).
 * Returns true for an rbd disk. */
bool mig_shared_disk(const char *diskdir, char *local, size_t llen, char *wire, size_t wlen);
/* HELLO lines for the container NAME's shared disk (malloc'd; "" when its
 * disk is local). */
char *mig_shared_hello(const char *name, const char *diskdir);

/* Source: the frozen filesystem on MNT is flushed and frozen (FIFREEZE),
 * then the daemon releases the disk (flush, in-use mark cleared, locks
 * dropped). Its mount and loop stay for a rollback. */
int mig_shared_release(const char *diskdir, const char *mnt, double *fsfreeze_ms, double *release_ms);
/* Source, rollback (also `migrate --resolve` when aborted): the daemon
 * takes the disk back (after up to 3 s for a destination that is letting
 * go, then fencing it with lock-break: before COMMIT it runs nothing), and
 * the filesystem is thawed. Nothing to do for a disk never released. */
int mig_shared_resume(const char *name);
/* Source, committed: the destination owns the disk now; thaw the
 * filesystem (its writes fail: the daemon no longer holds the disk) so
 * the copy here can be ended and unmounted, and hand over the right to
 * remove the disk (destroy here must not remove it). */
void mig_shared_finish(const char *name);

/* Destination, at HELLO: SHARED is the hello's shared_disk (hex): the disk
 * is named DISKDIR's (with this host's CEPH_CONF) and attached in
 * standby. 0, or -1 with the error set. */
int mig_shared_dest_standby(const char *diskdir, const char *hello);
/* Destination, HANDOVER: the source has released it; acquire the disk
 * (*MS: how long; *AHEAD: the daemon had its top open ahead since the
 * standby attach, and only locked and read it). */
int mig_shared_dest_acquire(const char *diskdir, double *ms, bool *ahead);
/* Destination, PREPARE: the config says which disk and who may remove it. */
int mig_shared_dest_config(const char *name, const char *diskdir, const char *hello_created);
/* Destination, failure: the standby attachment goes (the disk stays). */
void mig_shared_dest_discard(const char *diskdir);

#endif
