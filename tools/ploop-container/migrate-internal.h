/* Shared between the migration's source, destination and resolve files. */
#ifndef CT_MIGRATE_INTERNAL_H
#define CT_MIGRATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "migrate.h"
#include "runargs.h"

/* Forks the container's monitor (as `start`) with RA; LOCK is the held
 * container lock, passed on to the monitor. */
int mig_start(const char *name, int lock, const struct ct_runargs *ra, bool adopt_mount);
/* ROOT/NAME/config's network and limits for HELLO (hex, malloc'd); the
 * destination's check of it (the known keys as "k=v" strings), saving and
 * freeing (migrate-config.c). */
char *mig_config_extra(const char *name);
int mig_config_parse(const char *hex, char ***kv, size_t *n);
int mig_config_apply(const char *name, char **kv, size_t n);
void mig_config_free(char **kv, size_t n);
/* Test hook: runs $PLOOP_MIGRATE_HOOK when PHASE is $PLOOP_MIGRATE_HOOK_PHASE,
 * so tests cause real faults (link down, kill, full disk) at an exact phase. */
void mig_test_hook(const char *phase);
/* Merges each of M's snapshots (the migration's temporary ones) into its
 * child, online through the disk's daemon when it is served: the user's
 * own snapshots stay. */
int mig_merge_back(const char *name, const struct mig_record *m);
/* Recursive removal that never crosses a mount point. */
int mig_remove_tree(const char *dir);
/* Bytes of messages and streams written by this process. */
extern uint64_t mig_bytes_out;

#endif
