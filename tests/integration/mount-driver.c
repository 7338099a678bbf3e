/* Test driver for the attach API (kmod-free-nbd/client/attach.h), built by
 * tests/integration/mount-lib.sh when the ploop CLI lacks mount verbs:
 *   mount-driver mount [-r] [-u GUID] [-t FSTYPE] [-o OPTS] DISK [MOUNTPOINT]
 *   mount-driver umount DISK|MOUNTPOINT|DEVICE
 *   mount-driver list | format DISK FSTYPE | snapshot WHAT | resize WHAT BYTES
 *   mount-driver compact WHAT
 * Prints what the CLI would print; one-line errors on stderr, exit 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach.h"

static int fail(void)
{
  fprintf(stderr, "mount-driver: %s\n", ploop_get_error());
  return 1;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "mount-driver: missing command\n");
    return 2;
  }
  const char *cmd = argv[1];
  argc--;
  argv++;
  if (!strcmp(cmd, "mount")) {
    struct ploop_attach_opts o = {0};
    int c;
    while ((c = getopt(argc, argv, "ru:t:o:")) != -1) {
      switch (c) {
      case 'r': o.readonly = true; break;
      case 'u': o.snapshot_guid = optarg; break;
      case 't': o.fstype = optarg; break;
      case 'o': o.mount_data = optarg; break;
      default: return 2;
      }
    }
    if (optind >= argc) {
      fprintf(stderr, "mount-driver: mount needs a disk\n");
      return 2;
    }
    o.mount_point = optind + 1 < argc ? argv[optind + 1] : NULL;
    struct ploop_attach_info i;
    if (ploop_attach_mount(argv[optind], &o, &i) < 0)
      return fail();
    printf("%s\n", i.device);
    return 0;
  }
  if (!strcmp(cmd, "umount") && argc == 2)
    return ploop_attach_umount(argv[1]) < 0 ? fail() : 0;
  if (!strcmp(cmd, "list")) {
    struct ploop_attach_info *l;
    size_t n;
    if (ploop_attach_list(&l, &n) < 0)
      return fail();
    for (size_t k = 0; k < n; k++)
      printf("%s %s %s %s %s pid=%d%s\n", l[k].device[0] ? l[k].device : "-", l[k].kind,
             l[k].disk_dir, l[k].snapshot_guid[0] ? l[k].snapshot_guid : "top",
             l[k].mount_point[0] ? l[k].mount_point : "-", (int)l[k].daemon_pid,
             l[k].daemon_alive ? "" : " (daemon gone)");
    free(l);
    return 0;
  }
  if (!strcmp(cmd, "format") && argc == 3)
    return ploop_attach_format(argv[1], argv[2]) < 0 ? fail() : 0;
  if (!strcmp(cmd, "snapshot") && argc == 2) {
    char guid[PLOOP_UUID_LEN + 1];
    if (ploop_attach_snapshot(argv[1], NULL, guid) < 0)
      return fail();
    printf("%s\n", guid);
    return 0;
  }
  if (!strcmp(cmd, "resize") && argc == 3) {
    uint64_t bytes;
    if (ploop_parse_size(argv[2], &bytes) < 0)
      return fail();
    return ploop_attach_resize(argv[1], bytes) < 0 ? fail() : 0;
  }
  if (!strcmp(cmd, "compact") && argc == 2) {
    uint64_t trimmed, reclaimed;
    if (ploop_attach_compact(argv[1], &trimmed, &reclaimed) < 0)
      return fail();
    printf("trimmed %" PRIu64 " reclaimed %" PRIu64 "\n", trimmed, reclaimed);
    return 0;
  }
  fprintf(stderr, "mount-driver: bad command '%s'\n", cmd);
  return 2;
}
