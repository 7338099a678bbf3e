/* The two ends of a migration on the source, and `migrate --resolve`:
 * abort (thaw, merge the temporary snapshots back, run on) or finish (the
 * destination runs it: end the frozen copy without letting it run again). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "container.h"
#include "control.h"
#include "error.h"
#include "libploop.h"
#include "migrate-auth.h"
#include "migrate-internal.h"
#include "migrate-proto.h"
#include "migrate-shared.h"
#include "util.h"

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* The GUID of the delta right above snapshot G (another snapshot or the
 * top); "" when G is no longer in the descriptor. */
static int child_of(const char *diskdir, const char *g, char *child, size_t len)
{
  child[0] = 0;
  struct ploop_descriptor *d = ploop_descriptor_load(diskdir);
  if (!d)
    return ct_fail(0, "%s", ploop_get_error());
  bool present = false;
  for (size_t i = 0; i < d->n_snapshots; i++) {
    if (!strcmp(d->snapshots[i].guid, g))
      present = true;
    if (!strcmp(d->snapshots[i].parent, g))
      snprintf(child, len, "%s", d->snapshots[i].guid);
  }
  ploop_descriptor_free(d);
  if (present && !child[0])
    return ct_fail(0, "snapshot %s has nothing above it", g);
  if (!present)
    child[0] = 0;
  return 0;
}

/* Merging the child of each temporary snapshot into it removes the
 * snapshot's name and keeps every state above (and any snapshot the user
 * had below) as it was. Online through the daemon when the disk is served. */
int mig_merge_back(const char *name, const struct mig_record *m)
{
  cleanup_free char *diskdir = ct_path(name, "disk");
  for (unsigned i = 0; i < m->n_snaps; i++) {
    char child[PLOOP_UUID_LEN + 1];
    if (child_of(diskdir, m->snaps[i], child, sizeof child) < 0)
      return -1;
    if (!child[0])
      continue;  /* merged by an earlier, interrupted abort */
    int cfd = ploop_ctl_connect(diskdir);
    if (cfd >= 0) {
      close(cfd);
      if (ploop_ctl_merge(diskdir, child, false) < 0)
        return ct_fail(0, "merge back snapshot %s: %s", m->snaps[i], ploop_ctl_error());
    } else if (errno == ENOENT) {
      if (ploop_snapshot_merge(diskdir, child, false, NULL, NULL) < 0)
        return ct_fail(0, "merge back snapshot %s: %s", m->snaps[i], ploop_get_error());
    } else {
      return ct_fail(0, "merge back snapshot %s: %s", m->snaps[i], ploop_ctl_error());
    }
  }
  return 0;
}

int mig_source_abort(const char *name, const struct mig_record *m)
{
  struct ct_state st;
  int rc = 0;
  if (mig_shared_resume(name) < 0) /* the disk back before the processes run */
    return -1;
  if (ct_state_load(name, &st) > 0 && ct_state_running(&st)) {
    struct ct_cgroup cg;
    if (cg_init(&cg, name) == 0) {
      bool frozen = false;
      if (cg_is_frozen(&cg, &frozen) == 0 && frozen && cg_freeze(&cg, false) < 0)
        rc = ct_wrap("thaw %s", name);
      cg_free(&cg);
    }
  }
  if (mig_merge_back(name, m) < 0)
    return -1;
  if (rc == 0)
    mig_record_remove(name);
  return rc;
}

int mig_source_finish(const char *name, bool keep)
{
  struct ct_state st;
  mig_shared_finish(name);
  if (ct_state_load(name, &st) > 0 && ct_state_running(&st)) {
    struct ct_cgroup cg;
    if (cg_init(&cg, name) < 0)
      return -1;
    /* SIGKILL while frozen, then thaw: a thawed task with SIGKILL pending
     * dies on its way back to user space, so not one instruction of the
     * old copy runs after the new one started. */
    cg_kill_all(&cg);
    cg_freeze(&cg, false);
    cg_free(&cg);
    for (int i = 0; i < 500 && ct_state_running(&st); i++)
      sleep_ms(10);
    cleanup_free char *lockpath = ct_path(name, "lock");
    cleanup_close int fd = open(lockpath, O_RDWR | O_CLOEXEC);
    int locked = -1;
    for (int i = 0; fd >= 0 && i < 3000 && (locked = flock(fd, LOCK_EX | LOCK_NB)) < 0; i++)
      sleep_ms(10);
    if (locked < 0)
      return ct_fail(0, "%s: its monitor did not finish cleaning up", name);
    close(fd);
    fd = -1;
    if (container_recover(name) < 0)
      return -1;
  }
  mig_record_remove(name);
  if (keep)
    return 0;
  return container_destroy(name);
}

