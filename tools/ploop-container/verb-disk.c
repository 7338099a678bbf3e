/* The disk's verbs: `snapshot`, `snapshot-list`, `snapshot-delete`,
 * `rollback` and `resize`. A snapshot is taken live; delete and rollback
 * need the disk at rest (container stopped, disk not kept mounted); resize
 * grows a mounted disk live and grows or shrinks one at rest. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "container.h"
#include "disk.h"
#include "error.h"
#include "util.h"
#include "verbs.h"

/* Parses "NAME [ARG] [--json]": NARGS positional arguments into POS. */
static int parse(int argc, char **argv, int nargs, const char **pos, bool *json, const char *usage)
{
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  int c;
  *json = false;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c != 'j')
      return ct_usage("%s: bad option '%s' (see --help)", argv[0], argv[optind - 1]);
    *json = true;
  }
  if (argc - optind != nargs)
    return ct_usage("usage: %s", usage);
  for (int i = 0; i < nargs; i++)
    pos[i] = argv[optind + i];
  return 0;
}

int verb_snapshot(int argc, char **argv)
{
  const char *name;
  bool json;
  if (parse(argc, argv, 1, &name, &json, "snapshot NAME [--json]") < 0)
    return -1;
  char id[DISK_SNAPSHOT_ID_MAX];
  if (container_snapshot(name, id, sizeof id) < 0)
    return -1;
  if (json) {
    printf("{\"name\": ");
    json_string(stdout, name);
    printf(", \"snapshot\": ");
    json_string(stdout, id);
    printf("}\n");
  } else {
    printf("%s\n", id);
  }
  return 0;
}

int verb_snapshot_list(int argc, char **argv)
{
  const char *name;
  bool json;
  if (parse(argc, argv, 1, &name, &json, "snapshot-list NAME [--json]") < 0)
    return -1;
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *dir = ct_path(name, "disk");
  struct disk_snapshot_info *v;
  size_t n;
  if (disk_snapshot_list(dir, &v, &n) < 0)
    return ct_wrap("snapshot-list %s", name);
  if (json)
    printf("[");
  else
    printf("%-40s %-40s %10s %s\n", "ID", "PARENT", "SIZE", "FILE");
  for (size_t i = 0; i < n; i++) {
    if (json) {
      printf("%s{\"id\": ", i ? ", " : "");
      json_string(stdout, v[i].id);
      printf(", \"parent\": ");
      json_string(stdout, v[i].parent);
      printf(", \"file\": ");
      json_string(stdout, v[i].file);
      printf(", \"bytes\": %" PRIu64 "}", v[i].bytes);
    } else {
      char size[16];
      format_size(v[i].bytes, size, sizeof size);
      printf("%-40s %-40s %10s %s\n", v[i].id, v[i].parent[0] ? v[i].parent : "-", size, v[i].file);
    }
  }
  if (json)
    printf("]\n");
  free(v);
  return 0;
}

/* The container stopped and its disk not mounted: returns the lock. */
static int at_rest(const char *name, const char *what)
{
  if (ct_require(name) < 0)
    return -1;
  int lock = ct_lock(name);
  if (lock < 0)
    return ct_wrap("%s %s", what, name);
  cleanup_free char *mnt = ct_path(name, "rootfs");
  if (disk_is_mounted(mnt)) {
    close(lock);
    return ct_state_fail(CT_EXIT_BUSY, "%s %s: the disk is mounted (umount %s first)", what, name, name);
  }
  return lock;
}

int verb_snapshot_delete(int argc, char **argv)
{
  const char *pos[2];
  bool json;
  if (parse(argc, argv, 2, pos, &json, "snapshot-delete NAME ID") < 0)
    return -1;
  cleanup_close int lock = at_rest(pos[0], "snapshot-delete");
  if (lock < 0)
    return -1;
  cleanup_free char *dir = ct_path(pos[0], "disk");
  if (disk_snapshot_delete(dir, pos[1]) < 0)
    return ct_wrap("snapshot-delete %s", pos[0]);
  return 0;
}

int verb_rollback(int argc, char **argv)
{
  const char *pos[2];
  bool json;
  if (parse(argc, argv, 2, pos, &json, "rollback NAME ID") < 0)
    return -1;
  cleanup_close int lock = at_rest(pos[0], "rollback");
  if (lock < 0)
    return -1;
  cleanup_free char *dir = ct_path(pos[0], "disk");
  if (disk_rollback(dir, pos[1]) < 0)
    return ct_wrap("rollback %s", pos[0]);
  return 0;
}

int verb_resize(int argc, char **argv)
{
  const char *pos[2];
  bool json;
  if (parse(argc, argv, 2, pos, &json, "resize NAME SIZE [--json]") < 0)
    return -1;
  const char *name = pos[0];
  uint64_t bytes;
  if (parse_size_arg("SIZE", pos[1], &bytes) < 0) {
    ct_set_error_code(CT_EXIT_USAGE);
    return -1;
  }
  if (bytes < (16u << 20))
    return ct_usage("resize: %s is too small (16M at least)", pos[1]);
  if (ct_require(name) < 0)
    return -1;
  cleanup_free char *dir = ct_path(name, "disk");
  cleanup_free char *mnt = ct_path(name, "rootfs");
  struct ct_state st;
  bool running = ct_state_load(name, &st) > 0 && ct_state_running(&st);
  /* Running: the monitor holds the lock and the disk stays mounted. */
  cleanup_close int lock = running ? -1 : ct_lock(name);
  if (!running && lock < 0)
    return -1;
  if (disk_resize(dir, disk_is_mounted(mnt) ? mnt : NULL, bytes) < 0)
    return ct_wrap("resize %s", name);
  cleanup_free char *kv = xasprintf("disk_bytes=%" PRIu64, bytes);
  const char *kvs[] = {kv};
  if (ct_kv_set(name, "config", kvs, 1, true) < 0)
    return ct_wrap("resize %s: the disk is resized but the config is not", name);
  if (json)
    printf("{\"name\": \"%s\", \"disk_bytes\": %" PRIu64 "}\n", name, bytes);
  return 0;
}
