/* The rbd backend of a container's disk (disk.h): a ploop disk kept in a
 * Ceph pool (rbd:POOL/NAME[?conf=PATH]) and attached as a local one is
 * (ploop-nbd, FUSE file, loop, ext4). The container's disk directory holds
 * only DISK_RBD_FILE, the disk's name; librbd's exclusive lock, held by the
 * daemon while it serves, keeps a second host from writing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "attach.h"
#include "disk.h"
#include "error.h"
#include "libploop.h"
#include "util.h"

#define DISK_RBD_FILE "rbd"

static int rbd_failed(const char *what)
{
  return ct_fail(0, "%s: %s", what, ploop_get_error());
}

bool disk_rbd_name(const char *dir, char *name, size_t len)
{
  cleanup_free char *p = xasprintf("%s/" DISK_RBD_FILE, dir);
  char buf[1024];
  if (access(p, F_OK) < 0 || read_file(p, buf, sizeof buf) < 0)
    return false;
  buf[strcspn(buf, "\n")] = 0;
  if (strncmp(buf, "rbd:", 4) != 0)
    return false;
  if (name)
    snprintf(name, len, "%s", buf);
  return true;
}

int disk_rbd_check_name(const char *rbd)
{
  const char *p = rbd + 4, *slash = strchr(p, '/'), *q = strchr(p, '?');
  size_t end = q ? (size_t)(q - p) : strlen(p);
  if (strncmp(rbd, "rbd:", 4) != 0 || !slash || slash == p || (size_t)(slash - p) + 1 >= end ||
      memchr(slash + 1, '/', end - (size_t)(slash - p) - 1) || strchr(rbd, '\n') || strlen(rbd) >= 900 ||
      (q && (strncmp(q, "?conf=", 6) != 0 || !q[6])))
    return ct_usage("--disk %s: expected rbd:POOL/NAME[?conf=PATH]", rbd);
  return 0;
}

int disk_rbd_set_name(const char *dir, const char *rbd)
{
  cleanup_free char *p = xasprintf("%s/" DISK_RBD_FILE, dir);
  cleanup_free char *txt = xasprintf("%s\n", rbd);
  return write_file_atomic(p, txt, strlen(txt), true);
}

int disk_rbd_create(const char *dir, const char *rbd, uint64_t bytes, bool *made)
{
  *made = false;
  if (disk_rbd_check_name(rbd) < 0)
    return -1;
  /* An existing disk is taken as it is (destroy leaves it); a new one is
   * made thin at BYTES with an ext4 inside. */
  struct ploop_descriptor *d = ploop_descriptor_load(rbd);
  if (d) {
    ploop_descriptor_free(d);
    /* a bare disk (ploop init without -t) gets its ext4; a filesystem stays */
    struct ploop_attach_info ai;
    if (ploop_attach_mount(rbd, NULL, &ai) < 0)
      return rbd_failed("attach rbd disk");
    char type[32];
    int rc = 0;
    if (ploop_fs_probe(ai.device, type, sizeof type) < 0)
      rc = ploop_get_status() == PLOOP_ERR_NOTFOUND && ploop_fs_make(ai.device, "ext4") == 0
               ? 0
               : rbd_failed(rbd);
    if (ploop_attach_umount(rbd) < 0 && rc == 0)
      rc = rbd_failed("detach rbd disk");
    if (rc < 0)
      return -1;
  } else if (ploop_get_status() != PLOOP_ERR_NOTFOUND) {
    return rbd_failed(rbd);
  } else {
    struct ploop_delta_create_params p = {.size_bytes = bytes};
    if (ploop_disk_create(rbd, &p) < 0)
      return rbd_failed("create rbd disk");
    *made = true;
    if (ploop_attach_format(rbd, "ext4") < 0) {
      rbd_failed("make ext4 on the rbd disk");
      ploop_rbd_disk_remove(rbd);
      *made = false;
      return -1;
    }
  }
  if (disk_rbd_set_name(dir, rbd) < 0) {
    if (*made)
      ploop_rbd_disk_remove(rbd);
    *made = false;
    return -1;
  }
  return 0;
}

int disk_rbd_remove(const char *rbd)
{
  return ploop_rbd_disk_remove(rbd) < 0 ? rbd_failed("remove the rbd disk") : 0;
}

int disk_rbd_mount(const char *dir, const char *snapshot, const char *mnt)
{
  char rbd[1024];
  if (!disk_rbd_name(dir, rbd, sizeof rbd))
    return ct_fail(0, "%s: no rbd disk named there", dir);
  struct ploop_attach_opts o = {.readonly = snapshot != NULL,
                                .snapshot_guid = snapshot,
                                .mount_point = mnt,
                                .fstype = "ext4",
                                .mount_flags = MS_NODEV};
  /* Attached already without a mount (a migration's standby, acquired):
   * only the filesystem is left to mount. */
  struct ploop_attach_info ai;
  if (!snapshot && ploop_attach_find(rbd, &ai) == 0 && ai.daemon_alive && !ai.mount_point[0] &&
      !ai.snapshot_guid[0])
    return ploop_attach_mount_fs(rbd, &o) < 0 ? rbd_failed("mount the rbd disk") : 0;
  struct ploop_attach_info info;
  if (ploop_attach_mount(rbd, &o, &info) < 0)
    return rbd_failed(snapshot ? "mount snapshot" : "attach rbd disk");
  return 0;
}

/* The other verbs take the disk's name where a local disk has its directory. */
const char *disk_rbd_where(const char *dir, char *buf, size_t len)
{
  return disk_rbd_name(dir, buf, len) ? buf : dir;
}
