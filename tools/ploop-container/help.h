/* Per-verb --help texts (main.c prints the overview). */
#ifndef CT_HELP_H
#define CT_HELP_H

#include <stdbool.h>

/* --help or -h among ARGV's options (before "--"). */
bool ct_wants_help(int argc, char **argv);
/* Prints VERB's help; 0, or 2 for an unknown verb. */
int ct_verb_help(const char *verb);

#endif
