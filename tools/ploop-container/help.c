/* `VERB --help`: what each verb takes, one screen each. */
#include "help.h"

#include <stdio.h>
#include <string.h>

#include "net.h"
#include "resources.h"

static const char run_help[] =
    "usage: %s NAME [options] [-- CMD...]      (default CMD: /bin/sh)\n"
    "%s"
    "  --memory M --swap S    RAM, and swap on top of it (VSwap); --swap needs --memory\n"
    "  --pids N               task limit (default 1024, 0 = none)\n"
    "  --cpus N.N             CPU quota (fractional), --cpu-weight 1-10000 (100 = default)\n"
    "  --cpuset LIST          CPUs it may run on (0-1,3)\n"
    "  --io-limit read|write RATE   on its disk: bytes/s (10M) or Niops; repeatable\n"
    "  --io-weight 1-10000    disk share (needs BFQ or io.cost on the host)\n"
    "  --hostname H           default: NAME\n"
    "  --net none|host|veth   private lo (default), the host's network, or a veth pair:\n"
    "      --ip A/P [--gateway A] [--host-ip A/P | --bridge BR]   (saved in the config)\n"
    "  --volume HOST:CT[:ro]  bind a host file or directory (repeatable)\n"
    "  --userns               root inside is uid 100000 outside (id-mapped rootfs)\n"
    "  --cap-add CAP --cap-drop CAP   change the default capability set (NET_ADMIN, ALL...)\n"
    "  --seccomp default|unconfined   the default filter denies keyrings, bpf, kexec, mount...\n"
    "  --read-only            root filesystem read-only (tmpfs on /tmp)\n"
    "  --init                 a tiny PID 1 runs CMD as its child: it reaps orphans and\n"
    "                         forwards signals (stop works for commands without handlers)\n"
    "Limits saved by `update` apply unless a flag is given.\n";

static const struct {
  const char *verb, *text;
} helps[] = {
    {"create", "usage: create NAME [--size 2G] [--from busybox|ROOTFS.tar[.gz]] [--disk ploop|raw|rbd:POOL/NAME[?conf=PATH]]\n"
               "              [--net veth --ip A/P [--gateway A] [--host-ip A/P | --bridge BR]]\n"
               "Makes the container's disk (a ploop image with ext4) and fills it. An rbd:\n"
               "disk lives in Ceph (CEPH_CONF or ?conf=); an existing one is used as it is\n"
               "and destroy removes only a disk that create made.\n"},
    {"exec", "usage: exec NAME [--env K=V]... [--user UID[:GID]] [--cwd DIR] [--] CMD...\n"
             "Runs CMD inside the running container NAME (same namespaces, cgroups,\n"
             "capabilities and seccomp filter as its PID 1); returns CMD's status.\n"},
    {"stop", "usage: stop NAME [--timeout SECONDS]\n"
             "SIGTERM to PID 1, then (after 10 s by default) SIGKILL to all its processes.\n"},
    {"list", "usage: list [--json]\nOne line (--json: object) per container: state, PID 1, memory, disk,\n"
             "last exit. \"running, monitor gone\": its monitor died; only `stop` ends it.\n"
             "\"OOM-killed\" when the last run's PID 1 was the OOM killer's victim; other\n"
             "OOM kills are counted and named (from the kernel log).\n"},
    {"logs", "usage: logs NAME [--follow]\nPrints ROOT/NAME/console.log: the output of `start` (and restore), each\n"
             "run headed by a line with its start time (UTC) and command. --follow goes on\n"
             "while the container runs.\n"},
    {"snapshot-list", "usage: snapshot-list NAME [--json]\nThe disk's snapshots: id, parent, space taken, file.\n"},
    {"snapshot-delete", "usage: snapshot-delete NAME ID\nRemoves a snapshot (one with a child is merged into it); the\n"
                        "container must be stopped and its disk not mounted.\n"},
    {"rollback", "usage: rollback NAME ID\nMakes the disk of the stopped container NAME what it was at snapshot ID\n"
                 "(changes made since are dropped; the snapshot stays).\n"},
    {"resize", "usage: resize NAME SIZE [--json]\nNew size of the disk and its ext4 (e.g. 4G), saved in the config.\n"
               "Running or mounted: grow only, live. Stopped: grow or shrink.\n"},
    {"freeze", "usage: freeze NAME\nStops every process of NAME (cgroup freezer).\n"},
    {"thaw", "usage: thaw NAME\nResumes a frozen container.\n"},
    {"snapshot", "usage: snapshot NAME [--json]\nInstant disk snapshot (consistent: processes and filesystem\n"
                 "frozen around it); prints its id.\n"},
    {"mount", "usage: mount NAME | mount NAME --snapshot ID DIR\n"
              "Keeps NAME's disk mounted between runs, or mounts a snapshot read-only on DIR.\n"},
    {"umount", "usage: umount NAME [DIR]\n"},
    {"destroy", "usage: destroy NAME\nRemoves a stopped container and its disk.\n"},
    {"update", "usage: update NAME [--memory M] [--swap S] [--pids N] [--cpus N.N] [--cpu-weight W]\n"
               "              [--cpuset LIST] [--io-weight W] [--io-limit read|write RATE]... [--json]\n"
               "Changes a running container's limits live and saves them in its config\n"
               "(a stopped one: only the config). RATE 0 or max, --cpus 0 lift a limit.\n"
               "--json prints the memory, swap and pids limits now in force.\n"},
};

bool ct_wants_help(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      return false;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return true;
  }
  return false;
}

int ct_verb_help(const char *verb)
{
  if (strcmp(verb, "run") == 0 || strcmp(verb, "start") == 0) {
    printf(run_help, verb,
           strcmp(verb, "run") == 0
               ? "Runs NAME in the foreground (on a pty when on a terminal); returns its status.\n"
               : "Starts NAME detached; its output goes to ROOT/NAME/console.log.\n");
    return 0;
  }
  for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++)
    if (strcmp(verb, helps[i].verb) == 0) {
      fputs(helps[i].text, stdout);
      return 0;
    }
  return 2;
}
