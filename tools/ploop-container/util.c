/* Helpers shared by every module of ploop-container (see util.h). */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "error.h"

char *xasprintf(const char *fmt, ...)
{
  char *s;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0)
    abort();
  return s;
}

int write_file(const char *path, const char *s)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "open %s", path);
  size_t len = strlen(s);
  ssize_t n = write(fd, s, len);
  int saved = errno;
  close(fd);
  if (n < 0)
    return ct_fail(saved, "write '%s' to %s", s, path);
  if ((size_t)n != len)
    return ct_fail(0, "short write to %s", path);
  return 0;
}

int write_file_atomic(const char *path, const char *s, size_t len, bool durable)
{
  cleanup_free char *tmp = xasprintf("%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return ct_fail(errno, "create %s", tmp);
  if (write(fd, s, len) != (ssize_t)len || (durable && fsync(fd) < 0)) {
    int saved = errno;
    close(fd);
    unlink(tmp);
    return ct_fail(saved, "write %s", tmp);
  }
  close(fd);
  if (rename(tmp, path) < 0) {
    int saved = errno;
    unlink(tmp);
    return ct_fail(saved, "rename %s", tmp);
  }
  return 0;
}

ssize_t read_file(const char *path, char *buf, size_t len)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ct_fail(errno, "open %s", path);
  size_t got = 0;
  while (got + 1 < len) {
    ssize_t n = read(fd, buf + got, len - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      return ct_fail(saved, "read %s", path);
    }
    if (n == 0)
      break;
    got += (size_t)n;
  }
  close(fd);
  buf[got] = 0;
  return (ssize_t)got;
}

int read_u64_file(const char *path, uint64_t *out)
{
  char buf[64];
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  if (strncmp(buf, "max", 3) == 0) {
    *out = UINT64_MAX;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno || end == buf)
    return ct_fail(0, "%s: not a number: %s", path, buf);
  *out = v;
  return 0;
}

int read_keyed_u64(const char *path, const char *key, uint64_t *out)
{
  char buf[8192];
  if (read_file(path, buf, sizeof buf) < 0)
    return -1;
  size_t klen = strlen(key);
  for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
      *out = strtoull(line + klen + 1, NULL, 10);
      return 0;
    }
  }
  return ct_fail(0, "%s: no key %s", path, key);
}

int mkdir_p(const char *path, mode_t mode)
{
  cleanup_free char *p = strdup(path);
  if (!p)
    abort();
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = 0;
    if (mkdir(p, mode) < 0 && errno != EEXIST)
      return ct_fail(errno, "mkdir %s", p);
    *s = '/';
  }
  if (mkdir(p, mode) < 0 && errno != EEXIST)
    return ct_fail(errno, "mkdir %s", p);
  return 0;
}

int parse_size_arg(const char *what, const char *s, uint64_t *out)
{
  const char *p = s;
  while (isspace((unsigned char)*p))
    p++;
  if (*p == '-')
    return ct_fail(0, "%s: '%s' is negative", what, s);
  if (!isdigit((unsigned char)*p))
    return ct_fail(0, "%s: '%s' is not a size (expected e.g. 256M, 2G)", what, s);
  char *end;
  errno = 0;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno)
    return ct_fail(0, "%s: '%s' is too large", what, s);
  unsigned shift = 0;
  switch (*end) {
  case 0: break;
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default:
    return ct_fail(0, "%s: '%s' has an unknown suffix (use K, M, G or T)", what, s);
  }
  if (*end == 'i' || *end == 'B' || *end == 'b')  /* accept 2GiB, 2GB */
    end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
  if (*end)
    return ct_fail(0, "%s: '%s' has trailing garbage", what, s);
  if (shift && v > (UINT64_MAX >> shift))
    return ct_fail(0, "%s: '%s' is too large", what, s);
  *out = (uint64_t)v << shift;
  return 0;
}

void format_size(uint64_t b, char *buf, size_t len)
{
  static const char units[] = "BKMGTP";
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 "B", b);
  else
    snprintf(buf, len, "%.1f%c", v, units[u]);
}

uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t process_start_time(pid_t pid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = 0;
  /* comm may contain spaces and parens: fields resume after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p)
    return 0;
  p += 2;  /* field 3 (state) */
  if (*p == 'Z' || *p == 'X')
    return 0;  /* a zombie (nobody reaps an orphaned PID 1 here) is gone for us */
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}

void json_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
