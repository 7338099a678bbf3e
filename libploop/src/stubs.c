/* Temporary: entry points not implemented yet fail cleanly. Removed as each lands. */
#include "internal.h"
#define NOTYET(name) ploop_error(PLOOP_ERR_GENERIC, ENOSYS, "%s: not implemented yet", name)
int ploop_disk_snapshot(struct ploop_disk *disk, const char *guid, char *out) { return NOTYET("snapshot"); }
int ploop_snapshot_create(const char *d, const char *guid, char *out) { return NOTYET("snapshot"); }
int ploop_snapshot_delete(const char *d, const char *guid) { return NOTYET("snapshot-delete"); }
int ploop_snapshot_merge(const char *d, const char *guid, bool all, ploop_progress_fn p, void *o) { return NOTYET("snapshot-merge"); }
int ploop_disk_merge(struct ploop_disk *disk, const char *guid, bool all, ploop_progress_fn p, void *o) { return NOTYET("merge"); }
int ploop_snapshot_switch(const char *d, const char *guid) { return NOTYET("snapshot-switch"); }
int ploop_resize(const char *d, uint64_t b, unsigned f) { return NOTYET("resize"); }
int ploop_disk_resize(struct ploop_disk *disk, uint64_t b, unsigned f) { return NOTYET("resize"); }
int ploop_convert_version(const char *d, int v) { return NOTYET("convert"); }
int ploop_convert_format(const char *d, bool r) { return NOTYET("convert"); }
int ploop_disk_compact(struct ploop_disk *disk, uint64_t *b) { return NOTYET("compact"); }
