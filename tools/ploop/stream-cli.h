/* The summary both stream verbs print. */
#ifndef PLOOP_CLI_STREAM_H
#define PLOOP_CLI_STREAM_H

#include <stdbool.h>
#include <stdio.h>

#include "libploop.h"

/* One line on stderr, or with JSON one object on JSON_OUT. */
void stream_cli_summary(const char *verb, const struct ploop_stream_stats *s, const char *guid, bool json,
                        FILE *json_out);

#endif
