/* How a container was last started (command, limits, hostname, network),
 * kept in ROOT/NAME/run-args by its monitor so that a migration can start
 * it the same way on another host. */
#ifndef CT_RUNARGS_H
#define CT_RUNARGS_H

#include "config.h"

#define CT_RUNARGS_MAX_ARGS 256

struct ct_runargs {
  struct ct_run_opts o;
  int argc;
  char **argv;  /* argc entries + NULL, malloc'd */
};

/* Called by the monitor once PID 1 runs; failures are not fatal there. */
int ct_runargs_save(const char *name, const struct ct_run_opts *o, char *const *argv);
/* Returns 1 read, 0 none saved, -1 on error. */
int ct_runargs_load(const char *name, struct ct_runargs *r);
void ct_runargs_free(struct ct_runargs *r);
/* As "key=value" lines (hex for the arguments) for the migration's HELLO,
 * and back; text from the peer is checked like user input. */
char *ct_runargs_format(const struct ct_runargs *r);
int ct_runargs_parse(const char *text, struct ct_runargs *r);

#endif
