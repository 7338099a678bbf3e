/* Client of ploop-nbd's control socket (protocol in control.h). */
#include "control.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static __thread char ctl_msg[512];

const char *ploop_ctl_error(void) { return ctl_msg; }

static int fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctl_msg, sizeof ctl_msg, fmt, ap);
  va_end(ap);
  errno = err;
  return -1;
}

/* realpath of the disk directory (a DiskDescriptor.xml path means its dir). */
static int disk_realdir(const char *dir, char *out) {
  if (!realpath(dir, out)) return fail(errno, "%s: %s", dir, strerror(errno));
  struct stat st;
  if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
    char *slash = strrchr(out, '/');
    if (slash && slash != out) *slash = 0;
  }
  return 0;
}

int ploop_ctl_socket_path(const char *dir, char *out, size_t len) {
  char real[PATH_MAX];
  if (disk_realdir(dir, real) < 0) return -1;
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 */
  for (const unsigned char *p = (const unsigned char *)real; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ULL;
  }
  const char *run = getenv("PLOOP_RUN_DIR");
  if (!run || !*run) run = PLOOP_CTL_DEFAULT_RUN_DIR;
  int n = snprintf(out, len, "%s/%016" PRIx64 ".ctl", run, h);
  if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
    return fail(ENAMETOOLONG, "%s: control socket path too long", dir);
  return 0;
}

/* Reads one '\n'-terminated line (without it) byte by byte: replies are
 * short and the raw bitmap that may follow must stay in the socket. */
static int read_line(int fd, char *buf, size_t len) {
  size_t n = 0;
  for (;;) {
    char ch;
    ssize_t r = read(fd, &ch, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    if (ch == '\n') break;
    if (n + 1 >= len) return -1;
    buf[n++] = ch;
  }
  buf[n] = 0;
  return 0;
}

int ploop_ctl_connect(const char *dir) {
  char path[PATH_MAX], real[PATH_MAX];
  if (ploop_ctl_socket_path(dir, path, sizeof path) < 0) return -1;
  if (disk_realdir(dir, real) < 0) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(errno, "socket: %s", strerror(errno));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1); /* length checked by ploop_ctl_socket_path */
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    close(fd);
    if (e == ENOENT || e == ECONNREFUSED || e == ENOTDIR)
      return fail(ENOENT, "%s: not served by ploop-nbd", dir);
    return fail(e, "%s: connect %s: %s", dir, path, strerror(e));
  }
  char line[PLOOP_CTL_MAX_LINE + 1];
  int ver = 0, off = 0;
  if (read_line(fd, line, sizeof line) < 0 || sscanf(line, "ploop-nbd %d %n", &ver, &off) < 1 ||
      off == 0) {
    close(fd);
    return fail(EPROTO, "%s: %s: not a ploop-nbd control socket", dir, path);
  }
  if (strcmp(line + off, real) != 0) {
    close(fd);
    return fail(ENOENT, "%s: %s serves another disk (%s)", dir, path, line + off);
  }
  if (ver != PLOOP_CTL_PROTO_VERSION) {
    close(fd);
    return fail(EPROTO, "%s: control protocol %d, expected %d", dir, ver, PLOOP_CTL_PROTO_VERSION);
  }
  return fd;
}

/* Sends LINE, reads the status line; on OK copies the rest into REPLY and
 * returns the fd still open (for a payload) or closes it if KEEP is false. */
static int transact(const char *dir, const char *line, char *reply, size_t len, bool keep) {
  int fd = ploop_ctl_connect(dir);
  if (fd < 0) return -1;
  size_t ll = strlen(line);
  char buf[PLOOP_CTL_MAX_LINE + 2];
  if (ll > PLOOP_CTL_MAX_LINE || memchr(line, '\n', ll)) {
    close(fd);
    return fail(EINVAL, "control command too long or multi-line");
  }
  memcpy(buf, line, ll);
  buf[ll] = '\n';
  if (send(fd, buf, ll + 1, MSG_NOSIGNAL) != (ssize_t)(ll + 1)) {
    int e = errno;
    close(fd);
    return fail(e, "%s: send: %s", dir, strerror(e));
  }
  char resp[PLOOP_CTL_MAX_LINE * 16];
  if (read_line(fd, resp, sizeof resp) < 0) {
    close(fd);
    return fail(EPROTO, "%s: server closed the control connection", dir);
  }
  if (strncmp(resp, "ERR ", 4) == 0) {
    close(fd);
    int e = atoi(resp + 4);
    const char *m = strchr(resp + 4, ' ');
    return fail(e > 0 ? e : EIO, "%s", m ? m + 1 : resp);
  }
  if (strncmp(resp, "OK", 2) != 0 || (resp[2] != 0 && resp[2] != ' ')) {
    close(fd);
    return fail(EPROTO, "%s: bad control reply", dir);
  }
  const char *rest = resp[2] ? resp + 3 : "";
  if (reply) {
    if (strlen(rest) >= len) {
      close(fd);
      return fail(ERANGE, "%s: reply longer than %zu bytes", dir, len);
    }
    strcpy(reply, rest);
  }
  if (keep) return fd;
  close(fd);
  return 0;
}

