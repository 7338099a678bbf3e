/* `migrate NAME ADDR:PORT`: the source side. Rounds of online snapshots
 * streamed while the container runs, then freeze, last snapshot, last
 * round, PREPARE/READY, and the commit exchange. Until the destination
 * has answered COMMIT the container is ours: any failure thaws it, merges
 * the temporary snapshots back and leaves it running here. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attach.h"
#include "cgroup.h"
#include "container.h"
#include "control.h"
#include "criu.h"
#include "disk.h"
#include "error.h"
#include "fs-freeze.h"
#include "libploop.h"
#include "migrate-images.h"
#include "migrate-internal.h"
#include "migrate-proto.h"
#include "migrate-shared.h"
#include "util.h"

struct src {
  const struct mig_opts *o;
  struct mig_result *r;
  char *diskdir, *mnt;
  struct ct_cgroup cg;
  struct mig_record rec;
  struct ct_runargs ra;
  int fd;
  bool running, frozen, stopped_offline;
  bool shared;       /* the disk is in shared storage: hand it over, copy nothing */
  char since[PLOOP_UUID_LEN + 1];
  uint64_t t0, t_freeze;
  char *criu_bin;    /* a working CRIU, offered to the destination */
  bool use_criu;     /* the destination takes images: dump while frozen */
  bool preattach;    /* the destination attaches the disk before the freeze (ATTACH) */
  char images[128];  /* the dump, on tmpfs; removed at the end either way */
};

void mig_test_hook(const char *phase)
{
  const char *p = getenv("PLOOP_MIGRATE_HOOK_PHASE"), *cmd = getenv("PLOOP_MIGRATE_HOOK");
  if (!p || !cmd)
    return;
  /* PHASE or a comma-separated list of phases; the hook learns which one
   * from $PLOOP_MIGRATE_PHASE */
  size_t n = strlen(phase);
  for (const char *q = p; q; q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL) {
    if (strncmp(q, phase, n) == 0 && (q[n] == ',' || !q[n])) {
      setenv("PLOOP_MIGRATE_PHASE", phase, 1);
      if (system(cmd) != 0) {
        /* the hook's own failure is the test's business */
      }
      return;
    }
  }
}

static double ms_since(uint64_t t) { return (double)(now_ns() - t) / 1e6; }

/* Milliseconds since *T, and *T moved to now: consecutive phases. */
static double lap(uint64_t *t)
{
  uint64_t n = now_ns();
  double ms = (double)(n - *t) / 1e6;
  *t = n;
  return ms;
}

/* One round: ROUND message, one disk stream of GUID (since the previous
 * round's snapshot), the destination's ack naming the same GUID. T_START:
 * when the round began (its round_ms). */
static int send_round(struct src *s, unsigned round, const char *guid, bool final, uint64_t t_start)
{
  char phase[16];
  snprintf(phase, sizeof phase, final ? "final" : "round%u", round);
  cleanup_free char *msg = xasprintf("round=%u\nguid=%s\nsince=%s\nfinal=%d\n", round,
                                     guid ? guid : "", s->since, final);
  if (mig_send_text(s->fd, MIG_ROUND, msg) < 0)
    return -1;
  mig_test_hook(phase);
  /* --snapshots: the user's snapshots below arrive as snapshots with their
   * GUIDs (round 0), so the destination lists the same ones */
  struct ploop_send_opts so = {.guid = guid, .since = s->since[0] ? s->since : NULL, .snapshots = true};
  struct ploop_stream_stats st = {0};
  if (ploop_send(s->diskdir, &so, s->fd, &st) < 0)
    return ct_fail(0, "round %u: %s", round, ploop_get_error());
  cleanup_free char *ack = NULL;
  if (mig_expect(s->fd, MIG_ROUND_ACK, &ack, NULL) < 0)
    return ct_wrap("round %u", round);
  char g[PLOOP_UUID_LEN + 1];
  uint64_t n;
  if (mig_kv_u64(ack, "round", &n) < 0 || n != round || !mig_kv(ack, "guid", g, sizeof g))
    return ct_fail(0, "round %u: the destination acknowledged another round", round);
  if (guid && strcmp(g, guid) != 0)
    return ct_fail(0, "round %u: the destination holds %s, not %s", round, g, guid);
  char ms[32];
  double receive_ms = mig_kv(ack, "receive_ms", ms, sizeof ms) ? strtod(ms, NULL) : 0;
  if (final) {
    s->r->ph.dest_receive = receive_ms;
    s->r->ph.send = st.seconds * 1e3;
  }
  unsigned i = s->r->n_rounds;
  s->r->round_send_ms[i] = st.seconds * 1e3;
  s->r->round_receive_ms[i] = receive_ms;
  s->r->round_ms[i] = ms_since(t_start);
  s->r->rounds[s->r->n_rounds++] = st.bytes;
  s->r->bytes_sent += st.bytes;
  snprintf(s->since, sizeof s->since, "%s", g);
  return 0;
}

