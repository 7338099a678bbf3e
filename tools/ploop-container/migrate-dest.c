/* `receive --listen ADDR:PORT`: the destination side. Everything received
 * lives in ROOT/NAME, made by us; until COMMIT nothing runs, and any
 * failure removes ROOT/NAME entirely. COMMIT is recorded durably before the
 * container starts, which is what `migrate --resolve` asks about. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "attach.h"
#include "container.h"
#include "control.h"
#include "criu.h"
#include "disk.h"
#include "error.h"
#include "libploop.h"
#include "migrate-images.h"
#include "migrate-internal.h"
#include "migrate-preattach.h"
#include "migrate-proto.h"
#include "migrate-shared.h"
#include "util.h"

struct dst {
  int fd;
  unsigned timeout_s;
  char name[CT_NAME_MAX + 1];
  struct mig_record rec;
  struct ct_config cfg;
  struct ct_runargs ra;
  char mode[16];
  char *dir, *diskdir, *mnt;
  int lock;
  bool created, mounted, ready, final_seen;
  bool shared;          /* the disk is in shared storage: HANDOVER, no rounds */
  char shared_created[4]; /* the source's create made it: so may our destroy remove it */
  double acquire_ms;      /* shared: the ACQUIRE at HANDOVER */
  bool acquire_ahead;     /* and it found the top opened ahead */
  unsigned next_round;
  char *criu_bin;       /* offered by the source and working here */
  char criu_why[256];   /* else why not */
  bool criu;            /* images received: restore instead of a restart */
  char *images;         /* ROOT/NAME/migration-images */
  uint64_t image_bytes;
  unsigned image_files;
  char **cfg_kv;        /* the source's network and limits (config keys) */
  size_t cfg_n;
  bool preattach;          /* offered in WELCOME */
  struct mig_preattach pa; /* attached before the freeze (ATTACH) */
};

#define MIG_MAX_IMAGE_BYTES (16ull << 30)

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
  (void)st;
  (void)ftw;
  if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
    return -1;
  return 0;
}

int mig_remove_tree(const char *dir)
{
  if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
    return ct_fail(errno, "remove %s", dir);
  return 0;
}

/* Everything of a migration that did not commit goes: mount, daemon, files. */
static void discard(const char *name)
{
  cleanup_free char *dir = ct_path(name, NULL);
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  if (disk_is_mounted(mnt) && disk_umount(diskdir, mnt) < 0)
    fprintf(stderr, "ploop-container: discard %s: %s\n", name, ct_error());
  struct ploop_attach_info ai;
  if (ploop_attach_find(diskdir, &ai) == 0)
    ploop_attach_umount(diskdir);
  mig_shared_dest_discard(diskdir);
  if (mig_remove_tree(dir) < 0)
    fprintf(stderr, "ploop-container: discard %s: %s\n", name, ct_error());
}

static int parse_hello(struct dst *d, const char *h)
{
  uint64_t v;
  char buf[512];
  if (mig_kv_u64(h, "version", &v) < 0)
    return -1;
  if (v != MIG_VERSION)
    return ct_fail(0, "protocol version %" PRIu64 " is not supported (this side speaks %d)", v,
                   MIG_VERSION);
  if (!mig_kv(h, "id", d->rec.id, sizeof d->rec.id) || !d->rec.id[0])
    return ct_fail(0, "protocol error: HELLO without id");
  if (!mig_kv(h, "name", d->name, sizeof d->name) || ct_check_name(d->name) < 0)
    return ct_fail(0, "bad container name in HELLO");
  snprintf(d->cfg.name, sizeof d->cfg.name, "%s", d->name);
  if (mig_kv_u64(h, "disk_bytes", &d->cfg.disk_bytes) < 0)
    return -1;
  if (mig_kv(h, "source", buf, sizeof buf)) {
    cleanup_free char *s = mig_unhex(buf);
    snprintf(d->cfg.source, sizeof d->cfg.source, "%s", s ? s : "migrated");
  }
  if (!mig_kv(h, "mode", d->mode, sizeof d->mode) ||
      (strcmp(d->mode, "online") && strcmp(d->mode, "offline") && strcmp(d->mode, "cold")))
    return ct_fail(0, "protocol error: bad mode");
  if (mig_kv_u64(h, "criu", &v) < 0)
    return -1;
  if (v && strcmp(d->mode, "online") == 0 &&
      ct_criu_find(NULL, &d->criu_bin, d->criu_why, sizeof d->criu_why) < 0)
    d->criu_bin = NULL;  /* WELCOME says criu=0 and why: the source restarts the command instead */
  size_t cap = strlen(h) + 1;
  cleanup_free char *cfg = malloc(cap);
  if (!cfg)
    abort();
  if (mig_kv(h, "config", cfg, cap) && mig_config_parse(cfg, &d->cfg_kv, &d->cfg_n) < 0)
    return -1;
  if (mig_kv_u64(h, "argc", &v) < 0)
    return -1;
  if (v && ct_runargs_parse(h, &d->ra) < 0)
    return ct_wrap("HELLO");
  if (!v && strcmp(d->mode, "cold"))
    return ct_fail(0, "protocol error: a running container without its command");
  return 0;
}

