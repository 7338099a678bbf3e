/* The stream's wire structs checked and converted at the door, and the
 * full reads and writes both ends use on files, pipes and sockets. */
#include <endian.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "internal.h"
#include "stream.h"

void stream_guid_to_wire(const char *text, uint8_t out[16])
{
  char bare[37];
  memset(out, 0, 16);
  if (!text || strlen(text) != PLOOP_UUID_LEN)
    return;
  memcpy(bare, text + 1, 36);
  bare[36] = 0;
  if (uuid_parse(bare, out) < 0)
    memset(out, 0, 16);
}

void stream_guid_from_wire(const uint8_t in[16], char out[39])
{
  char bare[37];
  uuid_unparse_lower(in, bare);
  snprintf(out, 39, "{%s}", bare);
}

void stream_header_encode(const struct stream_header *h, struct ploop_stream_header *raw)
{
  memset(raw, 0, sizeof *raw);
  memcpy(raw->magic, PLOOP_STREAM_MAGIC, PLOOP_STREAM_MAGIC_LEN);
  raw->version = htole32(PLOOP_STREAM_VERSION);
  raw->header_bytes = htole32(sizeof *raw);
  raw->virtual_bytes = htole64(h->virtual_bytes);
  raw->cluster_bytes = htole32(h->cluster_bytes);
  raw->flags = htole32(h->flags);
  stream_guid_to_wire(h->guid, raw->guid);
  stream_guid_to_wire(h->base_guid, raw->base_guid);
  raw->data_clusters = htole64(h->data_clusters);
  raw->checksum = htole64(stream_hash(raw, offsetof(struct ploop_stream_header, checksum)));
}

static const uint8_t zero16[16];

int stream_header_decode(const struct ploop_stream_header *raw, struct stream_header *h)
{
  if (memcmp(raw->magic, PLOOP_STREAM_MAGIC, PLOOP_STREAM_MAGIC_LEN))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: not a ploop stream (bad magic)");
  memset(h, 0, sizeof *h);
  h->version = le32toh(raw->version);
  if (h->version != PLOOP_STREAM_VERSION)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: version %u is not supported (this is %u)",
                       h->version, PLOOP_STREAM_VERSION);
  if (!stream_sum_ok(le64toh(raw->checksum), stream_hash(raw, offsetof(struct ploop_stream_header, checksum))))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: checksum mismatch");
  if (le32toh(raw->header_bytes) != sizeof *raw)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: size %u, expected %zu",
                       le32toh(raw->header_bytes), sizeof *raw);
  h->virtual_bytes = le64toh(raw->virtual_bytes);
  h->cluster_bytes = le32toh(raw->cluster_bytes);
  h->flags = le32toh(raw->flags);
  h->data_clusters = le64toh(raw->data_clusters);
  uint64_t cs = h->cluster_bytes / 512;
  if (!is_pow2(h->cluster_bytes) || cs < PLOOP_MIN_CLUSTER_SECTORS || cs > PLOOP_MAX_CLUSTER_SECTORS)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: bad cluster size %u", h->cluster_bytes);
  if (h->virtual_bytes == 0 || h->virtual_bytes % 512 || h->virtual_bytes > PLOOP_MAX_VIRTUAL_BYTES)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: bad virtual size %llu",
                       (unsigned long long)h->virtual_bytes);
  if (div_round_up(h->virtual_bytes, h->cluster_bytes) > PLOOP_MAX_BAT_ENTRIES)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: %llu bytes in %u-byte clusters exceed the BAT limit",
                       (unsigned long long)h->virtual_bytes, h->cluster_bytes);
  if (h->flags & ~PLOOP_STREAM_KNOWN_FLAGS)
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: unknown flags 0x%x", h->flags);
  if (memcmp(raw->reserved, zero16, sizeof raw->reserved))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: reserved bytes set");
  if (!memcmp(raw->guid, zero16, 16))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: no GUID");
  bool incremental = h->flags & PLOOP_STREAM_INCREMENTAL;
  if (incremental != !!memcmp(raw->base_guid, zero16, 16))
    return ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: header: base GUID disagrees with the flags");
  stream_guid_from_wire(raw->guid, h->guid);
  stream_guid_from_wire(raw->base_guid, h->base_guid);
  return 0;
}

void stream_frame_encode(struct stream_frame *f, struct ploop_stream_frame *raw)
{
  memset(raw, 0, sizeof *raw);
  raw->magic = htole32(PLOOP_FRAME_MAGIC);
  raw->type = htole16((uint16_t)f->type);
  raw->flags = htole16((uint16_t)f->flags);
  raw->arg = htole64(f->arg);
  raw->length = htole64(f->length);
  raw->payload_bytes = htole32(f->payload_bytes);
  raw->payload_hash = htole64(f->payload_hash);
  f->checksum = stream_hash(raw, offsetof(struct ploop_stream_frame, checksum));
  raw->checksum = htole64(f->checksum);
}

#define BAD(...) ploop_error(PLOOP_ERR_CORRUPT, EINVAL, "stream: frame %llu: " __VA_ARGS__)

