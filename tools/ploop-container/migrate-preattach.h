/* The destination's early attach (migrate-preattach.c): the disk received
 * by round 0 is attached (ploop-nbd, FUSE, loop device; not mounted) while
 * the source still runs, the streams of the later rounds, the frozen one
 * included, are written through the device into the served top, and
 * PREPARE only mounts. The daemon's start and the loop device leave the
 * frozen window. */
#ifndef CT_MIGRATE_PREATTACH_H
#define CT_MIGRATE_PREATTACH_H

#include <stdbool.h>
#include <limits.h>
#include <stddef.h>

#include "libploop.h"

struct mig_preattach {
  bool attached; /* the disk's device is attached (and not mounted by us yet) */
  int dev;       /* the device, open for the rounds; -1 after the frozen one */
  char device[64];
  char holds[PLOOP_UUID_LEN + 1]; /* the state the device shows: the last round's */
  char diskdir[PATH_MAX];
  double attach_ms;
};


/* Whether this destination offers it (WELCOME's preattach=1): yes unless
 * $PLOOP_MIGRATE_PREATTACH is "0" (the old order, for comparison). */
bool mig_preattach_offered(void);
/* Attaches DISKDIR without a mount and opens its device. On failure nothing
 * stays attached. */
int mig_preattach_attach(struct mig_preattach *pa, const char *diskdir);
/* Applies the stream on FD (incremental on BASE) to the device, durably;
 * after the FINAL round (or a failure) the device is closed. */
int mig_preattach_receive(struct mig_preattach *pa, const char *base, int fd, struct ploop_stream_stats *st,
                          char *got, bool final);
/* Mounts the attached disk's filesystem on MNT (as disk_mount does). */
int mig_preattach_mount(struct mig_preattach *pa, const char *mnt);
/* Closes the device (the attachment itself goes with the disk: discard). */
void mig_preattach_close(struct mig_preattach *pa);

#endif
