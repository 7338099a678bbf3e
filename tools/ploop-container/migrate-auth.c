/* The shared token of `--auth FILE` and its proofs (migrate-auth.h). */
#include "migrate-auth.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "util.h"

int mig_auth_load(const char *file, struct mig_auth *a)
{
  memset(a, 0, sizeof *a);
  cleanup_close int fd = open(file, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return ct_usage("--auth %s: %s", file, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return ct_usage("--auth %s: not a regular file", file);
  if (st.st_mode & 077)
    return ct_usage("--auth %s: readable by others (chmod 600 it)", file);
  ssize_t n = read(fd, a->key, sizeof a->key);
  if (n < 0)
    return ct_usage("--auth %s: %s", file, strerror(errno));
  if ((size_t)n == sizeof a->key)
    return ct_usage("--auth %s: token longer than %d bytes", file, MIG_AUTH_MAX - 1);
  while (n > 0 && (a->key[n - 1] == '\n' || a->key[n - 1] == '\r'))
    n--;
  if (n < MIG_AUTH_MIN)
    return ct_usage("--auth %s: token shorter than %d bytes", file, MIG_AUTH_MIN);
  a->len = (size_t)n;
  return 0;
}

void mig_auth_nonce(char out[MIG_NONCE_HEX + 1])
{
  unsigned char r[MIG_NONCE_HEX / 2];
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = getrandom(r + got, sizeof r - got, 0);
    if (n > 0)
      got += (size_t)n;
    else if (errno != EINTR)
      abort();
  }
  for (size_t i = 0; i < sizeof r; i++)
    sprintf(out + 2 * i, "%02x", r[i]);
}

void mig_auth_proof(const struct mig_auth *a, const char *label, const char *x, const char *y,
                    char out[MIG_PROOF_HEX + 1])
{
  struct hmac_sha256_ctx ctx;
  hmac_sha256_set_key(&ctx, a->len, a->key);
  hmac_sha256_update(&ctx, strlen(label), (const uint8_t *)label);
  hmac_sha256_update(&ctx, 1, (const uint8_t *)"\n");
  hmac_sha256_update(&ctx, strlen(x), (const uint8_t *)x);
  hmac_sha256_update(&ctx, 1, (const uint8_t *)"\n");
  hmac_sha256_update(&ctx, strlen(y), (const uint8_t *)y);
  uint8_t d[SHA256_DIGEST_SIZE];
  hmac_sha256_digest(&ctx, sizeof d, d);
  for (size_t i = 0; i < sizeof d; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

void mig_status_proof(const struct mig_auth *a, const char *nonce, const char *id, const char *state,
                      char out[MIG_PROOF_HEX + 1])
{
  char what[128];
  snprintf(what, sizeof what, "%s %s", id, state);
  mig_auth_proof(a, "ploop-container-migrate status", nonce, what, out);
}

bool mig_auth_equal(const char *p, const char *q)
{
  size_t n = strlen(p);
  if (n != strlen(q) || n != MIG_PROOF_HEX)
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned char)(p[i] ^ q[i]);
  return diff == 0;
}