static int add_snapshot(struct src *s, const char *guid)
{
  snprintf(s->rec.snaps[s->rec.n_snaps++], sizeof s->rec.snaps[0], "%s", guid);
  /* durable: a crash from here on must still know what to merge back */
  return mig_record_save(s->o->name, &s->rec, true);
}

/* Stop policy, after a live round with BYTES: see README "Migration". */
static const char *stop_reason(const struct src *s)
{
  unsigned i = s->r->n_rounds - 1;
  uint64_t b = s->r->rounds[i];
  if (s->r->n_rounds >= s->o->max_rounds)
    return "max rounds";
  if (b < s->o->min_round)
    return "round below threshold";
  if (i > 0 && b * 10 > s->r->rounds[i - 1] * 9)
    return "round not 10% smaller";
  return NULL;
}

/* After the bulk round: the destination attaches what it holds (its daemon,
 * FUSE and loop device) while the container still runs here, and takes
 * every later round through that device, so the frozen window only streams
 * into it and mounts. Done right after round 0, the attach's time stretches
 * a live round, not the frozen one. A failure is an ordinary one: nothing
 * is frozen yet. */
static int pre_attach(struct src *s)
{
  if (!s->preattach)
    return 0;
  if (mig_send_text(s->fd, MIG_ATTACH, "") < 0)
    return -1;
  mig_test_hook("attach");
  cleanup_free char *ans = NULL;
  if (mig_expect(s->fd, MIG_ATTACHED, &ans, NULL) < 0)
    return ct_wrap("attach on the destination");
  char ms[32];
  if (mig_kv(ans, "attach_ms", ms, sizeof ms))
    s->r->dest_pre_attach_ms = strtod(ms, NULL);
  return 0;
}

static int live_rounds(struct src *s)
{
  for (unsigned round = 0;; round++) {
    char guid[PLOOP_UUID_LEN + 1];
    uint64_t t_start = now_ns();
    /* The round's dirty pages down to the disk first, so that this round's
     * snapshot carries them: what is left for the frozen round (and its
     * frozen syncfs) is only what was written since the last live round. */
    if (ploop_fs_sync(s->mnt) < 0)
      return ct_fail(0, "round %u: sync the filesystem of %s: %s", round, s->o->name, ploop_get_error());
    /* Live rounds need no consistent filesystem (the frozen round makes the
     * state consistent), so no FIFREEZE here: the writer never stalls. */
    if (ploop_ctl_snapshot(s->diskdir, NULL, guid) < 0)
      return ct_fail(0, "round %u: snapshot: %s", round, ploop_ctl_error());
    if (add_snapshot(s, guid) < 0 || send_round(s, round, guid, false, t_start) < 0 ||
        (round == 0 && pre_attach(s) < 0))
      return -1;
    if ((s->r->stop_reason = stop_reason(s)))
      return 0;
  }
}

/* The frozen window opens: the cgroup frozen, then every write the
 * processes made synced down to the loop device and, through FUSE, the
 * daemon, so that a snapshot or a release then holds them. *T: the lap clock. */
static int freeze_and_sync(struct src *s, uint64_t *t)
{
  struct mig_phases *ph = &s->r->ph;
  s->t_freeze = *t = now_ns();
  if (cg_freeze(&s->cg, true) < 0)
    return ct_wrap("freeze %s", s->o->name);
  s->frozen = true;
  ph->freeze = lap(t);
  if (ploop_fs_sync(s->mnt) < 0)
    return ct_fail(0, "sync the filesystem of %s: %s", s->o->name, ploop_get_error());
  ph->sync = lap(t);
  return 0;
}

/* The CRIU images dumped beside the last round, as FILE/DATA messages. */
static int send_images(struct src *s)
{
  unsigned files;
  uint64_t bytes;
  if (mig_send_images(s->fd, s->images, &files, &bytes) < 0)
    return ct_wrap("send the CRIU images");
  s->r->criu_bytes = bytes;
  s->r->criu = true;
  return 0;
}

