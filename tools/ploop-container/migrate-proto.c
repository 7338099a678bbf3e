/* Framing, sockets and key=value payloads of the migration protocol. */
#include "migrate-proto.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define XXH_INLINE_ALL /* header-only: no link-time dependency */
#include <xxhash.h>

#include "error.h"
#include "migrate-internal.h"
#include "migrate-tls.h"
#include "util.h"

uint64_t mig_bytes_out;

static const char magic[4] = {'P', 'C', 'M', '1'};

const char *mig_type_name(unsigned t)
{
  static const char *names[] = {"?",     "HELLO",   "WELCOME", "ERROR", "ROUND",
                                "ROUND_ACK", "FILE", "DATA",   "PREPARE", "READY",
                                "COMMIT", "COMMITTED", "QUERY", "STATUS", "CHALLENGE", "AUTH", "DONE",
                                "ATTACH", "ATTACHED", "HANDOVER"};
  return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

uint64_t mig_xxh3(const void *buf, size_t len) { return XXH3_64bits(buf, len); }

int mig_set_timeout(int fd, unsigned seconds)
{
  /* SO_RCVTIMEO/SO_SNDTIMEO bound our own message waits. The disk streams
   * wait in poll(), which those do not reach: there TCP_USER_TIMEOUT aborts
   * a connection whose data (or, with keepalive, whose probes) went
   * unacknowledged for SECONDS, and poll wakes up with the error.
   * With TLS, FD is a relay's end: the message timeouts stay on it, the
   * TCP options go to the socket beneath (which also gets the send timeout,
   * so a relay cannot block forever on a peer that stopped reading). */
  struct timeval tv = {.tv_sec = seconds};
  unsigned ms = seconds * 1000;
  int one = 1, idle = seconds > 2 ? (int)seconds / 2 : 1, intvl = 1, cnt = (int)seconds + 1;
  int net = mig_tls_net_fd(fd);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
      (net != fd && setsockopt(net, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) ||
      setsockopt(net, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
      setsockopt(net, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) < 0 ||
      setsockopt(net, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) < 0 ||
      setsockopt(net, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) < 0 ||
      setsockopt(net, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) < 0)
    return ct_fail(errno, "socket timeouts");
  setsockopt(net, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return 0;
}

static int split_addr(const char *addr_port, char *host, size_t hlen, char *port, size_t plen)
{
  const char *colon = strrchr(addr_port, ':');
  if (!colon || colon == addr_port || !colon[1])
    return ct_usage("'%s' is not ADDR:PORT", addr_port);
  const char *h = addr_port;
  size_t n = (size_t)(colon - addr_port);
  if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  char *end;
  unsigned long p = strtoul(colon + 1, &end, 10);
  if (*end || p == 0 || p > 65535)
    return ct_usage("'%s': bad port", addr_port);
  if (n >= hlen)
    return ct_usage("'%s': address too long", addr_port);
  memcpy(host, h, n);
  host[n] = 0;
  snprintf(port, plen, "%lu", p);
  return 0;
}

static struct addrinfo *resolve(const char *addr_port, bool passive)
{
  char host[256], port[8];
  if (split_addr(addr_port, host, sizeof host, port, sizeof port) < 0)
    return NULL;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  struct addrinfo *ai = NULL;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc != 0) {
    ct_fail(0, "%s: %s", addr_port, gai_strerror(rc));
    return NULL;
  }
  return ai;
}

int mig_connect(const char *addr_port, unsigned timeout_s)
{
  struct addrinfo *ai = resolve(addr_port, false);
  if (!ai)
    return -1;
  int fd = -1, err = 0;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    /* SO_SNDTIMEO bounds connect() too. */
    if (mig_set_timeout(fd, timeout_s) < 0 || connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return ct_fail(err, "connect to %s", addr_port);
  return mig_tls_connect(fd, addr_port, timeout_s);
}

int mig_listen(const char *addr_port)
{
  struct addrinfo *ai = resolve(addr_port, true);
  if (!ai)
    return -1;
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 8) < 0) {
    int saved = errno;
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return ct_fail(saved, "listen on %s", addr_port);
  }
  freeaddrinfo(ai);
  return fd;
}

int mig_write_all(int fd, const void *buf, size_t len)
{
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && mig_tls_link_error(fd))
      return ct_fail(0, "send to the peer: %s", mig_tls_link_error(fd));
    if (n < 0)
      return ct_fail(errno == EAGAIN ? ETIMEDOUT : errno, "send to the peer");
    p += n;
    len -= (size_t)n;
    mig_bytes_out += (uint64_t)n;
  }
  return 0;
}

int mig_read_all(int fd, void *buf, size_t len)
{
  char *p = buf;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 && mig_tls_link_error(fd))
      return ct_fail(0, "receive from the peer: %s", mig_tls_link_error(fd));
    if (n < 0)
      return ct_fail(errno == EAGAIN ? ETIMEDOUT : errno, "receive from the peer");
    if (n == 0)
      return ct_fail(0, "the peer closed the connection");
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void put16(unsigned char *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }
static uint32_t get32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* The digest covers the header's first 12 bytes (magic, type, length) and
 * the payload: a flipped type or length is caught as surely as a payload bit. */
static uint64_t frame_digest(const unsigned char *hdr, const void *payload, size_t len)
{
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, hdr, 12);
  if (len)
    XXH3_64bits_update(&st, payload, len);
  return XXH3_64bits_digest(&st);
}

