/* TCP ends of `ploop send --to` and `ploop receive --listen`: one
 * connection each, resolved with getaddrinfo (numeric or named hosts). */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static int split(const char *opt, const char *addr, char *host, size_t hlen, const char **port)
{
  const char *colon = strrchr(addr, ':');
  if (!colon || !colon[1])
    return cli_usage_error("%s: '%s' is not HOST:PORT", opt, addr);
  const char *h = addr;
  size_t n = (size_t)(colon - addr);
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  if (n == 0 || n >= hlen)
    return cli_usage_error("%s: '%s' is not HOST:PORT", opt, addr);
  memcpy(host, h, n);
  host[n] = 0;
  *port = colon + 1;
  return 0;
}

static int resolve(const char *opt, const char *addr, bool passive, struct addrinfo **res)
{
  char host[256];
  const char *port = NULL;
  int rc = split(opt, addr, host, sizeof host, &port);
  if (rc)
    return rc;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  int e = getaddrinfo(host, port, &hints, res);
  if (e)
    return cli_error(EXIT_USAGE, "%s: %s: %s", opt, addr, gai_strerror(e));
  return 0;
}

/* Big socket buffers: a stream is a bulk transfer. */
static void tune(int fd)
{
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int net_connect(const char *opt, const char *addr, int *fd)
{
  struct addrinfo *res;
  int rc = resolve(opt, addr, false, &res);
  if (rc)
    return rc;
  int err = 0;
  *fd = -1;
  for (struct addrinfo *a = res; a && *fd < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    tune(s);
    if (connect(s, a->ai_addr, a->ai_addrlen) == 0) {
      *fd = s;
      break;
    }
    err = errno;
    close(s);
  }
  freeaddrinfo(res);
  if (*fd < 0)
    return cli_error(EXIT_IO, "%s: connect to %s: %s", opt, addr, strerror(err));
  return 0;
}

int net_accept_one(const char *opt, const char *addr, int *fd)
{
  struct addrinfo *res;
  int rc = resolve(opt, addr, true, &res);
  if (rc)
    return rc;
  int ls = -1, err = 0;
  for (struct addrinfo *a = res; a && ls < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    tune(s);
    if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 1) == 0) {
      ls = s;
      break;
    }
    err = errno;
    close(s);
  }
  freeaddrinfo(res);
  if (ls < 0)
    return cli_error(EXIT_IO, "%s: listen on %s: %s", opt, addr, strerror(err));
  do
    *fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
  while (*fd < 0 && errno == EINTR);
  err = errno;
  close(ls);
  if (*fd < 0)
    return cli_error(EXIT_IO, "%s: accept on %s: %s", opt, addr, strerror(err));
  return 0;
}
