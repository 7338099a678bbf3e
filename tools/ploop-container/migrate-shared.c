/* Migration without a disk copy (migrate-shared.h): the disk is in a pool
 * both hosts see, so only its lock moves, through the serving daemons'
 * RELEASE and ACQUIRE control commands (ploop_disk_release/acquire). */
#include "migrate-shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "config.h"
#include "control.h"
#include "disk.h"
#include "error.h"
#include "fs-freeze.h"
#include "libploop.h"
#include "migrate-proto.h"
#include "util.h"

bool mig_shared_disk(const char *diskdir, char *local, size_t llen, char *wire, size_t wlen)
{
  char name[1024];
  if (!disk_rbd_name(diskdir, name, sizeof name))
    return false;
  if (local)
    snprintf(local, llen, "%s", name);
  if (wire) /* each host names the pool with its own Ceph configuration */
    snprintf(wire, wlen, "%.*s", (int)strcspn(name, "?"), name);
  return true;
}

char *mig_shared_hello(const char *name, const char *diskdir)
{
  char wire[1024], made[8] = "0";
  if (!mig_shared_disk(diskdir, NULL, 0, wire, sizeof wire))
    return xasprintf("%s", "");
  ct_kv_get(name, "config", "disk_created", made, sizeof made);
  cleanup_free char *hex = mig_hex(wire);
  return xasprintf("shared_disk=%s\ndisk_created=%d\n", hex, strcmp(made, "1") == 0);
}

static double ms_since(uint64_t t)
{
  return (double)(now_ns() - t) / 1e6;
}

static int ctl(const char *disk, const char *cmd)
{
  char reply[256];
  if (ploop_ctl_command(disk, cmd, reply, sizeof reply) < 0)
    return ct_fail(0, "%s %s: %s", cmd, disk, ploop_ctl_error());
  return 0;
}

int mig_shared_release(const char *diskdir, const char *mnt, double *fsfreeze_ms, double *release_ms)
{
  char local[1024];
  if (!mig_shared_disk(diskdir, local, sizeof local, NULL, 0))
    return ct_fail(0, "%s: not a shared disk", diskdir);
  uint64_t t = now_ns();
  /* Frozen, the filesystem writes nothing until thawed: the disk can be
   * let go under it and taken back after a rollback as if nothing happened. */
  if (ploop_fs_freeze(mnt) < 0)
    return ct_fail(0, "%s", ploop_get_error());
  *fsfreeze_ms = ms_since(t);
  t = now_ns();
  if (ctl(local, "RELEASE") < 0) {
    ploop_fs_thaw(mnt);
    return -1;
  }
  *release_ms = ms_since(t);
  return 0;
}

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int mig_shared_resume(const char *name)
{
  cleanup_free char *diskdir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  char local[1024];
  struct ploop_attach_info ai;
  if (!mig_shared_disk(diskdir, local, sizeof local, NULL, 0) || ploop_attach_find(local, &ai) < 0 ||
      !ai.daemon_alive)
    return 0; /* not served here: nothing was released */
  int rc = -1;
  for (int i = 0; i < 30 && rc < 0; i++) {
    if (i)
      sleep_ms(100);
    rc = ctl(local, "ACQUIRE");
  }
  if (rc < 0) {
    /* The destination never got COMMIT (or was told it failed), so it runs
     * nothing: fence whatever holds the disk there, then take it back. */
    char holder[256];
    if (ploop_rbd_lock_break(local, holder, sizeof holder) < 0)
      return ct_fail(0, "take %s back: %s", local, ploop_get_error());
    fprintf(stderr, "ploop-container: %s: fenced %s, which held the disk after the migration failed\n", name,
            holder[0] ? holder : "a stale holder");
    if (ctl(local, "ACQUIRE DIRTY") < 0)
      return ct_wrap("take %s back", local);
  }
  ploop_fs_thaw(mnt); /* not frozen (EINVAL) is no error */
  return 0;
}

void mig_shared_finish(const char *name)
{
  cleanup_free char *diskdir = ct_path(name, "disk");
  if (!mig_shared_disk(diskdir, NULL, 0, NULL, 0))
    return;
  cleanup_free char *mnt = ct_path(name, "rootfs");
  ploop_fs_thaw(mnt);
  const char *kv[] = {"disk_created=0"};
  ct_kv_set(name, "config", kv, 1, true);
}

int mig_shared_dest_standby(const char *diskdir, const char *hello)
{
  char hex[2100];
  if (!mig_kv(hello, "shared_disk", hex, sizeof hex))
    return 0;
  cleanup_free char *wire = mig_unhex(hex);
  if (!wire || strchr(wire, '?') || disk_rbd_check_name(wire) < 0)
    return ct_fail(0, "protocol error: bad shared_disk");
  const char *conf = getenv("CEPH_CONF");
  cleanup_free char *local = conf && conf[0] ? xasprintf("%s?conf=%s", wire, conf) : xasprintf("%s", wire);
  if ((mkdir(diskdir, 0700) < 0 && errno != EEXIST) || disk_rbd_set_name(diskdir, local) < 0)
    return ct_fail(errno, "mkdir %s", diskdir);
  /* The daemon, its FUSE file and loop device come up now, while the
   * source still runs: the frozen window only sees ACQUIRE and a mount. */
  struct ploop_attach_opts o = {.standby = true};
  struct ploop_attach_info ai;
  if (ploop_attach_mount(local, &o, &ai) < 0)
    return ct_fail(0, "the shared disk %s: %s", local, ploop_get_error());
  return 1;
}

int mig_shared_dest_acquire(const char *diskdir, double *ms, bool *ahead)
{
  char local[1024], reply[256];
  if (!mig_shared_disk(diskdir, local, sizeof local, NULL, 0))
    return ct_fail(0, "protocol error: HANDOVER without a shared disk");
  uint64_t t = now_ns();
  if (ploop_ctl_command(local, "ACQUIRE", reply, sizeof reply) < 0)
    return ct_fail(0, "ACQUIRE %s: %s", local, ploop_ctl_error());
  *ms = ms_since(t);
  *ahead = strcmp(reply, "ahead") == 0;
  return 0;
}

int mig_shared_dest_config(const char *name, const char *diskdir, const char *hello_created)
{
  char local[1024];
  if (!mig_shared_disk(diskdir, local, sizeof local, NULL, 0))
    return 0;
  cleanup_free char *k1 = xasprintf("disk=%s", local);
  /* the right to remove the disk moves with the container */
  const char *kv[] = {k1, strcmp(hello_created, "1") == 0 ? "disk_created=1" : "disk_created=0"};
  return ct_kv_set(name, "config", kv, 2, true);
}

void mig_shared_dest_discard(const char *diskdir)
{
  char local[1024];
  struct ploop_attach_info ai;
  if (mig_shared_disk(diskdir, local, sizeof local, NULL, 0) && ploop_attach_find(local, &ai) == 0 &&
      ploop_attach_umount(local) < 0)
    fprintf(stderr, "ploop-container: detach %s: %s\n", local, ploop_get_error());
}
