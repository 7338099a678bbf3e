/* What a container's processes may do: capabilities (a Docker-like default
 * set, --cap-add/--cap-drop), a seccomp filter denying what containers
 * should not do (as runc's and Docker's default profile), --read-only root.
 * Applied to PID 1 and to every `exec`. */
#ifndef CT_SECURITY_H
#define CT_SECURITY_H

#include <stdbool.h>
#include <stdint.h>

struct ct_sec {
  uint64_t cap_add, cap_drop;  /* bit N = capability N */
  bool unconfined;             /* --seccomp unconfined: no filter */
  bool readonly;               /* --read-only root filesystem */
  bool userns;                 /* the filter lets the container make user namespaces */
  bool user_set;               /* become UID:GID (exec --user); non-root has no capabilities */
  uint32_t uid, gid;
};

#define CT_SEC_LONGOPTS                                                         \
  {"cap-add", required_argument, NULL, 0x120},                                  \
      {"cap-drop", required_argument, NULL, 0x121},                             \
      {"seccomp", required_argument, NULL, 0x122},                              \
      {"read-only", no_argument, NULL, 0x123}

/* Handles option OPT of getopt_long: 1 ours, 0 not, -1 bad value (usage). */
int ct_sec_opt(int opt, const char *arg, struct ct_sec *s);
/* The capability set the container gets. */
uint64_t ct_sec_caps(const struct ct_sec *s);
/* Saves/loads the fields in ROOT/NAME/FILE (state: so `exec` applies the same). */
/* S as "key=value" strings (malloc'd), the keys ct_sec_save writes; and
 * back, one key at a time: 1 ours, 0 not, -1 bad value (usage error). */
#define CT_SEC_KV 4
void ct_sec_kv(const struct ct_sec *s, char *kv[CT_SEC_KV]);
int ct_sec_set_key(struct ct_sec *s, const char *key, const char *value);
int ct_sec_save(const char *name, const char *file, const struct ct_sec *s);
int ct_sec_load(const char *name, const char *file, struct ct_sec *s);

/* Bounding, permitted and effective sets cut to ct_sec_caps(); inheritable
 * and ambient sets cleared (CVE-2022-24769); no_new_privs; then the seccomp
 * filter. The last thing before execve. */
int ct_drop_privileges(const struct ct_sec *s);

#endif