static int claim(struct dst *d)
{
  if (mkdir_p(ct_root, 0700) < 0)
    return -1;
  d->dir = ct_path(d->name, NULL);
  d->diskdir = ct_path(d->name, "disk");
  d->mnt = ct_path(d->name, "rootfs");
  if (mkdir(d->dir, 0700) < 0) {
    if (errno == EEXIST)
      return ct_fail(0, "a container named %s exists on the destination already", d->name);
    return ct_fail(errno, "mkdir %s", d->dir);
  }
  d->created = true;
  d->lock = ct_lock(d->name);
  if (d->lock < 0)
    return -1;
  snprintf(d->rec.role, sizeof d->rec.role, "dest");
  snprintf(d->rec.phase, sizeof d->rec.phase, "receiving");
  if (mig_record_save(d->name, &d->rec, false) < 0)
    return -1;
  /* Made now, not in the frozen window: mount point, command. The config
   * (what makes it a container others may start) waits for PREPARE. A
   * failure removes it all with the rest. */
  if (mkdir(d->mnt, 0755) < 0 && errno != EEXIST)
    return ct_fail(errno, "mkdir %s", d->mnt);
  if (d->ra.argc && ct_runargs_save(d->name, &d->ra.o, d->ra.argv) < 0)
    return -1;
  return 0;
}

static int on_round(struct dst *d, const char *msg)
{
  uint64_t round, final;
  char guid[64] = "";
  if (mig_kv_u64(msg, "round", &round) < 0 || mig_kv_u64(msg, "final", &final) < 0)
    return -1;
  if (d->shared)
    return ct_fail(0, "protocol error: a disk stream for a disk in shared storage");
  if (d->final_seen || round != d->next_round)
    return ct_fail(0, "protocol error: round %" PRIu64 " out of order", round);
  mig_kv(msg, "guid", guid, sizeof guid);
  struct ploop_stream_stats st = {0};
  char got[PLOOP_UUID_LEN + 1] = "";
  if (d->pa.attached) {
    /* the disk is served: the round goes into its top, on the state before */
    if (mig_preattach_receive(&d->pa, d->pa.holds, d->fd, &st, got, final) < 0)
      return ct_wrap("round %" PRIu64, round);
  } else if (ploop_receive(d->diskdir, NULL, d->fd, &st, got) < 0) {
    return ct_fail(0, "round %" PRIu64 ": %s", round, ploop_get_error());
  }
  if (guid[0] && strcmp(guid, got) != 0)
    return ct_fail(0, "round %" PRIu64 ": the stream carried %s, announced %s", round, got, guid);
  d->next_round++;
  d->final_seen = final != 0;
  snprintf(d->pa.holds, sizeof d->pa.holds, "%s", got);
  /* the round's snapshot is the migration's, merged away after COMMIT (one
   * written into the served top is no snapshot here) */
  if (!d->pa.attached && d->rec.n_snaps < sizeof d->rec.snaps / sizeof d->rec.snaps[0])
    snprintf(d->rec.snaps[d->rec.n_snaps++], sizeof d->rec.snaps[0], "%s", got);
  cleanup_free char *ack = xasprintf("round=%" PRIu64 "\nguid=%s\nbytes=%" PRIu64 "\nreceive_ms=%.1f\n",
                                     round, got, st.bytes, st.seconds * 1e3);
  return mig_send_text(d->fd, MIG_ROUND_ACK, ack);
}

/* The shared disk, released by the source: ours now (in place of the rounds). */
static int on_handover(struct dst *d)
{
  if (!d->shared || d->final_seen)
    return ct_fail(0, "protocol error: HANDOVER %s", d->shared ? "twice" : "without a shared disk");
  if (mig_shared_dest_acquire(d->diskdir, &d->acquire_ms, &d->acquire_ahead) < 0)
    return -1;
  d->final_seen = true;
  return 0;
}

