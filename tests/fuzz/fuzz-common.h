/* Shared by the libFuzzer harnesses: a private temporary directory per
 * run, removed afterwards, and a check that a run left no fd open. */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Makes a fresh directory under $TMPDIR (or /tmp) into OUT (PATH_MAX);
 * aborts when it cannot (a harness without a directory tests nothing). */
void fuzz_tmpdir(char *out);
/* Removes DIR and everything below it (never following symlinks). */
void fuzz_rmtree(const char *dir);
/* Writes LEN bytes of DATA as the file PATH (created, mode 0600). */
void fuzz_write_file(const char *path, const uint8_t *data, size_t len);
/* Number of open fds of the process; a run that ends with more than it
 * began with leaked one, and fuzz_check_fds aborts to make it a finding. */
int fuzz_count_fds(void);
void fuzz_check_fds(int before, const char *what);

#endif
