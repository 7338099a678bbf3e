/* Local attach verbs: mount, umount, list (compact and balloon: compact.c).
 * The disk is served by ploop-nbd, exposed as a FUSE file, bound to a loop
 * device and optionally mounted (kmod-free-nbd/client/attach.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "common.h"
#include "online.h"

static int run_mount(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"readonly", no_argument, NULL, 'r'},       {"mount-point", required_argument, NULL, 'm'},
      {"uuid", required_argument, NULL, 'u'},     {"fstype", required_argument, NULL, 't'},
      {"options", required_argument, NULL, 'o'}, {"fsck", no_argument, NULL, 'F'},
      {0},
  };
  struct ploop_attach_opts o = {0};
  char uuid[PLOOP_UUID_LEN + 1];
  bool fsck = false;
  int c;
  while ((c = cli_getopt(argc, argv, "rm:u:t:o:F", longopts)) != -1) {
    switch (c) {
    case 'F':
      fsck = true;
      break;
    case 'r':
      o.readonly = true;
      break;
    case 'm':
      o.mount_point = optarg;
      break;
    case 'u':
      if (!cli_parse_uuid("-u", optarg, uuid))
        return EXIT_USAGE;
      o.snapshot_guid = uuid;
      o.readonly = true; /* a snapshot is immutable */
      break;
    case 't':
      o.fstype = optarg;
      break;
    case 'o':
      o.mount_data = optarg;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  if ((o.fstype || o.mount_data) && !o.mount_point)
    return cli_usage_error("-t and -o need -m MOUNT_POINT");
  if (o.readonly)
    o.mount_flags |= MS_RDONLY;
  if (fsck && !o.mount_point)
    return cli_usage_error("-F checks the filesystem before mounting it: give -m MOUNT_POINT");
  if (fsck && o.readonly)
    return cli_usage_error("-F needs a writable disk (the check may repair)");
  struct ploop_attach_info info;
  if (fsck) {
    /* The device alone first, for the check; then the attach with the mount. */
    struct ploop_attach_opts dev_only = {0};
    if (ploop_attach_mount(argv[optind], &dev_only, &info) < 0)
      return cli_lib_error();
    char type[32];
    int rc = 0;
    if (o.fstype)
      snprintf(type, sizeof type, "%s", o.fstype);
    else if (ploop_fs_probe(info.device, type, sizeof type) < 0)
      rc = cli_lib_error();
    if (!rc && ploop_fs_check(info.device, type) < 0)
      rc = cli_lib_error();
    if (ploop_attach_umount(info.disk_dir) < 0 && !rc)
      rc = cli_lib_error();
    if (rc)
      return rc;
  }
  if (ploop_attach_mount(argv[optind], &o, &info) < 0)
    return cli_lib_error();
  printf("%s\n", info.device);
  return EXIT_OK;
}

static int run_umount(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"device", required_argument, NULL, 'd'},
      {"mount-point", required_argument, NULL, 'm'},
      {0},
  };
  const char *what = NULL;
  int c;
  while ((c = cli_getopt(argc, argv, "d:m:", longopts)) != -1) {
    switch (c) {
    case 'd':
    case 'm':
      if (what)
        return cli_usage_error("give one of -d, -m or DISK");
      what = optarg;
      break;
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!what) {
    if (!cli_positional(argc, argv, 1, "DISK, mount point or device"))
      return EXIT_USAGE;
    what = argv[optind];
  } else if (!cli_positional(argc, argv, 0, "")) {
    return EXIT_USAGE;
  }
  if (ploop_attach_umount(what) < 0)
    return cli_lib_error();
  return EXIT_OK;
}

static int cmp_info(const void *a, const void *b)
{
  const struct ploop_attach_info *x = a, *y = b;
  return strcmp(x->device, y->device);
}

static int run_list(int argc, char **argv)
{
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {0}};
  bool json = false;
  int c;
  while ((c = cli_getopt(argc, argv, "a", longopts)) != -1) {
    switch (c) {
    case 'j':
      json = true;
      break;
    case 'a':
      break; /* every attachment is always listed with its disk and mount */
    case 'h':
      return EXIT_OK;
    default:
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 0, ""))
    return EXIT_USAGE;
  struct ploop_attach_info *all = NULL;
  size_t n = 0;
  if (ploop_attach_list(&all, &n) < 0)
    return cli_lib_error();
  if (n)
    qsort(all, n, sizeof *all, cmp_info);
  if (json) {
    printf("[");
    for (size_t i = 0; i < n; i++) {
      const struct ploop_attach_info *a = &all[i];
      printf("%s\n  {\"device\": ", i ? "," : "");
      cli_json_string(stdout, a->device);
      printf(", \"disk\": ");
      cli_json_string(stdout, a->disk_dir);
      printf(", \"snapshot\": ");
      cli_json_string(stdout, a->snapshot_guid);
      printf(", \"mount_point\": ");
      cli_json_string(stdout, a->mount_point);
      printf(", \"fstype\": ");
      cli_json_string(stdout, a->fstype);
      printf(", \"kind\": ");
      cli_json_string(stdout, a->kind);
      printf(", \"pid\": %d, \"readonly\": %s, \"alive\": %s}", (int)a->daemon_pid,
             a->readonly ? "true" : "false", a->daemon_alive ? "true" : "false");
    }
    printf("%s]\n", n ? "\n" : "");
  } else {
    for (size_t i = 0; i < n; i++) {
      const struct ploop_attach_info *a = &all[i];
      printf("%-12s %s%s%s %s %s pid=%d%s\n", a->device, a->disk_dir,
             a->snapshot_guid[0] ? "@" : "", a->snapshot_guid,
             a->mount_point[0] ? a->mount_point : "-", a->readonly ? "ro" : "rw",
             (int)a->daemon_pid, a->daemon_alive ? "" : " daemon gone (ploop umount it)");
    }
  }
  free(all);
  return EXIT_OK;
}

const struct cli_verb verb_mount = {
    .name = "mount",
    .run = run_mount,
    .synopsis = "mount [-r] [-u UUID] [-m DIR [-F] [-t FSTYPE] [-o OPTIONS]] DISK",
    .summary = "attach the disk as a loop device (and mount it); prints the device",
    .details = "  -r, --readonly          read-only device and mount\n"
               "  -u, --uuid UUID         attach that snapshot (always read-only)\n"
               "  -m, --mount-point DIR   mount the disk's filesystem on DIR\n"
               "  -t, --fstype TYPE       filesystem type (default: probed)\n"
               "  -o, --options OPTS      filesystem mount options\n"
               "  -F, --fsck              check the filesystem first (ext*: e2fsck -p, which\n"
               "                          fixes what is safe; xfs: xfs_repair -n)\n"
               "Needs root: ploop-nbd serves the disk as a FUSE file bound to a loop device.\n",
};

const struct cli_verb verb_umount = {
    .name = "umount",
    .run = run_umount,
    .synopsis = "umount {DISK | -m DIR | -d DEVICE}",
    .summary = "unmount and detach a disk, stop its daemon, clear its in-use mark",
    .details = "  -m, --mount-point DIR   the attachment mounted on DIR\n"
               "  -d, --device DEV        the attachment using loop device DEV\n",
};

const struct cli_verb verb_list = {
    .name = "list",
    .run = run_list,
    .synopsis = "list [--json]",
    .summary = "list attached disks: device, disk[@snapshot], mount point, rw/ro, pid=N",
    .details = "  --json   a JSON array of {device, disk, snapshot, mount_point, fstype,\n"
               "           kind, pid, readonly, alive}\n",
};
