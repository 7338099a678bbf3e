/* Shared state of ploop-nbd: the served disks (exports), one client
 * connection, and the entry points each part of the server offers. */
#ifndef PLOOP_NBD_SERVER_H
#define PLOOP_NBD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "libploop.h"

/* Largest READ/WRITE payload we accept (and advertise in INFO_BLOCK_SIZE). */
#define NBD_MAX_PAYLOAD (32u << 20)
#define NBD_MIN_BLOCK 512u
#define NBD_PREFERRED_BLOCK 4096u
/* Extents in one BLOCK_STATUS chunk; the client asks again for the rest. */
#define NBD_MAX_EXTENTS 4096u
/* Option data we are willing to read in one option (names are <= 4096). */
#define NBD_MAX_OPTION_DATA (64u << 10)
#define NBD_MAX_OPTIONS 1024u
/* Meta context ids (opaque to the client, stable in a session). */
#define META_ID_BASE_ALLOCATION 1u
#define META_ID_ALLOCATION_DEPTH 2u
#define META_ID_DIRTY 3u
#define META_BASE_ALLOCATION "base:allocation"
#define META_ALLOCATION_DEPTH "ploop:allocation-depth"
/* Clusters written since dirty tracking started (or the last DIRTY GET
 * CLEAR), as of the moment the client entered transmission: status 1 =
 * changed.  Offered on the live disk while tracking is on. */
#define META_DIRTY "ploop:dirty"

/* Payload memory of requests in flight (budget.c): per connection and in
 * total; --max-inflight-bytes / --max-total-bytes. */
#define BUDGET_DEFAULT_PER_CONN (64ull << 20)
#define BUDGET_DEFAULT_TOTAL (512ull << 20)

struct ploop_fuse_export;

/* A snapshot of a served disk, opened read-only while a client uses it. */
struct snap_export {
  struct snap_export *next;
  char guid[PLOOP_UUID_LEN + 1];
  struct ploop_disk *disk;
  unsigned refs;
};

/* One served disk: the live read-write stack and its opened snapshots. */
struct disk_export {
  char *name;          /* export name of the live disk */
  char *dir;           /* absolute path of the disk directory */
  struct ploop_disk *disk;
  pthread_mutex_t lock; /* guards snaps and structural operations */
  struct snap_export *snaps;
  struct ploop_fuse_export *fuse;
  char *ctl_path;
  int ctl_fd;
  pthread_t ctl_thread;
  bool ctl_running;
  atomic_int ctl_client; /* control client being served, -1 if none */
  atomic_bool dirty_tracking;
  atomic_uint connections;
};

/* What a connection serves after NBD_OPT_GO / EXPORT_NAME. */
struct export_ref {
  struct disk_export *de;
  struct snap_export *snap; /* NULL: the live disk */
  struct ploop_disk *disk;
  bool readonly;
};

struct server_config {
  struct disk_export *disks;
  size_t ndisks;
  unsigned max_workers; /* request threads per connection */
  const char *fuse_mountpoint;
  const char *fuse_name;
  bool readonly;          /* -r: open every disk read-only, no control socket */
  const char *snapshot;   /* --snapshot GUID: serve that state of the (one) disk */
  bool standby;           /* --standby: the top opened released, I/O fails until ACQUIRE */
  bool verbose;
  unsigned idle_timeout;  /* seconds; 0 = never */
  int tls;                /* TLS_OFF, TLS_ON (client's choice), TLS_REQUIRE */
  struct ploop_tls_creds *tls_creds;
};
enum { TLS_OFF, TLS_ON, TLS_REQUIRE };
/* The process serves one set of disks: a single global keeps every part
 * (connections, control sockets, signal handling) looking at the same. */
extern struct server_config g_cfg;
extern atomic_bool g_stopping;

/* ---- exports.c ----------------------------------------------------- */
/* Resolves an export name ("" = first disk, NAME, NAME@UUID) and takes a
 * reference; returns 0, or -1 with a message in MSG (unknown export). */
int export_acquire(const char *name, struct export_ref *out, char *msg, size_t msglen);
void export_release(struct export_ref *ref);
uint16_t export_flags(const struct export_ref *ref, bool structured);
/* Calls FN for every export name with a description. */
int export_list(int (*fn)(void *opaque, const char *name, const char *desc), void *opaque);
/* Number of snapshot exports currently open on DE (under DE->lock). */
unsigned export_open_snapshots(struct disk_export *de);
int exports_open_all(char *err, size_t errlen);
void exports_close_all(void);

/* ---- connection.c ---------------------------------------------------- */
struct conn;
/* Serves one client on RFD/WFD (equal for sockets) until it leaves or the
 * server stops; closes both fds. */
void conn_serve(int rfd, int wfd);
/* Starts a detached thread running conn_serve on FD. */
int conn_spawn(int fd);
/* Wakes every connection for shutdown and waits until all have finished. */
void conns_shutdown_and_wait(void);
unsigned conns_active(void);

/* ---- budget.c -------------------------------------------------------- */
void budget_configure(uint64_t per_conn, uint64_t total);
/* Frees the cached buffers (at exit, once every connection is gone). */
void budget_cleanup(void);

/* ---- handshake.c ----------------------------------------------------- */
/* Runs the fixed newstyle negotiation; 0 = enter transmission on C's export,
 * -1 = close the connection. */
int handshake(struct conn *c);

/* ---- control-server.c ---------------------------------------------- */
int control_start(struct disk_export *de, char *err, size_t errlen);
void control_stop(struct disk_export *de);

/* ---- log ------------------------------------------------------------ */
void nbd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nbd_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