static int frozen_round(struct src *s)
{
  struct mig_phases *ph = &s->r->ph;
  uint64_t t;
  if (freeze_and_sync(s, &t) < 0)
    return -1;
  char guid[PLOOP_UUID_LEN + 1];
  /* The daemon's snapshot, atomic against writes, with no FIFREEZE around
   * it: a clean journal is only needed to mount a snapshot read-only, and
   * the destination mounts it read-write, replaying the journal as after a
   * crash (ext4 keeps what was synced). The freeze's journal checkpoint
   * and the thaw cost 25-55 ms of the frozen window on the loaded CI host,
   * and its checkpoint writes dirtied more clusters for the last round. */
  if (ploop_ctl_snapshot(s->diskdir, NULL, guid) < 0)
    return ct_fail(0, "final snapshot: %s", ploop_ctl_error());
  ph->snapshot = lap(&t);
  snprintf(s->rec.snaps[s->rec.n_snaps++], sizeof s->rec.snaps[0], "%s", guid);
  s->rec.was_frozen = true;
  /* not durable: an fsync here would be downtime; a crash now loses only
   * this snapshot's name, and the disk is whole either way */
  if (mig_record_save(s->o->name, &s->rec, false) < 0)
    return -1;
  pid_t dumper = -1;
  int epipe[2] = {-1, -1};
  if (s->use_criu) {
    /* The processes, while frozen, by a child beside the last disk stream
     * (the two overlap); they stay frozen (leave running) so an abort only
     * has to thaw them. */
    snprintf(s->images, sizeof s->images, "/dev/shm/ploop-container-migrate.%s", s->rec.id);
    if (pipe2(epipe, O_CLOEXEC) < 0)
      return ct_fail(errno, "pipe");
    dumper = fork();
    if (dumper < 0) {
      close(epipe[0]);
      close(epipe[1]);
      return ct_fail(errno, "fork");
    }
    if (dumper == 0) {
      close(epipe[0]);
      close(s->fd);
      uint64_t t1 = now_ns();
      int rc = ct_checkpoint(s->o->name, s->criu_bin, s->images, true, NULL);
      char msg[1100];
      int n = rc < 0 ? snprintf(msg, sizeof msg, "E%s", ct_error())
                     : snprintf(msg, sizeof msg, "%.1f", (double)(now_ns() - t1) / 1e6);
      if (write(epipe[1], msg, (size_t)n) < 0)
        _exit(2);
      _exit(rc < 0);
    }
    close(epipe[1]);
  }
  int rc = send_round(s, s->r->n_rounds, guid, true, now_ns());
  if (dumper > 0) {
    char msg[1100] = "";
    ssize_t n;
    while ((n = read(epipe[0], msg, sizeof msg - 1)) < 0 && errno == EINTR) {
    }
    close(epipe[0]);
    msg[n > 0 ? n : 0] = 0;
    while (waitpid(dumper, NULL, 0) < 0 && errno == EINTR) {
    }
    if (rc == 0 && msg[0] != 'E' && msg[0])
      ph->checkpoint = strtod(msg, NULL);
    else if (rc == 0)
      rc = ct_fail(0, "CRIU dump: %s", msg[0] ? msg + 1 : "the dumping process died");
  }
  if (rc < 0)
    return -1;
  if (s->use_criu && send_images(s) < 0)
    return -1;
  ph->round = lap(&t);
  return 0;
}

static int offline_round(struct src *s)
{
  if (s->running) {
    s->t_freeze = now_ns();
    /* SIGTERM grace within the receiver's patience (it counts silence) */
    if (container_stop(s->o->name, s->o->timeout_s / 2) < 0)
      return ct_wrap("stop %s", s->o->name);
    s->stopped_offline = true;
  } else {
    s->t_freeze = now_ns();
  }
  return send_round(s, 0, NULL, true, now_ns());
}

/* A disk in shared storage (migrate-shared.h): no rounds. Freeze, flush,
 * dump the processes (CRIU), release the disk, HANDOVER, the images. */
