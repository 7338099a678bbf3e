/* Simulated power failure for the crash tests (powerfail.c): a journal of
 * every write and sync the library makes to the disk's files, and a replay
 * that rolls those files back to a state a power cut could have left. */
#ifndef PLOOP_POWERFAIL_H
#define PLOOP_POWERFAIL_H

#include <stdint.h>

/* Rewrites the files named in JOURNAL as after a power cut at the end of it:
 * everything synced stays; of what was written after a file's last sync,
 * each 512-byte sector survives or not (all, none or a random mix by SEED).
 * Prints what it did; returns 0 or exits on error. */
int powerfail_replay(const char *journal, uint64_t seed);

#endif
