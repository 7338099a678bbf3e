/* `ploop import -`: a raw image from a pipe. */
#ifndef PLOOP_CLI_IMPORT_STREAM_H
#define PLOOP_CLI_IMPORT_STREAM_H

#include "common.h"

/* Writes the raw bytes read from FD until its end into the disk DIR.
 * Prints its own error; returns 0 or an exit code. */
int import_stream(int fd, const char *dir, struct cli_progress *prog, struct ploop_copy_stats *st);

#endif
