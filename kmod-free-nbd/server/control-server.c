/* Server side of the control socket (protocol in client/control.h): online
 * snapshot, merge, resize, info and dirty tracking on a served disk.  One
 * thread per disk answers one control client at a time; the operations
 * themselves serialise against in-flight I/O inside libploop. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "../fuse/fuse-export.h"
#include "server.h"

#pragma weak ploop_fuse_export_resized
#pragma weak ploop_fuse_export_info_json

static int send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int reply_ok(int fd, const char *text) {
  size_t n = strlen(text);
  char *buf = malloc(n + 5);
  if (!buf) return -1;
  memcpy(buf, "OK", 2);
  size_t k = 2;
  if (n) {
    buf[k++] = ' ';
    memcpy(buf + k, text, n);
    k += n;
  }
  buf[k++] = '\n';
  int r = send_all(fd, buf, k);
  free(buf);
  return r;
}

static int reply_err(int fd, int err, const char *msg) {
  char buf[PLOOP_CTL_MAX_LINE];
  int n = snprintf(buf, sizeof buf, "ERR %d %s", err ? err : EIO, msg);
  if (n < 0 || (size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
  for (int i = 0; i < n; i++)
    if (buf[i] == '\n') buf[i] = ' ';
  buf[n++] = '\n';
  return send_all(fd, buf, (size_t)n);
}

/* Appends S to the growing buffer as a JSON string. */
struct sbuf {
  char *p;
  size_t len, cap;
};
static void sb_add(struct sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 1024) + n;
    char *np = realloc(b->p, cap);
    if (!np) return;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}
static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
static void sb_json_str(struct sbuf *b, const char *s) {
  sb_add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      char e[2] = {'\\', (char)ch};
      sb_add(b, e, 2);
    } else if (ch < 0x20) {
      sb_printf(b, "\\u%04x", ch);
    } else {
      sb_add(b, s, 1);
    }
  }
  sb_add(b, "\"", 1);
}

static int cmd_info(int fd, struct disk_export *de) {
  struct ploop_descriptor *d = ploop_disk_descriptor(de->disk);
  if (!d) return reply_err(fd, ploop_get_errno(), ploop_get_error());
  struct sbuf b = {0};
  sb_add(&b, "{\"dir\":", 7);
  sb_json_str(&b, de->dir);
  sb_add(&b, ",\"name\":", 8);
  sb_json_str(&b, de->name);
  sb_printf(&b,
            ",\"pid\":%d,\"size\":%" PRIu64 ",\"cluster_size\":%" PRIu64
            ",\"depth\":%u,\"top_guid\":\"%s\",\"snapshots\":[",
            (int)getpid(), ploop_disk_size(de->disk), ploop_disk_cluster_size(de->disk),
            ploop_disk_depth(de->disk), d->top_guid);
  bool first = true;
  for (size_t i = 0; i < d->n_snapshots; i++) {
    if (strcmp(d->snapshots[i].guid, d->top_guid) == 0) continue;
    sb_printf(&b, "%s{\"guid\":\"%s\",\"parent\":\"%s\"}", first ? "" : ",",
              d->snapshots[i].guid, d->snapshots[i].parent);
    first = false;
  }
  sb_add(&b, "],\"exports\":[", 13);
  sb_json_str(&b, de->name);
  for (size_t i = 0; i < d->n_snapshots; i++) {
    if (strcmp(d->snapshots[i].guid, d->top_guid) == 0) continue;
    char name[512];
    snprintf(name, sizeof name, "%s@%.36s", de->name, d->snapshots[i].guid + 1);
    sb_add(&b, ",", 1);
    sb_json_str(&b, name);
  }
  sb_printf(&b, "],\"connections\":%u,\"dirty_tracking\":%s,\"control_socket\":",
            atomic_load(&de->connections), de->dirty_tracking ? "true" : "false");
  sb_json_str(&b, de->ctl_path);
  sb_add(&b, ",\"fuse\":", 8);
  if (de->fuse && g_cfg.fuse_mountpoint) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", g_cfg.fuse_mountpoint, g_cfg.fuse_name);
    sb_json_str(&b, p);
    if (ploop_fuse_export_info_json) {
      char more[256];
      ploop_fuse_export_info_json(de->fuse, more, sizeof more);
      sb_add(&b, more, strlen(more));
    }
  } else {
    sb_add(&b, "null", 4);
  }
  sb_add(&b, "}", 1);
  ploop_descriptor_free(d);
  int r = b.p ? reply_ok(fd, b.p) : reply_err(fd, ENOMEM, "out of memory");
  free(b.p);
  return r;
}