/* Everything but the start: config, the disk mounted, the command saved. */
static int on_file(struct dst *d, const char *msg)
{
  if (!d->criu_bin || !d->final_seen || d->ready)
    return ct_fail(0, "protocol error: CRIU image %s", d->criu_bin ? "out of turn" : "not offered");
  if (!d->images) {
    d->images = ct_path(d->name, "migration-images");
    if (mkdir(d->images, 0700) < 0)
      return ct_fail(errno, "mkdir %s", d->images);
  }
  if (mig_recv_image(d->fd, d->images, msg, MIG_MAX_IMAGE_BYTES, &d->image_bytes) < 0)
    return -1;
  d->image_files++;
  return 0;
}

/* ATTACH, after round 0: attach now, while the source still runs. */
static int on_attach(struct dst *d)
{
  if (!d->preattach || d->pa.attached || !d->next_round || d->final_seen)
    return ct_fail(0, "protocol error: ATTACH %s", d->preattach ? "out of turn" : "not offered");
  if (mig_preattach_attach(&d->pa, d->diskdir) < 0)
    return -1;
  char msg[48];
  snprintf(msg, sizeof msg, "attach_ms=%.1f\n", d->pa.attach_ms);
  return mig_send_text(d->fd, MIG_ATTACHED, msg);
}

static int on_prepare(struct dst *d, const char *msg)
{
  uint64_t t0 = now_ns();
  if (!d->final_seen)
    return ct_fail(0, "protocol error: PREPARE before the final round");
  uint64_t criu = 0;
  mig_kv_u64(msg, "criu", &criu);
  if (criu && !d->image_files)
    return ct_fail(0, "protocol error: PREPARE with criu=1 but no CRIU images");
  d->criu = criu != 0;
  if (ct_config_save(&d->cfg) < 0 || mig_config_apply(d->name, d->cfg_kv, d->cfg_n) < 0 ||
      (d->shared && mig_shared_dest_config(d->name, d->diskdir, d->shared_created) < 0))
    return -1;
  /* attached early: only the mount is left, for a restore too (its monitor
   * adopts it); else a restore mounts the disk itself (its monitor owns it).
   * A shared disk is mounted at COMMIT: until then the source may take it
   * back, and a mount writes its superblock and journal. */
  if (d->ra.argc && d->pa.attached) {
    if (mig_preattach_mount(&d->pa, d->mnt) < 0)
      return -1;
    d->mounted = true;
  } else if (d->ra.argc && !d->criu && !d->shared) {
    if (disk_mount(d->diskdir, d->mnt) < 0)
      return -1;
    d->mounted = true;
  }
  snprintf(d->rec.phase, sizeof d->rec.phase, "ready");
  if (mig_record_save(d->name, &d->rec, false) < 0)
    return -1;
  d->ready = true;
  char ready[96], acq[64] = "";
  if (d->shared)
    snprintf(acq, sizeof acq, "acquire_ms=%.1f\nacquire=%s\n", d->acquire_ms, d->acquire_ahead ? "ahead" : "full");
  snprintf(ready, sizeof ready, "attach_ms=%.1f\n%s", (double)(now_ns() - t0) / 1e6, acq);
  return mig_send_text(d->fd, MIG_READY, ready);
}

/* The temporary snapshots go, online through the container's daemon, by a
 * detached process: the receiver answers at once. */
static void merge_in_background(const char *name, const char *diskdir, const struct mig_record *rec)
{
  pid_t pid = fork();
  if (pid != 0) {
    if (pid > 0)
      waitpid(pid, NULL, 0);
    return;
  }
  if (fork() != 0)
    _exit(0);
  setsid();
  for (int fd = 3; fd < 1024; fd++)
    close(fd);
  int rc = mig_merge_back(name, rec);
  if (rc < 0)
    fprintf(stderr, "ploop-container: merge of the migration's snapshots in %s failed: %s\n", diskdir,
            ct_error());
  _exit(rc < 0);
}

