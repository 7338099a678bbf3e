/* Temporary: entry points not implemented yet fail cleanly. Removed as each lands. */
#include "internal.h"
#define NOTYET(name) ploop_error(PLOOP_ERR_GENERIC, ENOSYS, "%s: not implemented yet", name)
int ploop_convert_version(const char *d, int v) { return NOTYET("convert"); }
int ploop_convert_format(const char *d, bool r) { return NOTYET("convert"); }
