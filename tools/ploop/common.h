/* Shared helpers of the ploop CLI: the verb table entry, exit codes, one-line
 * error printing, option/size/UUID parsing, the progress bar and JSON output. */
#ifndef PLOOP_CLI_COMMON_H
#define PLOOP_CLI_COMMON_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "libploop.h"

/* Exit codes: OpenVZ's SYSEXIT_* numbers (its include/libploop.h), which
 * vzctl-era scripts read, one per class of failure: the library's status
 * classes, usage errors, and check's verdicts.  The same table is printed by
 * `ploop --help` and kept in README.md. */
enum cli_exit {
  EXIT_OK = 0,
  EXIT_NOTFOUND = 4,  /* SYSEXIT_OPEN: cannot open: no such file, image or attachment */
  EXIT_READ = 6,      /* SYSEXIT_READ: the OS refused a read */
  EXIT_IO = 7,        /* SYSEXIT_WRITE: the OS refused a write or sync (ENOSPC...) */
  EXIT_CORRUPT = 11,  /* SYSEXIT_PLOOPFMT: image or descriptor is broken */
  EXIT_GENERIC = 12,  /* SYSEXIT_SYS: any other failure (out of memory...) */
  EXIT_BUSY = 17,     /* SYSEXIT_EBUSY: locked by another process, served, attached */
  EXIT_INUSE = 37,    /* SYSEXIT_PLOOPINUSE: check: the image is marked in use */
  EXIT_USAGE = 38,    /* SYSEXIT_PARAM: bad command line or argument value */
  EXIT_NOSNAP = 43,   /* SYSEXIT_NOSNAP: no such snapshot */
  EXIT_SIGINT = 130,  /* interrupted by SIGINT (128 + 2) */
  EXIT_SIGTERM = 143, /* interrupted by SIGTERM (128 + 15) */
};

struct cli_verb {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0] is the verb */
  const char *synopsis;              /* "init -s SIZE [...] DELTA" */
  const char *summary;               /* one line for `ploop help` */
  const char *details;               /* options, printed by `ploop VERB --help` */
  /* SIGINT/SIGTERM cancel the library's operation (ploop_cancel) instead of
   * killing the process: the verb cleans up and exits 130/143. */
  bool interruptible;
};

/* Installs the SIGINT/SIGTERM handlers of an interruptible verb. */
void cli_catch_signals(void);
/* The signal that interrupted the verb, or 0. */
int cli_caught_signal(void);

/* The verb being run, for messages ("ploop VERB: ..."). */
extern const char *cli_verb_name;

/* Prints "ploop VERB: MESSAGE" on one line to stderr; returns CODE. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error (its messages name the file already) and
 * returns the exit code of its status class. */
int cli_lib_error(void);
/* A usage error: prints the message plus a pointer to --help, returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Maps ploop_get_status() to an exit code. */
int cli_exit_from_status(int status);

/* getopt_long for verbs: adds --help, reports unknown/missing options as one
 * usage line.  Returns the option, -1 at the end, or '?' after printing an
 * error (the caller returns EXIT_USAGE), or 'h' when help was printed (the
 * caller returns EXIT_OK). */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);
void cli_print_verb_help(const struct cli_verb *v, FILE *f);
const struct cli_verb *cli_find_verb(const char *name);

/* Requires exactly N positional arguments left after options. */
bool cli_positional(int argc, char **argv, int n, const char *what);

/* Value parsers: print a usage error and return false on bad input. */
bool cli_parse_size(const char *opt, const char *s, uint64_t *out);
bool cli_parse_uint(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* Normalises to braced lowercase into OUT (PLOOP_UUID_LEN + 1 bytes). */
bool cli_parse_uuid(const char *opt, const char *s, char *out);

/* What a path argument names. */
enum cli_target { CLI_TARGET_DISK, CLI_TARGET_DELTA };
/* A directory or a DiskDescriptor.xml is a disk; a file starting with a ploop
 * signature (or anything else that is not XML) is a delta.  Fails (printed)
 * when PATH does not exist. */
int cli_classify(const char *path, enum cli_target *out);

/* Progress bar on stderr, only when stderr is a terminal. */
struct cli_progress {
  const char *label;
  bool enabled;
  bool drawn;
  int last_permille;
  uint64_t start_ns, last_ns;
};
void cli_progress_init(struct cli_progress *p, const char *label);
void cli_progress_cb(void *opaque, uint64_t done, uint64_t total); /* a ploop_progress_fn */
void cli_progress_end(struct cli_progress *p);

uint64_t cli_now_ns(void);

/* Human-readable byte count ("1.5 GiB") into BUF. */
const char *cli_human_bytes(uint64_t bytes, char *buf, size_t len);
/* Writes S as a JSON string literal (with quotes). */
void cli_json_string(FILE *f, const char *s);

/* -b CLUSTER_SECTORS and -v VERSION, shared by init and import: fills P.
 * Returns 0, or the exit code of a usage error it has printed. */
int cli_create_option(int opt, const char *arg, struct ploop_delta_create_params *p);

#endif