static int shared_handover(struct src *s)
{
  struct mig_phases *ph = &s->r->ph;
  s->t_freeze = now_ns();
  uint64_t t = s->t_freeze;
  s->r->shared = true;
  if (s->r->online) {
    /* Most dirty data and the journal go out before the freeze, so the
     * frozen syncfs and FIFREEZE's own journal flush have little left to
     * do. Best effort: the frozen window syncs for real. */
    int pre = ploop_fs_open_mount(s->mnt);
    if (pre >= 0) {
      ploop_fs_sync_fd(pre, s->mnt);
      ploop_fs_checkpoint_fd(pre, s->mnt);
      close(pre);
    }
    if (freeze_and_sync(s, &t) < 0)
      return -1;
    if (s->use_criu) {
      snprintf(s->images, sizeof s->images, "/dev/shm/ploop-container-migrate.%s", s->rec.id);
      if (ct_checkpoint(s->o->name, s->criu_bin, s->images, true, NULL) < 0)
        return ct_wrap("CRIU dump");
      ph->checkpoint = lap(&t);
    }
    s->rec.was_frozen = true;
    if (mig_record_save(s->o->name, &s->rec, false) < 0)
      return -1;
    if (mig_shared_release(s->diskdir, s->mnt, &ph->fsfreeze, &ph->release) < 0)
      return -1;
    t = now_ns();
  } else if (s->running) {
    if (container_stop(s->o->name, s->o->timeout_s / 2) < 0)
      return ct_wrap("stop %s", s->o->name);
    s->stopped_offline = true;
  }
  mig_test_hook("handover");
  if (mig_send_text(s->fd, MIG_HANDOVER, "released=1\n") < 0)
    return -1;
  if (s->use_criu && send_images(s) < 0)
    return -1;
  ph->round = lap(&t);
  return 0;
}

static int hello(struct src *s)
{
  struct ct_config c;
  if (ct_config_load(s->o->name, &c) < 0)
    return -1;
  cleanup_free char *src = mig_hex(c.source[0] ? c.source : "migrated");
  cleanup_free char *args = s->ra.argc ? ct_runargs_format(&s->ra) : xasprintf("argc=0\n");
  const char *mode = s->o->offline ? "offline" : s->running ? "online" : "cold";
  if (s->r->online && !s->o->no_criu) {
    static char why[256];
    if (ct_criu_find(s->o->criu_path, &s->criu_bin, why, sizeof why) < 0)
      s->r->criu_why = why;
  }
  char cn[MIG_NONCE_HEX + 1] = "", sn[MIG_NONCE_HEX + 1] = "";
  if (s->o->auth)
    mig_auth_nonce(cn);
  cleanup_free char *cfg = mig_config_extra(s->o->name);
  cleanup_free char *shared = mig_shared_hello(s->o->name, s->diskdir);
  cleanup_free char *msg = xasprintf("nonce=%s\nversion=%d\nid=%s\nname=%s\ndisk_bytes=%" PRIu64
                                     "\nsource=%s\nmode=%s\ncriu=%d\nconfig=%s\n%s%s",
                                     cn, MIG_VERSION, s->rec.id, s->o->name, c.disk_bytes, src, mode,
                                     s->criu_bin != NULL, cfg, shared, args);
  if (mig_send_text(s->fd, MIG_HELLO, msg) < 0)
    return -1;
  cleanup_free char *w = NULL;
  unsigned type;
  if (mig_recv(s->fd, &type, &w, NULL) < 0)
    return -1;
  char proof[MIG_PROOF_HEX + 1], want[MIG_PROOF_HEX + 1];
  if (type == MIG_CHALLENGE) {
    if (!s->o->auth)
      return ct_fail(0, "the destination requires authentication: give --auth FILE");
    if (!mig_kv(w, "nonce", sn, sizeof sn) || strlen(sn) != MIG_NONCE_HEX)
      return ct_fail(0, "protocol error: CHALLENGE without a nonce");
    mig_auth_proof(s->o->auth, "ploop-container-migrate source", cn, sn, proof);
    cleanup_free char *a = xasprintf("proof=%s\n", proof);
    free(w);
    w = NULL;
    if (mig_send_text(s->fd, MIG_AUTH, a) < 0 || mig_recv(s->fd, &type, &w, NULL) < 0)
      return -1;
  } else if (s->o->auth) {
    return ct_fail(0, "the destination does not check --auth: not sending %s to it", s->o->name);
  }
  if (type != MIG_WELCOME)
    return ct_fail(0, "protocol error: expected WELCOME, got %s", mig_type_name(type));
  if (s->o->auth) {
    mig_auth_proof(s->o->auth, "ploop-container-migrate destination", cn, sn, want);
    if (!mig_kv(w, "proof", proof, sizeof proof) || !mig_auth_equal(proof, want))
      return ct_fail(0, "the destination failed authentication (its --auth token differs)");
  }
  uint64_t v;
  if (mig_kv_u64(w, "version", &v) < 0 || v != MIG_VERSION)
    return ct_fail(0, "the destination speaks protocol version %s, not %d", w, MIG_VERSION);
  if (s->shared && (mig_kv_u64(w, "shared", &v) < 0 || !v))
    return ct_fail(0, "the destination does not take a disk in shared storage (an older version)");
  char pa[8];
  s->preattach = mig_kv(w, "preattach", pa, sizeof pa) && strcmp(pa, "1") == 0;
  if (s->criu_bin) {
    uint64_t offered = 0;
    s->use_criu = mig_kv_u64(w, "criu", &offered) == 0 && offered;
    static char why[400];
    char theirs[300];
    snprintf(why, sizeof why, "the destination has no working CRIU: %s",
             mig_kv(w, "criu_why", theirs, sizeof theirs) ? theirs : "?");
    if (!s->use_criu)
      s->r->criu_why = why;
  }
  return 0;
}

