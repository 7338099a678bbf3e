/* `receive --listen ADDR:PORT [--once] [--timeout S]`, `receive --recover`. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "migrate.h"
#include "migrate-tls.h"
#include "verbs.h"

static const char help[] =
    "usage: ploop-container receive --listen ADDR:PORT [--once] [--timeout S] [--auth FILE]\n"
    "         [--tls=off|on|require] [--tls-psk FILE | --tls-certificates DIR [--tls-verify-peer]]\n"
    "       ploop-container receive --recover\n"
    "Receives containers that `ploop-container migrate` sends, under --root.\n"
    "Nothing runs here before the source's COMMIT; a migration that fails before\n"
    "it leaves nothing behind. --once: serve one migration and exit with its result.\n"
    "--auth FILE: accept only sources that prove they hold the token in FILE (the\n"
    "same file given to `migrate --auth`), before anything is created here.\n"
    "--tls-psk FILE: TLS with pre-shared keys (psktool's IDENTITY:HEXKEY lines).\n"
    "--tls-certificates DIR: TLS with X.509: DIR/server-cert.pem, server-key.pem,\n"
    "ca-cert.pem; --tls-verify-peer: the source must show a certificate signed by\n"
    "ca-cert.pem. Either means --tls=require: a source without TLS is refused with\n"
    "one line before anything is created; --tls=on also serves plaintext sources.\n"
    "--recover: remove what receivers that were killed left half-received.\n";

int verb_receive(int argc, char **argv)
{
  static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                       {"once", no_argument, NULL, 'o'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"recover", no_argument, NULL, 'r'},
                                       {"auth", required_argument, NULL, 'a'},
                                       MIG_TLS_LONGOPTS,
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *listen_addr = NULL, *auth_file = NULL;
  struct mig_tls_args tls = {0};
  bool once = false, recover = false;
  unsigned long timeout = MIG_DEFAULT_TIMEOUT;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'l': listen_addr = optarg; break;
    case 'o': once = true; break;
    case 'r': recover = true; break;
    case 'a': auth_file = optarg; break;
    case 't': {
      char *end;
      errno = 0;
      timeout = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || timeout < 1 || timeout > 3600)
        return ct_usage("--timeout: '%s' is not a number of seconds (1-3600)", optarg);
      break;
    }
    case 'h': fputs(help, stdout); return 0;
    default:
      if (mig_tls_option(&tls, c, optarg))
        break;
      return ct_usage("receive: bad option '%s' (see receive --help)", argv[optind - 1]);
    }
  }
  if (optind != argc)
    return ct_usage("receive: unexpected argument '%s'", argv[optind]);
  bool tls_given = tls.mode || tls.o.psk_file || tls.o.cert_dir || tls.o.verify_peer;
  if (tls_given && !listen_addr)
    return ct_usage("TLS options go with --listen");
  if (recover)
    return migrate_recover_incoming(true) < 0 ? -1 : 0;
  if (!listen_addr)
    return ct_usage("usage: receive --listen ADDR:PORT [--once] [--timeout S]");
  static struct mig_auth auth;
  if (auth_file && mig_auth_load(auth_file, &auth) < 0)
    return -1;
  if (mig_tls_setup(&tls, true) < 0)
    return -1;
  return migrate_receive(listen_addr, once, (unsigned)timeout, auth_file ? &auth : NULL) < 0 ? -1 : 0;
}
