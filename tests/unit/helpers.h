/* Shared helpers for the libploop unit tests: a scratch directory per test
 * (under /var/tmp, since O_DIRECT needs a real file system), raw file access to
 * check on-disk bytes independently of the library, and data patterns. */
#ifndef PLOOP_TEST_HELPERS_H
#define PLOOP_TEST_HELPERS_H

#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libploop.h"

/* Each criterion test runs in its own process, so one static per process is
 * one scratch directory per test. */
static char test_dir[PATH_MAX];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static inline void tmpdir_setup(void)
{
  snprintf(test_dir, sizeof test_dir, "/var/tmp/ploop-unit.XXXXXX");
  if (!mkdtemp(test_dir))
    cr_assert_fail("mkdtemp: %s", strerror(errno));
}

static inline void tmpdir_teardown(void)
{
  if (test_dir[0] && !getenv("PLOOP_TEST_KEEP"))
    nftw(test_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Path under the scratch dir; 8 rotating buffers so a few can be live at once. */
static inline const char *tpath(const char *fmt, ...)
{
  static char bufs[8][PATH_MAX];
  static int n;
  char *b = bufs[n++ % 8];
  int off = snprintf(b, PATH_MAX, "%s/", test_dir);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b + off, PATH_MAX - off, fmt, ap);
  va_end(ap);
  return b;
}

/* Asserts a libploop call returned >= 0 (or non-NULL) and shows its error otherwise. */
#define OK(expr)                                                                                             \
  do {                                                                                                       \
    long long ok_rc_ = (long long)(expr);                                                                    \
    cr_assert(ok_rc_ >= 0, "%s failed: %s (errno %d)", #expr, ploop_get_error(), ploop_get_errno());         \
  } while (0)
#define NOTNULL(expr)                                                                                        \
  ({                                                                                                         \
    __auto_type nn_p_ = (expr);                                                                              \
    cr_assert(nn_p_ != NULL, "%s failed: %s (errno %d)", #expr, ploop_get_error(), ploop_get_errno());       \
    nn_p_;                                                                                                   \
  })

/* The last error must mention NAME (usually the basename of the bad file). */
#define ERROR_NAMES(name)                                                                                    \
  cr_assert(ploop_get_error() && strstr(ploop_get_error(), (name)),                                          \
            "error message should name '%s', got: %s", (name),                                               \
            ploop_get_error() ? ploop_get_error() : "(null)")

static inline const char *base_name(const char *p)
{
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* ---- raw file access, independent of the library ---- */

static inline void raw_pread(const char *path, void *buf, size_t len, off_t off)
{
  int fd = open(path, O_RDONLY);
  cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
  ssize_t r = pread(fd, buf, len, off);
  cr_assert(r == (ssize_t)len, "pread %s @%lld: %zd (%s)", path, (long long)off, r, strerror(errno));
  close(fd);
}

static inline void raw_pwrite(const char *path, const void *buf, size_t len, off_t off)
{
  int fd = open(path, O_WRONLY);
  cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
  ssize_t w = pwrite(fd, buf, len, off);
  cr_assert(w == (ssize_t)len, "pwrite %s: %s", path, strerror(errno));
  close(fd);
}

static inline uint32_t raw_le32(const char *path, off_t off)
{
  uint32_t v;
  raw_pread(path, &v, 4, off);
  return le32toh(v);
}

static inline uint64_t raw_le64(const char *path, off_t off)
{
  uint64_t v;
  raw_pread(path, &v, 8, off);
  return le64toh(v);
}

static inline void raw_put_le32(const char *path, off_t off, uint32_t v)
{
  uint32_t le = htole32(v);
  raw_pwrite(path, &le, 4, off);
}

static inline void raw_put_le64(const char *path, off_t off, uint64_t v)
{
  uint64_t le = htole64(v);
  raw_pwrite(path, &le, 8, off);
}

static inline off_t file_size(const char *path)
{
  struct stat st;
  cr_assert(stat(path, &st) == 0, "stat %s: %s", path, strerror(errno));
  return st.st_size;
}

static inline bool file_exists(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0;
}

static inline void write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  cr_assert(f, "fopen %s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

/* ---- data patterns ---- */

/* Deterministic bytes that differ per (seed, absolute offset), so a block
 * that lands at the wrong offset or comes from the wrong write is caught. */
static inline uint8_t pattern_byte(uint32_t seed, uint64_t off)
{
  uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 17 | seed);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (uint8_t)x;
}

static inline void fill_pattern(void *buf, size_t len, uint32_t seed, uint64_t off)
{
  uint8_t *b = buf;
  for (size_t i = 0; i < len; i++)
    b[i] = pattern_byte(seed, off + i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long check_pattern(const void *buf, size_t len, uint32_t seed, uint64_t off)
{
  const uint8_t *b = buf;
  for (size_t i = 0; i < len; i++)
    if (b[i] != pattern_byte(seed, off + i))
      return (long)i;
  return -1;
}

static inline long first_nonzero(const void *buf, size_t len)
{
  const uint8_t *b = buf;
  for (size_t i = 0; i < len; i++)
    if (b[i])
      return (long)i;
  return -1;
}

/* Depth of the byte at OFF according to ploop_disk_block_status. */
static inline int depth_at(struct ploop_disk *disk, uint64_t off)
{
  struct ploop_extent ext[4];
  int n = ploop_disk_block_status(disk, off, 1, ext, 4);
  cr_assert(n >= 1, "block_status @%llu: %d: %s", (unsigned long long)off, n, ploop_get_error());
  cr_assert(ext[0].offset <= off && off < ext[0].offset + ext[0].length,
            "first extent [%llu,+%llu) does not cover %llu", (unsigned long long)ext[0].offset,
            (unsigned long long)ext[0].length, (unsigned long long)off);
  return (int)ext[0].depth;
}

/* Make a disk (root.hds + DiskDescriptor.xml) in the scratch dir. */
static inline void make_disk(uint64_t size, uint32_t cluster_sectors)
{
  struct ploop_delta_create_params p = {.size_bytes = size, .cluster_sectors = cluster_sectors, .version = 2};
  OK(ploop_disk_create(tpath("root.hds"), &p));
}

static inline bool have_cmd(const char *cmd)
{
  char buf[256];
  snprintf(buf, sizeof buf, "command -v %s >/dev/null 2>&1", cmd);
  return system(buf) == 0;
}

#endif
