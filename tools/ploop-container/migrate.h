/* Live migration of a container between hosts: `migrate` (source),
 * `receive` (destination), `migrate --resolve` (the in-doubt case).
 * Protocol: formats/migration-protocol.md; policy and phases: README.md. */
#ifndef CT_MIGRATE_H
#define CT_MIGRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "migrate-auth.h"

/* Exit code of `migrate` when the outcome is unknown (see --resolve). */
#define CT_EXIT_IN_DOUBT 6
#define MIG_MAX_ROUNDS 64
#define MIG_DEFAULT_ROUNDS 8
#define MIG_DEFAULT_MIN_ROUND (4ull << 20)
#define MIG_DEFAULT_TIMEOUT 30

struct mig_opts {
  const char *name, *dest;
  bool offline, keep_source, no_criu;
  const char *criu_path;
  unsigned max_rounds;   /* rounds before the frozen one, round 0 included */
  uint64_t min_round;    /* a round under this many bytes is the last live one */
  unsigned timeout_s;    /* a silent peer for this long is a failure */
  const struct mig_auth *auth; /* --auth: the shared token (NULL: none) */
};

/* Where the downtime went, in ms (the frozen window, in order). The
 * destination's own share of prepare and commit comes back in READY and
 * COMMITTED (dest_*); the rest of those is the link and the messages. */
struct mig_phases {
  double freeze, sync, snapshot; /* cgroup freezer, syncfs, last snapshot (the daemon's) */
  double checkpoint;             /* CRIU dump (0 without) */
  double round;                  /* the last disk stream (and CRIU images), until its ack */
  double send;                   /* of which our ploop_send (open, read, write) */
  double dest_receive;           /* and the destination's receive */
  double prepare, dest_attach;   /* PREPARE..READY; the destination's mount (and attach, if not early) */
  double commit, dest_start;     /* COMMIT..COMMITTED; the destination's start/restore */
  double fsfreeze, release;      /* shared disk: FIFREEZE, the daemon's RELEASE */
  double dest_mount;             /* shared disk: the destination's mount after COMMIT (in dest_start) */
};

struct mig_result {
  uint64_t rounds[MIG_MAX_ROUNDS + 1]; /* bytes of each round, the frozen one last */
  unsigned n_rounds;
  uint64_t bytes_sent;  /* everything on the wire, both ways' payloads */
  double downtime_ms, total_ms;
  bool criu, online;
  uint64_t criu_bytes;      /* CRIU images sent (part of the frozen round) */
  const char *criu_why;     /* why the command was restarted instead (NULL: CRIU used or not asked) */
  const char *stop_reason;  /* why the live rounds ended */
  bool shared;              /* the disk is in shared storage: its lock moved, no bytes */
  double dest_pre_attach_ms; /* the destination's attach before the freeze (0: not done) */
  /* Where the total went (ms): checks, connect and HELLO..WELCOME; each
   * round from its syncfs and snapshot (the frozen one: from its ROUND
   * message) to its ack, of which our ploop_send and the destination's
   * receive; after the last round (and CRIU images) until the end:
   * PREPARE, COMMIT, the cleanup here. */
  double hello_ms, finish_ms;
  double round_ms[MIG_MAX_ROUNDS + 1], round_send_ms[MIG_MAX_ROUNDS + 1],
      round_receive_ms[MIG_MAX_ROUNDS + 1];
  double acquire_ms;        /* shared disk: the destination's ACQUIRE (its daemon's lock and open) */
  bool acquire_ahead;       /* which found the disk's top opened ahead */
  struct mig_phases ph;
};

/* Returns 0 (moved), CT_EXIT_IN_DOUBT (frozen, see --resolve), or -1 with
 * the error set (the container runs on here as before). */
int migrate_source(const struct mig_opts *o, struct mig_result *r);
/* DECISION 0: ask the destination; 1 / -1: the operator's --commit/--abort. */
struct mig_auth;
int migrate_resolve(const char *name, const char *dest_override, int decision, unsigned timeout_s,
                    const struct mig_auth *auth);
/* Serves migrations (ONCE: one, then returns its result). */
int migrate_receive(const char *listen_addr, bool once, unsigned timeout_s, const struct mig_auth *auth);
/* Removes what receivers that died left half-received under ct_root. */
int migrate_recover_incoming(bool verbose);

/* ROOT/NAME/migration: the durable record of a migration in progress. */
struct mig_record {
  char id[40];
  char role[8];        /* "source" or "dest" */
  char phase[16];      /* source: rounds, committing (PREPARE sent), aborting; dest: receiving, ready, committed */
  char dest[256];      /* source: where to */
  char snaps[MIG_MAX_ROUNDS + 2][40]; /* source: temporary snapshots, oldest first */
  unsigned n_snaps;
  bool was_frozen;     /* source: frozen (final round) when recorded */
  bool auth;           /* source: made with --auth (a --resolve must give it too) */
};
int mig_record_save(const char *name, const struct mig_record *m, bool durable);
/* 1 read, 0 none, -1 error. */
int mig_record_load(const char *name, struct mig_record *m);
void mig_record_remove(const char *name);

/* Source helpers shared by migrate and --resolve. */
/* Merges the temporary snapshots back (online through the daemon when the
 * disk is served), thaws, removes the record. */
int mig_source_abort(const char *name, const struct mig_record *m);
/* The destination runs it: kill the frozen copy without letting it run,
 * wait for its monitor, destroy (or keep stopped). */
int mig_source_finish(const char *name, bool keep);

#endif
