/* `ploop send`: writes one disk stream (formats/ploop-stream.md) of a disk
 * state to stdout, a file or a TCP peer. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "net.h"
#include "stream-cli.h"

static int open_tmp(const char *out, char *tmp, size_t len, int *fd)
{
  if ((size_t)snprintf(tmp, len, "%s.tmp", out) >= len)
    return cli_error(EXIT_USAGE, "%s: path too long", out);
  *fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (*fd < 0)
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: create: %s", tmp, strerror(errno));
  return 0;
}

static int run_send(int argc, char **argv)
{
  int rc;
  enum { OPT_SINCE = 256, OPT_SNAPSHOTS, OPT_COMPRESS, OPT_TO, OPT_JSON };
  static const struct option longopts[] = {
      {"uuid", required_argument, NULL, 'u'},
      {"since", required_argument, NULL, OPT_SINCE},
      {"snapshots", no_argument, NULL, OPT_SNAPSHOTS},
      {"compress", no_argument, NULL, OPT_COMPRESS},
      {"output", required_argument, NULL, 'o'},
      {"to", required_argument, NULL, OPT_TO},
      {"force", no_argument, NULL, 'f'},
      {"json", no_argument, NULL, OPT_JSON},
      NET_TLS_LONGOPTS,
      {0},
  };
  char guid[PLOOP_UUID_LEN + 1], since[PLOOP_UUID_LEN + 1];
  struct ploop_send_opts o = {0};
  const char *out = NULL, *to = NULL;
  bool json = false, force = false;
  struct net_tls tls = {0};
  int c;
  while ((c = cli_getopt(argc, argv, "u:o:f", longopts)) != -1) {
    switch (c) {
    case 'u':
      if (!cli_parse_uuid("-u", optarg, guid))
        return EXIT_USAGE;
      o.guid = guid;
      break;
    case OPT_SINCE:
      if (!cli_parse_uuid("--since", optarg, since))
        return EXIT_USAGE;
      o.since = since;
      break;
    case OPT_SNAPSHOTS:
      o.snapshots = true;
      break;
    case OPT_COMPRESS:
      o.compress = true;
      break;
    case 'o':
      out = optarg;
      break;
    case OPT_TO:
      to = optarg;
      break;
    case 'f':
      force = true;
      break;
    case OPT_JSON:
      json = true;
      break;
    case 'h':
      return EXIT_OK;
    default:
      if (net_tls_option(&tls, c, optarg))
        break;
      return EXIT_USAGE;
    }
  }
  if (!cli_positional(argc, argv, 1, "DISK"))
    return EXIT_USAGE;
  if (out && to)
    return cli_usage_error("-o and --to are exclusive");
  if ((rc = net_tls_check(&tls, false, to ? "--to" : NULL)))
    return rc;
  const char *disk = argv[optind];
  struct stat st;
  if (strncmp(disk, "rbd:", 4) && stat(disk, &st) < 0)
    return cli_error(errno == ENOENT ? EXIT_NOTFOUND : EXIT_IO, "%s: %s", disk, strerror(errno));
  if (out && !force && stat(out, &st) == 0)
    return cli_error(EXIT_USAGE, "%s: file exists (use -f to overwrite)", out);
  if (!out && !to && isatty(STDOUT_FILENO))
    return cli_error(
        EXIT_USAGE,
        "refusing to write a stream to a terminal (redirect it, or use -o FILE or --to HOST:PORT)");
  /* A reader that went away is reported as an error, not a silent SIGPIPE. */
  signal(SIGPIPE, SIG_IGN);

  int fd = STDOUT_FILENO;
  char tmp[PATH_MAX];
  if (out && (rc = open_tmp(out, tmp, sizeof tmp, &fd)))
    return rc;
  if (to && (rc = net_connect("--to", to, &fd)))
    return rc;
  if (to && (rc = net_tls_start(&tls, false, "--to", to, &fd))) {
    close(fd);
    return rc;
  }
  struct cli_progress prog;
  cli_progress_init(&prog, "send");
  o.progress = cli_progress_cb;
  o.opaque = &prog;
  struct ploop_stream_stats stats = {0};
  rc = ploop_send(disk, &o, fd, &stats);
  cli_progress_end(&prog);
  if (rc < 0) {
    rc = cli_lib_error();
  } else if (out && (fsync(fd) < 0 || rename(tmp, out) < 0)) {
    rc = cli_error(EXIT_IO, "%s: %s", out, strerror(errno));
  } else if (to && tls.relay) {
    /* Ends when the receiver has closed its side: it read everything. */
    rc = net_tls_finish(&tls, "--to", fd);
    fd = -1;
  } else if (to && shutdown(fd, SHUT_WR) < 0) {
    rc = cli_error(EXIT_IO, "--to %s: %s", to, strerror(errno));
  } else {
    rc = EXIT_OK;
  }
  if (tls.relay) {
    net_tls_finish(&tls, NULL, fd); /* after a failure: its line is already out */
    fd = -1;
  }
  if (fd != STDOUT_FILENO && fd >= 0)
    close(fd);
  if (out && rc != EXIT_OK)
    unlink(tmp); /* a partial stream must not pass for one */
  if (rc == EXIT_OK)
    stream_cli_summary("send", &stats, NULL, json, out || to ? stdout : stderr);
  return rc;
}

const struct cli_verb verb_send = {
    .name = "send",
    .run = run_send,
    .synopsis = "send [-u GUID] [--since GUID] [--snapshots] [--compress] [-o FILE [-f] | --to HOST:PORT [--tls-psk FILE | "
                "--tls-certificates DIR]] [--json] DISK",
    .summary = "write a disk state as a stream (full or incremental) for 'ploop receive'",
    .details =
        "  -u, --uuid GUID    send that snapshot's state (default: the top, which must\n"
        "                     not be in use; it gets a new GUID in the stream)\n"
        "  --since GUID       only the clusters written after snapshot GUID (an\n"
        "                     older snapshot of the same chain); applies to a copy\n"
        "                     made by receiving GUID\n"
        "  --snapshots        every snapshot with its GUID: the chain up to the state\n"
        "                     and the branches beside it (the whole tree; with\n"
        "                     --since: the snapshots above GUID)\n"
        "  --compress         deflate the cluster data (zlib)\n"
        "  -o, --output FILE  write to FILE (through FILE.tmp, renamed when complete)\n"
        "  -f, --force        overwrite FILE if it exists\n"
        "  --to HOST:PORT     connect to 'ploop receive --listen' and send there\n"
        "  --tls-psk FILE     TLS with a pre-shared key (psktool's IDENTITY:HEXKEY; the\n"
        "                     first line's identity), as the receiver's --tls-psk\n"
        "  --tls-certificates DIR  TLS with X.509: DIR/ca-cert.pem checks the receiver's\n"
        "                     certificate (made for HOST); DIR/client-cert.pem and\n"
        "                     client-key.pem are shown when present\n"
        "  --json             print {\"bytes_sent\",\"clusters\",\"data_bytes\",\"seconds\",\"guid\"};\n"
        "                     on stdout, or on stderr when the stream goes to stdout\n"
        "The stream goes to stdout by default (never to a terminal). A snapshot can\n"
        "be sent while the disk is served read-write (ploop-nbd). One summary line\n"
        "goes to stderr (bytes, clusters, rate, time); a progress bar on a terminal.\n",
    .interruptible = true,
};