int mig_send(int fd, unsigned type, const void *payload, size_t len)
{
  if (len > MIG_MAX_PAYLOAD)
    return ct_fail(0, "message %s too large (%zu bytes)", mig_type_name(type), len);
  unsigned char hdr[MIG_HDR_LEN];
  memcpy(hdr, magic, 4);
  put16(hdr + 4, (uint16_t)type);
  put16(hdr + 6, 0);
  put32(hdr + 8, (uint32_t)len);
  put64(hdr + 16, frame_digest(hdr, payload, len));
  put32(hdr + 12, 0);
  /* header and payload in one segment when small: fewer round trips to wait on */
  if (len <= 4096) {
    unsigned char buf[MIG_HDR_LEN + 4096];
    memcpy(buf, hdr, MIG_HDR_LEN);
    if (len)
      memcpy(buf + MIG_HDR_LEN, payload, len);
    return mig_write_all(fd, buf, MIG_HDR_LEN + len);
  }
  if (mig_write_all(fd, hdr, sizeof hdr) < 0)
    return -1;
  return mig_write_all(fd, payload, len);
}

int mig_send_text(int fd, unsigned type, const char *text)
{
  return mig_send(fd, type, text, strlen(text));
}

int mig_recv(int fd, unsigned *type, char **payload, size_t *len)
{
  unsigned char hdr[MIG_HDR_LEN];
  *payload = NULL;
  if (mig_read_all(fd, hdr, sizeof hdr) < 0)
    return -1;
  if (hdr[0] == 0x16 && hdr[1] == 3) /* a TLS handshake record, version 3.x */
    return ct_fail(0, "protocol error: the peer speaks TLS and this end does not (give both "
                      "the same --tls-psk or --tls-certificates)");
  if (memcmp(hdr, magic, 4) != 0)
    return ct_fail(0, "protocol error: bad message magic (not a ploop-container migration peer?)");
  unsigned t = hdr[4] | hdr[5] << 8;
  uint32_t n = get32(hdr + 8);
  if (n > MIG_MAX_PAYLOAD)
    return ct_fail(0, "protocol error: message length %u over the %u limit", n, MIG_MAX_PAYLOAD);
  char *p = malloc((size_t)n + 1);
  if (!p)
    return ct_fail(ENOMEM, "receive");
  if (mig_read_all(fd, p, n) < 0) {
    free(p);
    return -1;
  }
  p[n] = 0;
  if (frame_digest(hdr, p, n) != get64(hdr + 16)) {
    free(p);
    return ct_fail(0, "protocol error: checksum mismatch in a %s message", mig_type_name(t));
  }
  if (t == MIG_ERROR) {
    ct_fail(0, "peer: %s", p);
    free(p);
    return -1;
  }
  *type = t;
  *payload = p;
  if (len)
    *len = n;
  return 0;
}

int mig_expect(int fd, unsigned type, char **payload, size_t *len)
{
  unsigned t;
  if (mig_recv(fd, &t, payload, len) < 0)
    return -1;
  if (t != type) {
    free(*payload);
    *payload = NULL;
    return ct_fail(0, "protocol error: expected %s, got %s", mig_type_name(type), mig_type_name(t));
  }
  return 0;
}

void mig_send_error(int fd, const char *msg)
{
  if (fd < 0)
    return;
  struct timeval tv = {.tv_sec = 2};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char keep[1200];  /* MSG is usually the current error, which a failed send would replace */
  snprintf(keep, sizeof keep, "%s", msg);
  int saved_code = ct_error_code();
  size_t n = strlen(keep);
  if (mig_send(fd, MIG_ERROR, keep, n) < 0) {
    ct_fail(0, "%s", keep);
    ct_set_error_code(saved_code);
  }
}

const char *mig_kv(const char *text, const char *key, char *buf, size_t len)
{
  size_t klen = strlen(key);
  for (const char *line = text; line && *line;) {
    const char *nl = strchr(line, '\n');
    size_t llen = nl ? (size_t)(nl - line) : strlen(line);
    if (llen > klen && strncmp(line, key, klen) == 0 && line[klen] == '=') {
      size_t vlen = llen - klen - 1;
      if (vlen >= len)
        vlen = len - 1;
      memcpy(buf, line + klen + 1, vlen);
      buf[vlen] = 0;
      return buf;
    }
    if (llen == klen + 1 && strncmp(line, key, klen) == 0 && line[klen] == '=') {
      buf[0] = 0;
      return buf;
    }
    line = nl ? nl + 1 : NULL;
  }
  return NULL;
}

int mig_kv_u64(const char *text, const char *key, uint64_t *out)
{
  char buf[32];
  if (!mig_kv(text, key, buf, sizeof buf))
    return ct_fail(0, "protocol error: message lacks %s", key);
  char *end;
  errno = 0;
  *out = strtoull(buf, &end, 10);
  if (errno || end == buf || *end)
    return ct_fail(0, "protocol error: %s=%s is not a number", key, buf);
  return 0;
}

char *mig_hex(const char *s)
{
  size_t n = strlen(s);
  char *out = malloc(2 * n + 1);
  if (!out)
    abort();
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", (unsigned char)s[i]);
  out[2 * n] = 0;
  return out;
}

char *mig_unhex(const char *hex)
{
  size_t n = strlen(hex);
  if (n % 2)
    return NULL;
  char *out = malloc(n / 2 + 1);
  if (!out)
    abort();
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1 || v == 0) {
      free(out);
      return NULL;
    }
    out[i] = (char)v;
  }
  out[n / 2] = 0;
  return out;
}