static int cmd_dirty_get(int fd, struct disk_export *de, bool clear) {
  uint64_t cl = ploop_disk_cluster_size(de->disk);
  uint64_t clusters = (ploop_disk_size(de->disk) + cl - 1) / cl;
  size_t bytes = (size_t)((clusters + 7) / 8);
  uint8_t *bm = calloc(1, bytes ? bytes : 1);
  if (!bm) return reply_err(fd, ENOMEM, "out of memory");
  int r;
  if (ploop_disk_dirty_get(de->disk, bm, bytes, clear) < 0) {
    r = reply_err(fd, ploop_get_errno(), ploop_get_error());
  } else {
    char head[64];
    snprintf(head, sizeof head, "%zu %" PRIu64, bytes, cl);
    r = reply_ok(fd, head);
    if (r == 0) r = send_all(fd, bm, bytes);
  }
  free(bm);
  return r;
}

/* Runs one command line; returns -1 when the client connection is gone. */
static int handle(int fd, struct disk_export *de, char *line) {
  char *save = NULL;
  char *verb = strtok_r(line, " ", &save);
  char *a1 = strtok_r(NULL, " ", &save);
  char *a2 = strtok_r(NULL, " ", &save);
  if (!verb) return reply_err(fd, EINVAL, "empty command");

  if (strcmp(verb, "INFO") == 0) return cmd_info(fd, de);

  /* Hand-over of a disk in shared storage (ploop_disk_release): the mount
   * above stays, I/O fails until ACQUIRE ("ACQUIRE DIRTY": the holder in
   * between was fenced and left the in-use mark). */
  if (strcmp(verb, "RELEASE") == 0 || strcmp(verb, "ACQUIRE") == 0) {
    bool rel = verb[0] == 'R';
    pthread_mutex_lock(&de->lock);
    int r = rel ? ploop_disk_release(de->disk)
                : ploop_disk_acquire(de->disk, a1 && strcmp(a1, "DIRTY") == 0 ? PLOOP_OPEN_ALLOW_DIRTY : 0);
    pthread_mutex_unlock(&de->lock);
    if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
    bool ahead = !rel && ploop_disk_acquired_ahead(de->disk);
    nbd_log("%s: %s", de->name, rel ? "released" : ahead ? "acquired (opened ahead)" : "acquired");
    return reply_ok(fd, rel ? "" : ahead ? "ahead" : "full");
  }
  if (ploop_disk_released(de->disk)) return reply_err(fd, ESHUTDOWN, "the disk is released (ACQUIRE first)");

  if (strcmp(verb, "SNAPSHOT") == 0) {
    char out[PLOOP_UUID_LEN + 1];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_mutex_lock(&de->lock);
    int r = ploop_disk_snapshot(de->disk, a1, out);
    pthread_mutex_unlock(&de->lock);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
    /* The whole call, and the part that held the disk's I/O: what a
     * snapshot costs the workload (the client's own start-up apart). */
    nbd_log("%s: online snapshot %s in %.1f ms (I/O paused %.1f ms)", de->name, out,
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
            (double)ploop_disk_snapshot_pause_us(de->disk) / 1e3);
    return reply_ok(fd, out);
  }

  if (strcmp(verb, "MERGE") == 0) {
    const char *guid = a1 && strcmp(a1, "-") != 0 ? a1 : NULL;
    bool all = a2 && strcmp(a2, "ALL") == 0;
    pthread_mutex_lock(&de->lock);
    /* A reader of a snapshot export would see its delta change under it. */
    if (export_open_snapshots(de) > 0) {
      pthread_mutex_unlock(&de->lock);
      return reply_err(fd, EBUSY, "a snapshot of this disk is exported to a client; "
                                  "disconnect it first");
    }
    int r = ploop_disk_merge(de->disk, guid, all, NULL, NULL);
    pthread_mutex_unlock(&de->lock);
    if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
    nbd_log("%s: online merge done", de->name);
    return reply_ok(fd, "");
  }

  if (strcmp(verb, "COMPACT") == 0) {
    uint64_t reclaimed = 0;
    pthread_mutex_lock(&de->lock);
    int r = ploop_disk_compact(de->disk, &reclaimed);
    pthread_mutex_unlock(&de->lock);
    if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
    char out[32];
    snprintf(out, sizeof out, "%" PRIu64, reclaimed);
    nbd_log("%s: online compaction reclaimed %s bytes", de->name, out);
    return reply_ok(fd, out);
  }

  if (strcmp(verb, "RESIZE") == 0) {
    uint64_t bytes;
    if (!a1 || ploop_parse_size(a1, &bytes) < 0)
      return reply_err(fd, EINVAL, "RESIZE needs a size (bytes, or with a K/M/G/T suffix)");
    /* "RESIZE N FORCE": shrink even past allocated clusters (ploop resize --force). */
    unsigned rflags = a2 && strcmp(a2, "FORCE") == 0 ? PLOOP_RESIZE_FORCE : 0;
    pthread_mutex_lock(&de->lock);
    int r = ploop_disk_resize(de->disk, bytes, rflags);
    pthread_mutex_unlock(&de->lock);
    if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
    if (de->fuse && ploop_fuse_export_resized) ploop_fuse_export_resized(de->fuse);
    char out[32];
    snprintf(out, sizeof out, "%" PRIu64, ploop_disk_size(de->disk));
    nbd_log("%s: online resize to %s bytes", de->name, out);
    return reply_ok(fd, out);
  }

  if (strcmp(verb, "DIRTY") == 0 && a1) {
    if (strcmp(a1, "START") == 0 || strcmp(a1, "STOP") == 0) {
      bool start = a1[2] == 'A';
      int r = start ? ploop_disk_dirty_start(de->disk) : ploop_disk_dirty_stop(de->disk);
      if (r < 0) return reply_err(fd, ploop_get_errno(), ploop_get_error());
      de->dirty_tracking = start;
      return reply_ok(fd, "");
    }
    if (strcmp(a1, "GET") == 0) return cmd_dirty_get(fd, de, a2 && strcmp(a2, "CLEAR") == 0);
  }
  return reply_err(fd, EINVAL, "unknown control command");
}