static int on_commit(struct dst *d)
{
  if (!d->ready)
    return ct_fail(0, "protocol error: COMMIT before READY");
  uint64_t t0 = now_ns();
  snprintf(d->rec.phase, sizeof d->rec.phase, "committed");
  if (mig_record_save(d->name, &d->rec, true) < 0)
    return -1;  /* not recorded: not committed, the source keeps it */
  d->created = false;  /* ours to keep from here on, whatever happens */
  double mount_ms = 0;
  if (d->shared && d->ra.argc && !d->criu) {
    /* committed: the disk is ours for good (a failure here leaves the
     * mount to the monitor's start, which reports it) */
    uint64_t tm = now_ns();
    int mrc = disk_mount(d->diskdir, d->mnt);
    mount_ms = (double)(now_ns() - tm) / 1e6;
    if (mrc == 0)
      d->mounted = true;
    else
      fprintf(stderr, "ploop-container: %s: mount after COMMIT: %s\n", d->name, ct_error());
  }
  cleanup_free char *ans = NULL;
  char criu_err[600] = "";
  bool restored = false;
  if (d->ra.argc && d->criu) {
    /* ct_restore takes the container's lock itself, for its monitor */
    close(d->lock);
    d->lock = -1;
    restored = (d->mounted ? ct_restore_adopt(d->name, d->criu_bin, d->images)
                           : ct_restore(d->name, d->criu_bin, d->images, false, NULL)) == 0;
    d->mounted = false; /* the restore's monitor took the mount, and undid it on failure */
    if (!restored) {
      snprintf(criu_err, sizeof criu_err, "%s", ct_error());
      fprintf(stderr, "ploop-container: %s: CRIU restore failed, starting its command again: %s\n",
              d->name, criu_err);
      /* the disk holds the frozen state: the command runs on it as after a restart */
      d->lock = ct_lock(d->name);
    }
    mig_remove_tree(d->images);
  }
  if (d->ra.argc && !restored) {
    bool adopt = d->mounted;
    d->mounted = false;  /* the monitor owns the mount now */
    if (d->lock < 0 || mig_start(d->name, d->lock, &d->ra, adopt) < 0) {
      ans = xasprintf("state=stopped\nerror=%s\n", ct_error());
      fprintf(stderr, "ploop-container: %s committed but did not start: %s\n", d->name, ct_error());
    }
  }
  for (char *c = criu_err; *c; c++)
    if (*c == '\n')
      *c = ' ';
  /* A stopped container's temporary snapshots have empty children: merged
   * before the answer, so that a `start` right after the migration finds
   * its disk free. A running one's go in the background (the answer ends
   * the downtime). */
  bool merged = false;
  if (!d->ra.argc) {
    if (d->lock >= 0)
      close(d->lock);
    d->lock = -1;
    if (mig_merge_back(d->name, &d->rec) < 0)
      fprintf(stderr, "ploop-container: merge of the migration's snapshots in %s failed: %s\n", d->diskdir,
              ct_error());
    merged = true;
  }
  if (!ans)
    ans = xasprintf("state=%s\nstart_ms=%.1f\nmount_ms=%.1f\nrestored=%d\n%s%s%s", d->ra.argc ? "running" : "stopped",
                    (double)(now_ns() - t0) / 1e6, mount_ms, restored, criu_err[0] ? "criu_error=" : "", criu_err,
                    criu_err[0] ? "\n" : "");
  if (mig_send_text(d->fd, MIG_COMMITTED, ans) < 0)
    fprintf(stderr, "ploop-container: %s: committed, but the source did not get the answer: %s\n",
            d->name, ct_error());
  if (d->lock >= 0)
    close(d->lock);
  d->lock = -1;
  if (!merged)
    merge_in_background(d->name, d->diskdir, &d->rec);
  return 0;
}

/* QUERY from `migrate --resolve`. */
static int on_query(int fd, const char *q, const struct mig_auth *auth)
{
  char id[40] = "", name[CT_NAME_MAX + 1] = "", cn[MIG_NONCE_HEX + 1] = "";
  mig_kv(q, "id", id, sizeof id);
  mig_kv(q, "name", name, sizeof name);
  /* Under --auth only a querier with a nonce gets an answer (it carries
   * our proof); nothing is looked at or discarded for anyone else. */
  if (auth) {
    char proof[MIG_PROOF_HEX + 1] = "", want[MIG_PROOF_HEX + 1];
    mig_kv(q, "proof", proof, sizeof proof);
    if (!mig_kv(q, "nonce", cn, sizeof cn) || strlen(cn) != MIG_NONCE_HEX) {
      mig_send_error(fd, "authentication required: give --auth FILE to migrate --resolve");
      return -1;
    }
    mig_auth_proof(auth, "ploop-container-migrate query", cn, id, want);
    if (!mig_auth_equal(proof, want)) {
      mig_send_error(fd, "authentication failed: the querier's --auth token differs");
      return -1;
    }
  }
  const char *state = "unknown";
  struct mig_record m;
  if (ct_check_name(name) == 0 && mig_record_load(name, &m) > 0 && !strcmp(m.id, id) &&
      !strcmp(m.role, "dest")) {
    if (!strcmp(m.phase, "committed")) {
      state = "committed";
    } else {
      int lock = ct_lock(name);
      if (lock < 0) {
        state = "pending";  /* its receiver still runs and may yet get COMMIT */
      } else {
        discard(name);  /* its receiver died before COMMIT */
        close(lock);
      }
    }
  }
  char proof[MIG_PROOF_HEX + 1] = "";
  if (auth)
    mig_status_proof(auth, cn, id, state, proof);
  cleanup_free char *ans = xasprintf("state=%s\nproof=%s\n", state, proof);
  return mig_send_text(fd, MIG_STATUS, ans);
}

