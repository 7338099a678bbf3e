/* The Ceph RBD store: not in this build yet. */
#include "internal.h"
#include "store.h"

static int rbd_unsupported(const char *what)
{
  return ploop_error(PLOOP_ERR_PARAM, EOPNOTSUPP, "%s: RBD disks are not supported by this build", what);
}
static int no_open(struct store_obj *o, const char *dir, const char *path, bool rdwr)
{
  (void)o, (void)dir, (void)rdwr;
  return rbd_unsupported(path);
}
static int no_create(struct store_obj *o, const char *dir, const char *path)
{
  (void)o, (void)dir;
  return rbd_unsupported(path);
}
static int no_resolve(const char *dir_or_xml, char **dir, char **xml)
{
  (void)dir, (void)xml;
  return rbd_unsupported(dir_or_xml);
}
static int no_lock(const char *dir, unsigned what)
{
  (void)what;
  return rbd_unsupported(dir);
}
static void no_unlock(int handle)
{
  (void)handle;
}
const struct store_ops store_rbd_ops = {
    .name = "rbd", .open = no_open, .create = no_create, .resolve = no_resolve, .lock = no_lock, .unlock = no_unlock};
