/* A lone delta file (no DiskDescriptor.xml) seen as a one-image disk, and the
 * descriptor built from a delta's header that `restore-descriptor` writes. */
#ifndef PLOOP_CLI_BARE_DELTA_H
#define PLOOP_CLI_BARE_DELTA_H

#include <stdbool.h>
#include <stdint.h>

/* A private temporary directory holding a link to the delta and a descriptor
 * naming it, so every disk-level call can read it. */
struct bare_delta {
  char dir[4096];
  bool open;
};
/* Prints its own error; returns 0 or an exit code. */
int bare_delta_open(const char *delta_path, struct bare_delta *b);
void bare_delta_close(struct bare_delta *b);

/* Writes DIR/DiskDescriptor.xml describing the single image DIR/FILE (a
 * ploop1 delta, or raw when RAW with RAW_CLUSTER_SECTORS as block size).
 * Prints its own error; returns 0 or an exit code. */
int descriptor_write_single(const char *dir, const char *file, bool raw,
                            uint32_t raw_cluster_sectors);

#endif
