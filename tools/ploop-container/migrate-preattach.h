/* The destination's early attach (migrate-preattach.c): the disk received
 * by the live rounds is attached (ploop-nbd, FUSE, loop device; not
 * mounted) before the source freezes, the frozen round's stream is written
 * through the device into the served top, and PREPARE only mounts. The
 * daemon's start and the loop device leave the frozen window. */
#ifndef CT_MIGRATE_PREATTACH_H
#define CT_MIGRATE_PREATTACH_H

#include <stdbool.h>
#include <stddef.h>

#include "libploop.h"

struct mig_preattach {
  bool attached; /* the disk's device is attached (and not mounted by us yet) */
  int dev;       /* the device, open for the frozen round; -1 once it is in */
  char device[64];
  double attach_ms;
};

#define MIG_PREATTACH_INIT                                                                                   \
  {                                                                                                          \
    .dev = -1                                                                                                \
  }

/* Whether this destination offers it (WELCOME's preattach=1): yes unless
 * $PLOOP_MIGRATE_PREATTACH is "0" (the old order, for comparison). */
bool mig_preattach_offered(void);
/* Attaches DISKDIR without a mount and opens its device. On failure nothing
 * stays attached. */
int mig_preattach_attach(struct mig_preattach *pa, const char *diskdir);
/* Applies the stream on FD (incremental on BASE) to the device, durably. */
int mig_preattach_receive(struct mig_preattach *pa, const char *base, int fd, struct ploop_stream_stats *st,
                          char *got);
/* Mounts the attached disk's filesystem on MNT (as disk_mount does). */
int mig_preattach_mount(struct mig_preattach *pa, const char *mnt);
/* Closes the device (the attachment itself goes with the disk: discard). */
void mig_preattach_close(struct mig_preattach *pa);

#endif
