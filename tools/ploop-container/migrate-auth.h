/* Shared-token authentication of a migration (`--auth FILE` on both
 * sides): HMAC-SHA256 proofs over fresh nonces, checked by the destination
 * before it creates anything and by the source before it sends any data. */
#ifndef CT_MIGRATE_AUTH_H
#define CT_MIGRATE_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define MIG_AUTH_MIN 16    /* bytes of token at least */
#define MIG_AUTH_MAX 4096
#define MIG_NONCE_HEX 32   /* 16 random bytes */
#define MIG_PROOF_HEX 64   /* HMAC-SHA256 */

struct mig_auth {
  unsigned char key[MIG_AUTH_MAX];
  size_t len;
};

/* Reads the token of FILE (trailing newlines dropped); one-line error when
 * it cannot be read, is too short, or others may read it. */
int mig_auth_load(const char *file, struct mig_auth *a);
void mig_auth_nonce(char out[MIG_NONCE_HEX + 1]);
/* HMAC(key, LABEL "\n" A "\n" B) in hex. */
void mig_auth_proof(const struct mig_auth *a, const char *label, const char *x, const char *y,
                    char out[MIG_PROOF_HEX + 1]);
/* The destination's proof on its answer to a --resolve query: bound to the
 * querier's nonce, the migration and the state it reports. */
void mig_status_proof(const struct mig_auth *a, const char *nonce, const char *id, const char *state,
                      char out[MIG_PROOF_HEX + 1]);
/* Constant-time comparison of two proofs. */
bool mig_auth_equal(const char *p, const char *q);

#endif