/* The commit exchange. Returns 0 committed and running there, 1 committed
 * but not running there, CT_EXIT_IN_DOUBT, or -1 (not committed). */
static int commit(struct src *s)
{
  cleanup_free char *msg = xasprintf("criu=%d\n", s->r->criu);
  uint64_t t = now_ns();
  if (mig_send_text(s->fd, MIG_PREPARE, msg) < 0)
    return -1;
  /* The durable "committing" record, written while the destination
   * prepares (its fsync overlaps the mount there instead of adding to the
   * downtime), and always before COMMIT can be sent. Until COMMIT goes out
   * a failure in this process still rolls back (the destination cannot
   * have committed); a source that dies from here on stays frozen with the
   * record, and `migrate --resolve` asks the destination, which answers
   * "unknown" for a migration whose COMMIT it never got. */
  snprintf(s->rec.phase, sizeof s->rec.phase, "committing");
  if (mig_record_save(s->o->name, &s->rec, true) < 0)
    return -1;
  mig_test_hook("prepare");
  cleanup_free char *ready = NULL;
  if (mig_expect(s->fd, MIG_READY, &ready, NULL) < 0)
    return ct_wrap("prepare");
  char ms[32];
  if (mig_kv(ready, "attach_ms", ms, sizeof ms))
    s->r->ph.dest_attach = strtod(ms, NULL);
  if (mig_kv(ready, "acquire_ms", ms, sizeof ms))
    s->r->acquire_ms = strtod(ms, NULL);
  s->r->acquire_ahead = mig_kv(ready, "acquire", ms, sizeof ms) && strcmp(ms, "ahead") == 0;
  mig_test_hook("ready");
  /* A peer that hung up (or spoke out of turn) cannot take COMMIT: that is a
   * plain failure, not doubt. */
  struct pollfd pfd = {.fd = s->fd, .events = POLLIN | POLLRDHUP};
  if (poll(&pfd, 1, 0) != 0) {
    unsigned type;
    cleanup_free char *junk = NULL;
    if (mig_recv(s->fd, &type, &junk, NULL) == 0)
      ct_fail(0, "protocol error: %s before COMMIT", mig_type_name(type));
    return ct_wrap("before COMMIT");
  }
  s->r->ph.prepare = lap(&t);
  /* From here until the answer the outcome is not ours to know. */
  if (mig_send_text(s->fd, MIG_COMMIT, "") < 0)
    return CT_EXIT_IN_DOUBT;
  mig_test_hook("commit");
  cleanup_free char *ans = NULL;
  if (mig_expect(s->fd, MIG_COMMITTED, &ans, NULL) < 0)
    return CT_EXIT_IN_DOUBT;
  s->r->downtime_ms = ms_since(s->t_freeze);
  s->r->ph.commit = lap(&t);
  if (mig_kv(ans, "mount_ms", ms, sizeof ms))
    s->r->ph.dest_mount = strtod(ms, NULL);
  if (mig_kv(ans, "start_ms", ms, sizeof ms))
    s->r->ph.dest_start = strtod(ms, NULL);
  char state[32], err[512];
  static char why[600];
  uint64_t restored = 0;
  if (s->r->criu && (mig_kv_u64(ans, "restored", &restored) < 0 || !restored)) {
    s->r->criu = false;  /* CRIU failed there; it ran the command again */
    snprintf(why, sizeof why, "restore failed there: %s",
             mig_kv(ans, "criu_error", err, sizeof err) ? err : "no reason given");
    s->r->criu_why = why;
  }
  /* a cold copy (no command sent) is meant to arrive stopped */
  const char *want = s->ra.argc ? "running" : "stopped";
  if (mig_kv(ans, "state", state, sizeof state) && strcmp(state, want) == 0)
    return 0;
  ct_fail(0, "the destination took %s over but could not start it: %s", s->o->name,
          mig_kv(ans, "error", err, sizeof err) ? err : "no reason given");
  return 1;
}

