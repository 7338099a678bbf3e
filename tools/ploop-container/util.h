/* Small helpers shared by every module of ploop-container: cleanup
 * attributes (crun-style), whole-file read/write, sizes. */
#ifndef CT_UTIL_H
#define CT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void ct_freep(void *p) { free(*(void **)p); }
static inline void ct_closep(int *fd)
{
  if (*fd >= 0)
    close(*fd);
}
#define cleanup_free __attribute__((cleanup(ct_freep)))
#define cleanup_close __attribute__((cleanup(ct_closep)))
/* Hands a cleanup-managed value to someone else. */
#define steal_fd(fd) ({ int _fd = (fd); (fd) = -1; _fd; })
#define steal_ptr(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })

/* malloc'd printf; aborts on out-of-memory (nothing sensible to do). */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes S to an existing file (open O_WRONLY, no create): for /proc, /sys. */
int write_file(const char *path, const char *s);
/* Creates/replaces PATH atomically (tmp + rename); DURABLE adds the fsync
 * (config), runtime state skips it (a crash ends the container anyway, and an
 * fsync costs ~10 ms of start latency). */
int write_file_atomic(const char *path, const char *s, size_t len, bool durable);
/* Reads up to LEN-1 bytes, NUL-terminates; returns bytes or -1. */
ssize_t read_file(const char *path, char *buf, size_t len);
/* Reads a decimal number ("max" reads as UINT64_MAX). */
int read_u64_file(const char *path, uint64_t *out);
/* The value of "KEY value" line in a flat-keyed file (memory.stat, memory.events...). */
int read_keyed_u64(const char *path, const char *key, uint64_t *out);
int mkdir_p(const char *path, mode_t mode);

/* "256M", "2G", "4096" (bytes); binary suffixes K M G T; rejects garbage,
 * negative numbers and overflow with a message naming WHAT. */
int parse_size_arg(const char *what, const char *s, uint64_t *out);
/* Human form for tables: "12.3M". */
void format_size(uint64_t bytes, char *buf, size_t len);

/* S as a JSON string, quotes included (for the verbs' --json output). */
void json_string(FILE *f, const char *s);

/* Monotonic time in nanoseconds. */
uint64_t now_ns(void);
/* Start time of PID from /proc/PID/stat (field 22), 0 if gone or a zombie;
 * with the pid it identifies a process across pid reuse. */
uint64_t process_start_time(pid_t pid);

#endif
