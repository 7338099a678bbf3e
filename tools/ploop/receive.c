/* `ploop receive`: applies one disk stream from stdin or a TCP peer to DIR. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "net.h"
#include "stream-cli.h"

static int run_receive(int argc, char **argv)
{
  enum { OPT_LISTEN = 256, OPT_JSON };
  static const struct option longopts[] = {
      {"listen", required_argument, NULL, OPT_LISTEN},
      {"json", no_argument, NULL, OPT_JSON},
      NET_TLS_LONGOPTS,
      {0},
  };
  const char *listen_on = NULL;
  bool json = false;
  struct net_tls tls = {0};
  int c;
  while ((c = cli_getopt(argc, argv, "", longopts)) != -1) {
    switch (c) {
    case OPT_LISTEN:
      listen_on = optarg;
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
  if (!cli_positional(argc, argv, 1, "DIR"))
    return EXIT_USAGE;
  const char *dir = argv[optind];
  int fd = STDIN_FILENO, rc;
  if (!listen_on && isatty(STDIN_FILENO))
    return cli_error(EXIT_USAGE, "refusing to read a stream from a terminal (pipe one in, or use --listen)");
  if ((rc = net_tls_check(&tls, true, listen_on ? "--listen" : NULL)))
    return rc;
  if (listen_on && (rc = net_accept_one("--listen", listen_on, &fd)))
    return rc;
  if (listen_on && (rc = net_tls_start(&tls, true, "--listen", listen_on, &fd))) {
    close(fd);
    return rc;
  }
  struct cli_progress prog;
  cli_progress_init(&prog, "receive");
  struct ploop_receive_opts o = {.progress = cli_progress_cb, .opaque = &prog};
  struct ploop_stream_stats stats = {0};
  char guid[PLOOP_UUID_LEN + 1] = "";
  rc = ploop_receive(dir, &o, fd, &stats, guid);
  cli_progress_end(&prog);
  if (tls.relay) {
    int trc = net_tls_finish(&tls, rc < 0 ? NULL : "--listen", fd);
    if (rc == 0 && trc)
      return trc;
  } else if (fd != STDIN_FILENO) {
    close(fd);
  }
  if (rc < 0)
    return cli_lib_error();
  stream_cli_summary("receive", &stats, guid, json, stdout);
  return EXIT_OK;
}

const struct cli_verb verb_receive = {
    .name = "receive",
    .run = run_receive,
    .synopsis = "receive [--listen ADDR:PORT [--tls-psk FILE | --tls-certificates DIR "
                "[--tls-verify-peer]]] [--json] DIR",
    .summary = "apply a stream from 'ploop send' to the disk in DIR",
    .details = "A full stream makes a new disk in DIR (absent or empty): the sent state\n"
               "becomes a snapshot with the sender's GUID, an empty top above it. An\n"
               "incremental stream (send --since GUID) applies to a DIR whose newest\n"
               "snapshot is GUID with nothing written above it; the sent state becomes\n"
               "the next snapshot. Every checksum is verified as frames arrive; a bad or\n"
               "truncated stream leaves nothing: a new DIR is removed, an existing disk\n"
               "stays exactly as it was. DIR may be a Ceph disk, rbd:POOL/NAME: the new\n"
               "images carry the metadata ploop.receiving=NAME until the descriptor,\n"
               "written last, names them; a full receive after a killed one on this host\n"
               "breaks the dead receiver's lock and removes only such marked images.\n"
               "  --listen ADDR:PORT  accept one TCP connection ('ploop send --to') and\n"
               "                      read the stream from it (default: stdin)\n"
               "  --tls-psk FILE      require TLS with a pre-shared key: psktool's\n"
               "                      IDENTITY:HEXKEY lines, any of which the sender may use\n"
               "  --tls-certificates DIR  require TLS with X.509: DIR/server-cert.pem,\n"
               "                      server-key.pem (and ca-cert.pem)\n"
               "  --tls-verify-peer   the sender must show a certificate signed by\n"
               "                      DIR/ca-cert.pem\n"
               "  --json              print {\"bytes_received\",\"clusters\",\"data_bytes\",\n"
               "                      \"seconds\",\"guid\"} on stdout instead of the summary line\n",
    .interruptible = true,
};
