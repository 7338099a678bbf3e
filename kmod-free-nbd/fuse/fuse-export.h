/* The FUSE side of the serving daemon: exposes an open disk as one regular
 * file, so a loop device (with direct I/O) can attach it on a stock kernel.
 * Contract between the NBD daemon (server/) and the FUSE export (fuse/). */
#ifndef PLOOP_FUSE_EXPORT_H
#define PLOOP_FUSE_EXPORT_H

#include <stdbool.h>
#include "libploop.h"

struct ploop_fuse_export;

/* Mounts a FUSE filesystem on MOUNTPOINT (an existing empty directory)
 * holding a single file named FILE_NAME whose contents are the disk, and
 * starts serving it on its own threads. Returns NULL on error (message in
 * ploop_get_error()). */
struct ploop_fuse_export *ploop_fuse_export_start(struct ploop_disk *disk, const char *mountpoint,
                                                  const char *file_name, bool readonly);
/* Tells the export that the disk's size changed (online resize). */
void ploop_fuse_export_resized(struct ploop_fuse_export *fx);
/* Appends to BUF (LEN bytes, NUL-terminated) the JSON members
 * "fuse_transport" and "fuse_requests" (what the transport has served and
 * how), each preceded by a comma. */
void ploop_fuse_export_info_json(struct ploop_fuse_export *fx, char *buf, size_t len);
/* Unmounts and stops; waits for in-flight requests. */
void ploop_fuse_export_stop(struct ploop_fuse_export *fx);

#endif