static void serve_client(int fd, struct disk_export *de) {
  struct timeval tv = {.tv_sec = 30};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char hello[PATH_MAX + 32];
  int n = snprintf(hello, sizeof hello, "ploop-nbd %d %s\n", PLOOP_CTL_PROTO_VERSION, de->dir);
  if (n < 0 || send_all(fd, hello, (size_t)n) < 0) return;
  char line[PLOOP_CTL_MAX_LINE + 1];
  size_t len = 0;
  for (;;) {
    ssize_t r = recv(fd, line + len, sizeof line - 1 - len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    len += (size_t)r;
    char *nl;
    while ((nl = memchr(line, '\n', len))) {
      *nl = 0;
      size_t used = (size_t)(nl - line) + 1;
      if (handle(fd, de, line) < 0) return;
      memmove(line, line + used, len - used);
      len -= used;
    }
    if (len == sizeof line - 1) {
      reply_err(fd, EINVAL, "line too long");
      return;
    }
  }
}

static void *control_thread(void *arg) {
  struct disk_export *de = arg;
  for (;;) {
    int fd = accept4(de->ctl_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break; /* listener shut down */
    }
    atomic_store(&de->ctl_client, fd);
    if (!atomic_load(&g_stopping)) serve_client(fd, de);
    atomic_store(&de->ctl_client, -1);
    close(fd);
  }
  return NULL;
}

int control_start(struct disk_export *de, char *err, size_t errlen) {
  char path[PATH_MAX];
  if (ploop_ctl_socket_path(de->dir, path, sizeof path) < 0) {
    snprintf(err, errlen, "%s", ploop_ctl_error());
    return -1;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = 0;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
      snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
      return -1;
    }
  }
  /* A socket left by a killed server is stale when nobody answers on it. */
  int probe = ploop_ctl_connect(de->dir);
  if (probe >= 0) {
    close(probe);
    snprintf(err, errlen, "%s is already served (control socket %s)", de->dir, path);
    return -1;
  }
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1); /* length checked by ploop_ctl_socket_path */
  mode_t old = umask(0077);
  int r = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (r < 0 || listen(fd, 16) < 0) {
    snprintf(err, errlen, "control socket %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  de->ctl_fd = fd;
  atomic_store(&de->ctl_client, -1);
  de->ctl_path = strdup(path);
  if (pthread_create(&de->ctl_thread, NULL, control_thread, de) != 0) {
    snprintf(err, errlen, "control thread: %s", strerror(errno));
    return -1;
  }
  de->ctl_running = true;
  return 0;
}

void control_stop(struct disk_export *de) {
  if (!de->ctl_running) return;
  shutdown(de->ctl_fd, SHUT_RDWR); /* wakes accept() */
  int client = atomic_load(&de->ctl_client);
  if (client >= 0) shutdown(client, SHUT_RDWR);
  pthread_join(de->ctl_thread, NULL);
  close(de->ctl_fd);
  unlink(de->ctl_path);
  de->ctl_running = false;
}