int stream_frame_decode(const struct ploop_stream_frame *raw, const struct stream_header *h,
                        uint64_t frame_no, struct stream_frame *f)
{
  unsigned long long n = frame_no;
  if (le32toh(raw->magic) != PLOOP_FRAME_MAGIC)
    return BAD("bad frame magic", n);
  f->checksum = stream_hash(raw, offsetof(struct ploop_stream_frame, checksum));
  if (!stream_sum_ok(le64toh(raw->checksum), f->checksum))
    return BAD("checksum mismatch", n);
  f->type = le16toh(raw->type);
  f->flags = le16toh(raw->flags);
  f->arg = le64toh(raw->arg);
  f->length = le64toh(raw->length);
  f->payload_bytes = le32toh(raw->payload_bytes);
  f->payload_hash = le64toh(raw->payload_hash);
  if (raw->reserved)
    return BAD("reserved bytes set", n);
  if (f->flags & ~PLOOP_FRAME_DEFLATED)
    return BAD("unknown flags 0x%x", n, f->flags);
  uint64_t cb = h->cluster_bytes, clusters = div_round_up(h->virtual_bytes, cb);
  bool deflated = f->flags & PLOOP_FRAME_DEFLATED;
  if (deflated && (f->type != PLOOP_FRAME_DATA || !(h->flags & PLOOP_STREAM_COMPRESSED)))
    return BAD("deflated payload not allowed here", n);
  switch (f->type) {
  case PLOOP_FRAME_DATA: {
    if (f->arg >= clusters)
      return BAD("cluster %llu is past the disk end", n, (unsigned long long)f->arg);
    uint64_t max = min_u64(cb, round_up(h->virtual_bytes - f->arg * cb, 512));
    if (f->length == 0 || f->length > max || f->length % 512)
      return BAD("bad data length %llu", n, (unsigned long long)f->length);
    if (deflated ? f->payload_bytes == 0 || f->payload_bytes >= f->length : f->payload_bytes != f->length)
      return BAD("bad payload size %u", n, f->payload_bytes);
    break;
  }
  case PLOOP_FRAME_ZERO:
    if (f->payload_bytes || f->length == 0 || f->arg >= clusters || f->length > clusters - f->arg)
      return BAD("bad zero range %llu+%llu", n, (unsigned long long)f->arg, (unsigned long long)f->length);
    break;
  case PLOOP_FRAME_SNAPSHOT:
    if (!(h->flags & PLOOP_STREAM_SNAPSHOTS) || f->payload_bytes != sizeof(struct ploop_stream_snapshot) ||
        f->arg || f->length)
      return BAD("bad snapshot frame", n);
    break;
  case PLOOP_FRAME_ROUND:
  case PLOOP_FRAME_END:
    if (f->payload_bytes)
      return BAD("bad %s frame", n, f->type == PLOOP_FRAME_END ? "end" : "round");
    break;
  default:
    return BAD("unknown frame type %u", n, f->type);
  }
  return 0;
}

int stream_write_full(struct stream_fd *s, const void *buf, size_t len)
{
  return stream_writev_full(s, buf, len, NULL, 0);
}

/* EAGAIN: a non-blocking fd handed to us is waited for, as a blocking one
 * would be; on a blocking socket it is the caller's SO_RCVTIMEO/SO_SNDTIMEO
 * running out, which ends the transfer (a migration's way to bound a stall). */
static int wait_fd(int fd, short ev)
{
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || !(fl & O_NONBLOCK)) {
    errno = ETIMEDOUT;
    return -1;
  }
  struct pollfd p = {.fd = fd, .events = ev};
  while (poll(&p, 1, -1) < 0)
    if (errno != EINTR || ploop_cancelled())
      return -1;
  return 0;
}

/* A socket is written with MSG_NOSIGNAL: a peer that went away is an
 * error for the caller, not a SIGPIPE that kills its process. */
static ssize_t write_some(struct stream_fd *s, struct iovec *v, int cnt)
{
  if (!s->not_socket) {
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)cnt};
    ssize_t w = sendmsg(s->fd, &m, MSG_NOSIGNAL);
    if (w >= 0 || errno != ENOTSOCK)
      return w;
    s->not_socket = true;
  }
  return writev(s->fd, v, cnt);
}

int stream_writev_full(struct stream_fd *s, const void *a, size_t alen, const void *b, size_t blen)
{
  struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
  struct iovec *v = iov;
  int cnt = blen ? 2 : 1;
  size_t left = alen + blen;
  while (left) {
    if (ploop_cancel_check() < 0)
      return -1;
    ssize_t w = write_some(s, v, cnt);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(s->fd, POLLOUT) == 0)
        continue;
      if (ploop_cancel_check() < 0)
        return -1;
      return ploop_error(PLOOP_ERR_IO, errno, "stream: write: %s", strerror(errno));
    }
    s->bytes += (uint64_t)w;
    left -= (size_t)w;
    while (cnt && (size_t)w >= v->iov_len) {
      w -= (ssize_t)v->iov_len;
      v++;
      cnt--;
    }
    if (cnt) {
      v->iov_base = (char *)v->iov_base + w;
      v->iov_len -= (size_t)w;
    }
  }
  return 0;
}

int stream_read_full(struct stream_fd *s, void *buf, size_t len, const char *what)
{
  uint8_t *p = buf;
  while (len) {
    if (ploop_cancel_check() < 0)
      return -1;
    ssize_t r = read(s->fd, p, len);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(s->fd, POLLIN) == 0)
        continue;
      if (ploop_cancel_check() < 0)
        return -1;
      return ploop_error(PLOOP_ERR_READ, errno, "stream: read: %s", strerror(errno));
    }
    if (r == 0)
      return ploop_error(PLOOP_ERR_CORRUPT, EPIPE, "stream: truncated in %s", what);
    s->bytes += (uint64_t)r;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}