static int check_can_migrate(struct src *s)
{
  const struct mig_opts *o = s->o;
  if (ct_require(o->name) < 0)
    return -1;
  s->shared = mig_shared_disk(s->diskdir, NULL, 0, NULL, 0);
  if (!s->shared && strcmp(disk_backend(s->diskdir), "ploop") != 0)
    return ct_usage("%s has a raw disk: migration streams ploop disks only", o->name);
  struct mig_record m;
  int have = mig_record_load(o->name, &m);
  if (have < 0)
    return -1;
  if (have) {
    ct_fail(0, "%s has a migration record (%s, %s): settle it with `migrate --resolve %s`", o->name,
            m.role, m.phase, o->name);
    ct_set_error_code(CT_EXIT_BUSY);
    return -1;
  }
  struct ct_state st;
  s->running = ct_state_load(o->name, &st) > 0 && ct_state_running(&st);
  if (cg_init(&s->cg, o->name) < 0)
    return -1;
  if (s->running) {
    bool frozen = false;
    if (cg_is_frozen(&s->cg, &frozen) == 0 && frozen)
      return ct_usage("%s is frozen: thaw it first (a migration freezes it itself)", o->name);
    int have_args = ct_runargs_load(o->name, &s->ra);
    if (have_args < 0)
      return -1;
    if (!have_args)
      return ct_fail(0, "%s was started without a record of its command (older version): restart it",
                     o->name);
  } else {
    cleanup_free char *mnt = ct_path(o->name, "rootfs");
    if (disk_is_mounted(mnt))
      return ct_usage("%s is stopped but its disk is mounted: umount it first", o->name);
    if (ct_runargs_load(o->name, &s->ra) < 0)
      return -1;
  }
  if (!s->running && !o->offline && s->ra.argc)
    ct_runargs_free(&s->ra);  /* cold copy: it stays stopped there */
  return 0;
}

/* A write that failed because the destination gave up: its ERROR message
 * (why: disk full, bad checksum...) is likely waiting unread; it is the
 * better reason to report. */
static void peer_reason(int fd)
{
  char ours[1200];
  snprintf(ours, sizeof ours, "%s", ct_error());
  if (strstr(ours, "peer: "))
    return;
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  unsigned t;
  char *msg = NULL;
  if (poll(&pfd, 1, 1000) == 1 && mig_recv(fd, &t, &msg, NULL) < 0 && strncmp(ct_error(), "peer: ", 6) == 0) {
    char theirs[1200];
    snprintf(theirs, sizeof theirs, "%s", ct_error() + 6);
    ct_fail(0, "the destination failed: %s", theirs);
  } else {
    ct_fail(0, "%s", ours);
  }
  free(msg);
}

/* Undoes our side after a failure before COMMIT. The error is kept. */
static void roll_back(struct src *s)
{
  char saved[1200];
  snprintf(saved, sizeof saved, "%s", ct_error());
  int code = ct_error_code();
  /* Never called once COMMIT was sent: a "committing" record (written at
   * PREPARE) goes back to a phase that --resolve aborts without asking,
   * should the abort below stop half-way. */
  if (s->rec.id[0] && strcmp(s->rec.phase, "committing") == 0) {
    snprintf(s->rec.phase, sizeof s->rec.phase, "aborting");
    mig_record_save(s->o->name, &s->rec, true);
  }
  if (s->rec.id[0] && mig_source_abort(s->o->name, &s->rec) < 0)
    fprintf(stderr, "ploop-container: rolling back %s: %s\n", s->o->name, ct_error());
  if (s->stopped_offline) {
    cleanup_close int lock = ct_lock(s->o->name);
    if (lock < 0 || mig_start(s->o->name, lock, &s->ra, false) < 0)
      fprintf(stderr, "ploop-container: restarting %s here: %s\n", s->o->name, ct_error());
  }
  ct_fail(0, "%s", saved);
  ct_set_error_code(code);
}