static bool answer_proven(const struct mig_auth *auth, const char *nonce, const char *id, const char *state,
                          const char *ans)
{
  char proof[MIG_PROOF_HEX + 1], want[MIG_PROOF_HEX + 1];
  mig_status_proof(auth, nonce, id, state, want);
  return mig_kv(ans, "proof", proof, sizeof proof) && mig_auth_equal(proof, want);
}

/* Asks the destination what became of migration M. Returns 1 committed,
 * 0 not (and never will be), 2 still pending there, -1 unreachable, -2 an
 * answer without the destination's --auth proof. */
static int ask(const char *name, const struct mig_record *m, const char *dest, unsigned timeout_s,
               const struct mig_auth *auth)
{
  int fd = mig_connect(dest, timeout_s);
  if (fd < 0)
    return -1;
  /* With --auth the answer carries a proof over our fresh nonce: a host
   * that merely answers at DEST cannot make us end our copy. */
  char cn[MIG_NONCE_HEX + 1] = "", qp[MIG_PROOF_HEX + 1] = "";
  if (auth) {
    mig_auth_nonce(cn);
    mig_auth_proof(auth, "ploop-container-migrate query", cn, m->id, qp);
  }
  cleanup_free char *q = xasprintf("id=%s\nname=%s\nnonce=%s\nproof=%s\n", m->id, name, cn, qp);
  cleanup_free char *ans = NULL;
  int rc = -1;
  char state[32];
  if (mig_send_text(fd, MIG_QUERY, q) == 0 && mig_expect(fd, MIG_STATUS, &ans, NULL) == 0) {
    if (!mig_kv(ans, "state", state, sizeof state)) {
      rc = ct_fail(0, "protocol error: STATUS without state");
    } else if (auth && !answer_proven(auth, cn, m->id, state, ans)) {
      ct_fail(0, "the destination failed authentication (its --auth token differs)");
      rc = -2;
    } else if (!strcmp(state, "committed")) {
      rc = 1;
    } else if (!strcmp(state, "unknown")) {
      rc = 0;
    } else if (!strcmp(state, "pending")) {
      rc = 2;
    } else {
      rc = ct_fail(0, "protocol error: state=%s", state);
    }
  }
  mig_close(fd);
  return rc;
}

int migrate_resolve(const char *name, const char *dest_override, int decision, unsigned timeout_s,
                    const struct mig_auth *auth)
{
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *lockpath = ct_path(name, "migration.lock");
  cleanup_close int mlock = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (mlock < 0 || flock(mlock, LOCK_EX | LOCK_NB) < 0) {
    ct_fail(0, "%s is being migrated right now", name);
    ct_set_error_code(CT_EXIT_BUSY);
    return -1;
  }
  struct mig_record m;
  int have = mig_record_load(name, &m);
  if (have < 0)
    return -1;
  if (!have) {
    printf("%s: no migration to resolve\n", name);
    return 0;
  }
  /* a source that died left its CRIU dump (if any) on tmpfs: either way
   * it is of no use any more (the destination has its own copy) */
  char images[128];
  snprintf(images, sizeof images, "/dev/shm/ploop-container-migrate.%s", m.id);
  if (strcmp(m.role, "source") == 0 && !strchr(m.id, '/'))
    mig_remove_tree(images);
  if (strcmp(m.role, "source") != 0)
    return ct_usage("%s: this host is the destination of its migration (%s); resolve on the source",
                    name, m.phase);
  /* Before COMMIT was sent the destination cannot have it: abort. */
  if (strcmp(m.phase, "committing") != 0) {
    if (mig_source_abort(name, &m) < 0)
      return -1;
    printf("%s: aborted (COMMIT was never sent); running here\n", name);
    return 0;
  }
  const char *dest = dest_override ? dest_override : m.dest;
  int outcome = decision;
  if (decision == 0 && m.auth && !auth)
    return ct_usage("%s was migrated with --auth: give --auth FILE to ask %s, or decide with --commit or --abort",
                    name, dest);
  if (decision == 0) {
    int a = ask(name, &m, dest, timeout_s, auth);
    if (a == -2)
      return -1;
    if (a < 0) {
      char why[512];
      snprintf(why, sizeof why, "%s", ct_error());
      return ct_fail(0, "%s is in doubt and %s cannot be asked (%s): decide with --commit (it runs "
                        "there) or --abort (it does not)", name, dest, why);
    }
    if (a == 2) {
      ct_fail(0, "%s: the destination has not decided yet; try again", name);
      ct_set_error_code(CT_EXIT_IN_DOUBT);
      return -1;
    }
    outcome = a == 1 ? 1 : -1;
  }
  if (outcome > 0) {
    if (mig_source_finish(name, false) < 0)
      return -1;
    printf("%s: committed: it runs on %s; removed here\n", name, dest);
  } else {
    if (mig_source_abort(name, &m) < 0)
      return -1;
    printf("%s: aborted: running here\n", name);
  }
  return 0;
}
