/* ROOT/NAME/migration (see migrate.h): written durably before the source
 * sends COMMIT, so a crash or a cut link leaves a record saying that the
 * outcome is in doubt and which snapshots to merge back on abort. */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "migrate-proto.h"
#include "migrate.h"
#include "util.h"

int mig_record_save(const char *name, const struct mig_record *m, bool durable)
{
  char snaps[(MIG_MAX_ROUNDS + 2) * 40] = "";
  for (unsigned i = 0; i < m->n_snaps; i++) {
    size_t n = strlen(snaps);
    snprintf(snaps + n, sizeof snaps - n, "%s%s", i ? "," : "", m->snaps[i]);
  }
  cleanup_free char *s = xasprintf("id=%s\nrole=%s\nphase=%s\ndest=%s\nsnaps=%s\nwas_frozen=%d\nauth=%d\n",
                                   m->id, m->role, m->phase, m->dest, snaps, m->was_frozen, m->auth);
  cleanup_free char *path = ct_path(name, "migration");
  return write_file_atomic(path, s, strlen(s), durable);
}

int mig_record_load(const char *name, struct mig_record *m)
{
  memset(m, 0, sizeof *m);
  cleanup_free char *path = ct_path(name, "migration");
  if (access(path, F_OK) < 0)
    return 0;
  char text[8192], snaps[(MIG_MAX_ROUNDS + 2) * 40], b[8];
  if (read_file(path, text, sizeof text) < 0)
    return -1;
  mig_kv(text, "id", m->id, sizeof m->id);
  mig_kv(text, "role", m->role, sizeof m->role);
  mig_kv(text, "phase", m->phase, sizeof m->phase);
  mig_kv(text, "dest", m->dest, sizeof m->dest);
  if (mig_kv(text, "was_frozen", b, sizeof b))
    m->was_frozen = b[0] == '1';
  if (mig_kv(text, "auth", b, sizeof b))
    m->auth = b[0] == '1';
  if (mig_kv(text, "snaps", snaps, sizeof snaps)) {
    char *save = NULL;
    for (char *t = strtok_r(snaps, ",", &save); t && m->n_snaps < MIG_MAX_ROUNDS + 2;
         t = strtok_r(NULL, ",", &save))
      snprintf(m->snaps[m->n_snaps++], sizeof m->snaps[0], "%s", t);
  }
  if (!m->id[0] || !m->phase[0])
    return ct_fail(0, "%s: incomplete migration record", path);
  return 1;
}

void mig_record_remove(const char *name)
{
  cleanup_free char *path = ct_path(name, "migration");
  unlink(path);
}