int ploop_ctl_command(const char *dir, const char *line, char *reply, size_t len) {
  char dummy[1];
  return transact(dir, line, reply ? reply : dummy, reply ? len : sizeof dummy, false);
}

int ploop_ctl_snapshot(const char *dir, const char *guid, char *out_guid) {
  char line[128], reply[128];
  if (guid && strlen(guid) > 64) return fail(EINVAL, "bad snapshot GUID");
  snprintf(line, sizeof line, "SNAPSHOT%s%s", guid ? " " : "", guid ? guid : "");
  if (transact(dir, line, reply, sizeof reply, false) < 0) return -1;
  if (out_guid) {
    size_t n = strnlen(reply, 38);
    memcpy(out_guid, reply, n);
    out_guid[n] = 0;
  }
  return 0;
}

int ploop_ctl_merge(const char *dir, const char *guid, bool all) {
  char line[128];
  if (guid && strlen(guid) > 64) return fail(EINVAL, "bad snapshot GUID");
  snprintf(line, sizeof line, "MERGE %s%s", guid ? guid : "-", all ? " ALL" : "");
  return transact(dir, line, NULL, 0, false);
}

int ploop_ctl_resize(const char *dir, uint64_t new_bytes) {
  return ploop_ctl_resize_flags(dir, new_bytes, 0);
}

int ploop_ctl_resize_flags(const char *dir, uint64_t new_bytes, unsigned flags) {
  char line[64];
  snprintf(line, sizeof line, "RESIZE %" PRIu64 "%s", new_bytes, (flags & 1u) ? " FORCE" : "");
  return transact(dir, line, NULL, 0, false);
}

int ploop_ctl_compact(const char *dir, uint64_t *reclaimed) {
  char reply[64];
  if (transact(dir, "COMPACT", reply, sizeof reply, false) < 0) return -1;
  if (reclaimed) *reclaimed = strtoull(reply, NULL, 10);
  return 0;
}

int ploop_ctl_info(const char *dir, char *json, size_t len) {
  return transact(dir, "INFO", json, len, false);
}

int ploop_ctl_dirty_start(const char *dir) { return transact(dir, "DIRTY START", NULL, 0, false); }
int ploop_ctl_dirty_stop(const char *dir) { return transact(dir, "DIRTY STOP", NULL, 0, false); }

int ploop_ctl_dirty_get(const char *dir, bool clear, uint8_t **bitmap, size_t *bytes,
                        uint64_t *cluster_bytes) {
  char reply[128];
  int fd = transact(dir, clear ? "DIRTY GET CLEAR" : "DIRTY GET", reply, sizeof reply, true);
  if (fd < 0) return -1;
  uint64_t n, cl;
  if (sscanf(reply, "%" SCNu64 " %" SCNu64, &n, &cl) != 2 || n > (1ull << 32)) {
    close(fd);
    return fail(EPROTO, "%s: bad DIRTY GET reply", dir);
  }
  uint8_t *b = malloc(n ? n : 1);
  if (!b) {
    close(fd);
    return fail(ENOMEM, "out of memory");
  }
  for (uint64_t got = 0; got < n;) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(b);
      close(fd);
      return fail(EPROTO, "%s: dirty bitmap truncated", dir);
    }
    got += (uint64_t)r;
  }
  close(fd);
  *bitmap = b;
  *bytes = n;
  if (cluster_bytes) *cluster_bytes = cl;
  return 0;
}