/* After our ERROR: half-close and swallow what the source still sends for a
 * moment, so that our close does not reset the connection (a reset may drop
 * the ERROR from the source's queue unread, and with it the reason). */
static void linger_close(int fd)
{
  shutdown(fd, SHUT_WR);
  struct timeval tv = {.tv_sec = 1};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[65536];
  uint64_t until = now_ns() + 2000000000ull;
  while (now_ns() < until && read(fd, buf, sizeof buf) > 0) {
  }
}

/* One connection. Returns 1 for a query, 0 committed, -1 failed. */
/* --auth: the source proves it holds the token before anything is made
 * here (a wrong or missing proof: one ERROR line, then we close). */
static int authenticate(int fd, const struct mig_auth *auth, const char *hello, char *cn, char *sn)
{
  if (!mig_kv(hello, "nonce", cn, MIG_NONCE_HEX + 1) || strlen(cn) != MIG_NONCE_HEX)
    return ct_fail(0, "authentication required: the source gave no --auth token");
  mig_auth_nonce(sn);
  cleanup_free char *c = xasprintf("nonce=%s\n", sn);
  cleanup_free char *a = NULL;
  if (mig_send_text(fd, MIG_CHALLENGE, c) < 0 || mig_expect(fd, MIG_AUTH, &a, NULL) < 0)
    return -1;
  char proof[MIG_PROOF_HEX + 1], want[MIG_PROOF_HEX + 1];
  mig_auth_proof(auth, "ploop-container-migrate source", cn, sn, want);
  if (!mig_kv(a, "proof", proof, sizeof proof) || !mig_auth_equal(proof, want))
    return ct_fail(0, "authentication failed: the source's --auth token differs");
  return 0;
}