int migrate_source(const struct mig_opts *o, struct mig_result *r)
{
  memset(r, 0, sizeof *r);
  signal(SIGPIPE, SIG_IGN);  /* a dead peer is an error to roll back from, not our death */
  struct src s = {.o = o, .r = r, .fd = -1};
  s.t0 = now_ns();
  s.diskdir = ct_path(o->name, "disk");
  s.mnt = ct_path(o->name, "rootfs");
  int rc = -1;
  cleanup_close int mlock = -1;
  cleanup_free char *lockpath = ct_path(o->name, "migration.lock");
  if (check_can_migrate(&s) < 0)
    goto out;
  mlock = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (mlock < 0 || flock(mlock, LOCK_EX | LOCK_NB) < 0) {
    ct_fail(errno, "%s is being migrated already", o->name);
    ct_set_error_code(CT_EXIT_BUSY);
    goto out;
  }
  r->online = s.running && !o->offline;
  s.fd = mig_connect(o->dest, o->timeout_s);
  if (s.fd < 0)
    goto out;
  ploop_uuid_generate(s.rec.id);
  snprintf(s.rec.role, sizeof s.rec.role, "source");
  snprintf(s.rec.phase, sizeof s.rec.phase, "rounds");
  snprintf(s.rec.dest, sizeof s.rec.dest, "%s", o->dest);
  s.rec.auth = o->auth != NULL;
  if (hello(&s) < 0 || mig_record_save(o->name, &s.rec, true) < 0)
    goto fail;
  r->hello_ms = ms_since(s.t0);
  if (s.shared ? shared_handover(&s) < 0
               : r->online ? live_rounds(&s) < 0 || frozen_round(&s) < 0 : offline_round(&s) < 0)
    goto fail;
  uint64_t t_finish = now_ns();
  rc = commit(&s);
  if (rc < 0)
    goto fail;
  if (rc == CT_EXIT_IN_DOUBT) {
    char why[1024];
    snprintf(why, sizeof why, "%s", ct_error());
    ct_fail(0, "%s: in doubt: COMMIT was sent but the destination's answer was lost (%s); the "
               "container stays %s here: run `ploop-container migrate --resolve %s`",
            o->name, why, s.running && !o->offline ? "frozen" : "stopped", o->name);
    ct_set_error_code(CT_EXIT_IN_DOUBT);
    goto out;
  }
  /* Committed: the destination owns it now (rc 1: there, but stopped). */
  int keep = o->keep_source || rc == 1;
  char err[1200];
  snprintf(err, sizeof err, "%s", ct_error());
  if (mig_source_finish(o->name, keep) < 0) {
    fprintf(stderr, "ploop-container: %s moved, but cleaning up here failed: %s\n", o->name,
            ct_error());
  } else {
    /* nothing left here to be in doubt about: the destination may forget the migration */
    mig_send_text(s.fd, MIG_DONE, "");
  }
  if (rc == 1) {
    ct_fail(0, "%s", err);
    rc = -1;
    goto out;
  }
  r->finish_ms = ms_since(t_finish);
  r->total_ms = ms_since(s.t0);
  r->bytes_sent += mig_bytes_out;
  rc = 0;
  goto out;
fail:
  if (s.fd >= 0) {
    peer_reason(s.fd);
    mig_send_error(s.fd, ct_error());
    mig_close(s.fd);
    s.fd = -1;
  }
  ct_wrap("migrate %s to %s", o->name, o->dest);
  roll_back(&s);
  if (ct_error_code() == CT_EXIT_FAIL) { /* usage and not-found keep their codes */
    char why[1200];
    snprintf(why, sizeof why, "%s", ct_error());
    ct_fail(0, "%s; %s %s here", why, o->name, s.running ? "runs on" : "stays");
  }
  rc = -1;
out:
  if (s.images[0])
    mig_remove_tree(s.images);
  free(s.criu_bin);
  if (s.fd >= 0)
    mig_close(s.fd);
  r->total_ms = ms_since(s.t0);
  cg_free(&s.cg);
  ct_runargs_free(&s.ra);
  free(s.diskdir);
  free(s.mnt);
  return rc;
}
