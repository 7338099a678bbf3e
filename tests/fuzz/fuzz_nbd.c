/* libFuzzer harness: ploop-nbd's server side of one connection, handshake
 * then transmission (kmod-free-nbd/server), driven through conn_serve over
 * a socketpair. The input is everything the client sends; a helper thread
 * feeds it and drains the replies. The export is a small disk with one
 * snapshot, made once per process in a temporary directory that is
 * removed at exit; requests may write it (as a client would). One request
 * thread per connection (max_workers 0) keeps runs reproducible. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "server.h"

/* What main.c of ploop-nbd defines, which the harness replaces. */
struct server_config g_cfg;
atomic_bool g_stopping;
void nbd_log(const char *fmt, ...) { (void)fmt; }
void nbd_debug(const char *fmt, ...) { (void)fmt; }

/* Fixed, so that seeds can name the snapshot export (disk@GUID). */
#define SNAP_GUID "{11111111-2222-4333-8444-555555555555}"

static char g_dir[PATH_MAX];
static struct disk_export g_disk;

static void teardown(void) {
  exports_close_all();
  budget_cleanup();
  if (g_dir[0]) fuzz_rmtree(g_dir);
}

static void setup(void) {
  char path[PATH_MAX], guid[PLOOP_UUID_LEN + 1];
  fuzz_tmpdir(g_dir);
  snprintf(path, sizeof path, "%s/%s", g_dir, PLOOP_DEFAULT_IMAGE_NAME);
  struct ploop_delta_create_params p = {.size_bytes = 4 << 20, .cluster_sectors = 64};
  if (ploop_disk_create(path, &p) < 0 || ploop_snapshot_create(g_dir, SNAP_GUID, guid) < 0) {
    fprintf(stderr, "fuzz: make the export: %s\n", ploop_get_error());
    abort();
  }
  g_disk.name = "disk";
  g_disk.dir = g_dir;
  g_cfg.disks = &g_disk;
  g_cfg.ndisks = 1;
  g_cfg.max_workers = 0;
  char err[256];
  if (exports_open_all(err, sizeof err) < 0) {
    fprintf(stderr, "fuzz: open the export: %s\n", err);
    abort();
  }
  atexit(teardown);
}

struct client {
  int fd;
  const uint8_t *data;
  size_t size;
};

/* Sends the input (then half-closes) while reading every reply, so
 * neither side can block the other on a full socket buffer. */
static void *client_thread(void *arg) {
  struct client *c = arg;
  static char sink[1 << 16];
  size_t sent = 0;
  bool wr_open = true;
  if (c->size == 0) {
    shutdown(c->fd, SHUT_WR);
    wr_open = false;
  }
  for (;;) {
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN | (wr_open ? POLLOUT : 0)};
    if (poll(&pfd, 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    if (wr_open && (pfd.revents & POLLOUT)) {
      ssize_t n = send(c->fd, c->data + sent, c->size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += (size_t)n;
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || sent == c->size) {
        shutdown(c->fd, SHUT_WR);
        wr_open = false;
      }
    }
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) setup();
  int fds = fuzz_count_fds();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) abort();
  struct client c = {sv[1], data, size};
  pthread_t t;
  if (pthread_create(&t, NULL, client_thread, &c) != 0) abort();
  conn_serve(sv[0], sv[0]); /* closes sv[0] */
  pthread_join(t, NULL);
  close(sv[1]);
  fuzz_check_fds(fds, "nbd connection");
  return 0;
}