static int serve(int fd, unsigned timeout_s, const struct mig_auth *auth)
{
  struct dst d = {.fd = fd, .timeout_s = timeout_s, .lock = -1, .pa = {.dev = -1}};
  char cn[MIG_NONCE_HEX + 1] = "", sn[MIG_NONCE_HEX + 1] = "";
  unsigned t;
  char *msg = NULL;
  int rc = -1;
  bool peer_failed = false;
  if (mig_set_timeout(fd, timeout_s) < 0 || mig_recv(fd, &t, &msg, NULL) < 0)
    return -1;
  if (t == MIG_QUERY) {
    on_query(fd, msg, auth);
    free(msg);
    return 1;
  }
  if (t != MIG_HELLO) {
    free(msg);
    ct_fail(0, "protocol error: expected HELLO, got %s", mig_type_name(t));
    mig_send_error(fd, ct_error());
    return -1;
  }
  if (auth && authenticate(fd, auth, msg, cn, sn) < 0) {
    free(msg);
    msg = NULL;
    mig_send_error(fd, ct_error());
    linger_close(fd);
    return -1;
  }
  if (parse_hello(&d, msg) < 0 || claim(&d) < 0)
    goto fail;
  int sh = mig_shared_dest_standby(d.diskdir, msg);
  if (sh < 0)
    goto fail;
  d.shared = sh;
  mig_kv(msg, "disk_created", d.shared_created, sizeof d.shared_created);
  free(msg);
  msg = NULL;
  char w[600], proof[MIG_PROOF_HEX + 1] = "";
  if (auth)
    mig_auth_proof(auth, "ploop-container-migrate destination", cn, sn, proof);
  for (char *c = d.criu_why; *c; c++)
    if (*c == '\n')
      *c = ' ';
  d.preattach = !d.shared && strcmp(d.mode, "online") == 0 && mig_preattach_offered();
  snprintf(w, sizeof w, "version=%d\ncriu=%d\ncriu_why=%s\nproof=%s\npreattach=%d\nshared=1\n", MIG_VERSION,
           d.criu_bin != NULL, d.criu_why, proof, d.preattach);
  if (mig_send_text(fd, MIG_WELCOME, w) < 0)
    goto fail;
  for (;;) {
    if (mig_recv(fd, &t, &msg, NULL) < 0) {
      peer_failed = true;
      goto fail;
    }
    int r;
    switch (t) {
    case MIG_ROUND: r = on_round(&d, msg); break;
    case MIG_FILE: r = on_file(&d, msg); break;
    case MIG_ATTACH: r = on_attach(&d); break;
    case MIG_PREPARE: r = on_prepare(&d, msg); break;
    case MIG_HANDOVER: r = on_handover(&d); break;
    case MIG_COMMIT: r = on_commit(&d); break;
    default: r = ct_fail(0, "protocol error: unexpected %s", mig_type_name(t));
    }
    free(msg);
    msg = NULL;
    if (r < 0)
      goto fail;
    if (t == MIG_COMMIT) {
      rc = 0;
      if (d.shared && !d.ra.argc)
        mig_shared_dest_discard(d.diskdir); /* a cold copy: nothing uses the disk here yet */
      /* DONE: the source's copy is gone, no --resolve can ask any more;
       * the record goes (else it would block migrating the container on).
       * Without DONE (lost, or the source died) it stays, as it must. */
      if (mig_recv(fd, &t, &msg, NULL) == 0 && t == MIG_DONE)
        mig_record_remove(d.name);
      free(msg);
      msg = NULL;
      break;
    }
  }
  goto out;
fail:
  free(msg);
  ct_wrap("receive %s", d.name[0] ? d.name : "migration");
  if (!peer_failed) {
    mig_send_error(fd, ct_error());
    linger_close(fd);
  }
out:
  mig_preattach_close(&d.pa);
  if (d.lock >= 0)
    close(d.lock);
  if (rc < 0 && d.created)
    discard(d.name);
  ct_runargs_free(&d.ra);
  mig_config_free(d.cfg_kv, d.cfg_n);
  free(d.criu_bin);
  free(d.images);
  free(d.dir);
  free(d.diskdir);
  free(d.mnt);
  return rc;
}

int migrate_recover_incoming(bool verbose)
{
  DIR *dir = opendir(ct_root);
  if (!dir)
    return errno == ENOENT ? 0 : ct_fail(errno, "open %s", ct_root);
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.' || ct_check_name(e->d_name) < 0)
      continue;
    struct mig_record m;
    if (mig_record_load(e->d_name, &m) <= 0 || strcmp(m.role, "dest") || !strcmp(m.phase, "committed"))
      continue;
    int lock = ct_lock(e->d_name);
    if (lock < 0)
      continue;  /* a live receiver holds it */
    discard(e->d_name);
    close(lock);
    if (verbose)
      printf("removed %s: a migration that never committed\n", e->d_name);
  }
  closedir(dir);
  return 0;
}

int migrate_receive(const char *listen_addr, bool once, unsigned timeout_s, const struct mig_auth *auth)
{
  if (migrate_recover_incoming(false) < 0)
    return -1;
  int lfd = mig_listen(listen_addr);
  if (lfd < 0)
    return -1;
  printf("receiving on %s\n", listen_addr);
  fflush(stdout);
  signal(SIGPIPE, SIG_IGN);
  if (!once)
    signal(SIGCHLD, SIG_IGN);  /* per-connection children reap themselves */
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      close(lfd);
      return ct_fail(errno, "accept on %s", listen_addr);
    }
    if (once) {
      fd = mig_tls_accept(fd, timeout_s);
      int rc = fd < 0 ? -1 : serve(fd, timeout_s, auth);
      mig_close(fd);
      if (rc == 1)
        continue;
      close(lfd);
      return rc;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(lfd);
      signal(SIGCHLD, SIG_DFL);
      fd = mig_tls_accept(fd, timeout_s);
      int rc = fd < 0 ? -1 : serve(fd, timeout_s, auth);
      mig_close(fd); /* with TLS, our last message is still in the relay */
      if (rc < 0)
        fprintf(stderr, "ploop-container: %s\n", ct_error());
      _exit(rc < 0);
    }
    close(fd);
  }
}
