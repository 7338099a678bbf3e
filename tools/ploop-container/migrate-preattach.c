/* Early attach on a migration's destination (see migrate-preattach.h).
 * Why the top may take the later rounds' clusters by plain writes: after
 * round 0 the disk is the received snapshots with an empty top, so the
 * device reads as round 0's snapshot, the base of round 1's stream, and
 * after each round as that round's state, the base of the next; nothing
 * mounts it before the frozen round is in, so no page cache holds old
 * blocks, and the device is written with O_DIRECT. A
 * failure anywhere leaves only what discard() removes with the rest. */
#include "migrate-preattach.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "attach.h"
#include "error.h"
#include "util.h"

bool mig_preattach_offered(void)
{
  const char *e = getenv("PLOOP_MIGRATE_PREATTACH");
  return !e || strcmp(e, "0") != 0;
}

/* Writes through the device that the daemon could not place (its
 * filesystem full) reach ext4 as plain I/O errors: a mount that replays
 * the journal says "Input/output error". Name the likely cause. Free
 * blocks as the daemon sees them: ext4's reserved blocks are only for a
 * process with CAP_SYS_RESOURCE, which root need not have (f_bavail). */
static const char *space_hint(const char *diskdir)
{
  struct statvfs v;
  if (statvfs(diskdir, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < (2u << 20))
    return " (no space left on the destination's filesystem)";
  return "";
}

int mig_preattach_attach(struct mig_preattach *pa, const char *diskdir)
{
  uint64_t t0 = now_ns();
  struct ploop_attach_opts o = {.fstype = "ext4"};
  struct ploop_attach_info info;
  if (ploop_attach_mount(diskdir, &o, &info) < 0)
    return ct_fail(0, "attach the disk early: %s", ploop_get_error());
  pa->attached = true;
  snprintf(pa->device, sizeof pa->device, "%s", info.device);
  snprintf(pa->diskdir, sizeof pa->diskdir, "%s", diskdir);
  pa->dev = open(info.device, O_RDWR | O_DIRECT | O_CLOEXEC);
  if (pa->dev < 0) {
    int e = errno;
    ploop_attach_umount(diskdir);
    pa->attached = false;
    return ct_fail(e, "attach the disk early: open %s", info.device);
  }
  pa->attach_ms = (double)(now_ns() - t0) / 1e6;
  return 0;
}

int mig_preattach_receive(struct mig_preattach *pa, const char *base, int fd, struct ploop_stream_stats *st,
                          char *got, bool final)
{
  if (pa->dev < 0)
    return ct_fail(0, "protocol error: a round after the frozen one");
  int rc = ploop_receive_device(pa->dev, base, NULL, fd, st, got);
  /* no longer needed: a loop device with an open fd is not released */
  if (rc < 0 || final)
    mig_preattach_close(pa);
  return rc < 0 ? ct_fail(0, "%s: %s%s", pa->device, ploop_get_error(), space_hint(pa->diskdir)) : 0;
}

int mig_preattach_mount(struct mig_preattach *pa, const char *mnt)
{
  struct ploop_attach_opts o = {.mount_point = mnt, .fstype = "ext4", .mount_flags = MS_NODEV};
  if (ploop_attach_mount_fs(pa->device, &o) < 0)
    return ct_fail(0, "%s%s", ploop_get_error(), space_hint(pa->diskdir));
  return 0;
}

void mig_preattach_close(struct mig_preattach *pa)
{
  if (pa->dev >= 0)
    close(pa->dev);
  pa->dev = -1;
}
