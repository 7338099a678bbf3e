/* Helpers shared by the stream sender and receiver (stream-io.c): the wire
 * structs in host order, encoded and checked at the door, and full reads
 * and writes on pipes and sockets. Not installed. */
#ifndef PLOOP_STREAM_H
#define PLOOP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#include "stream-format.h"

struct stream_header {
  uint32_t version;
  uint64_t virtual_bytes;
  uint32_t cluster_bytes;
  uint32_t flags;
  char guid[39];      /* braced text */
  char base_guid[39]; /* PLOOP_NULL_GUID for a full stream */
  uint64_t data_clusters;
};

struct stream_frame {
  unsigned type, flags;
  uint64_t arg, length;
  uint32_t payload_bytes;
  uint64_t payload_hash;
  uint64_t checksum; /* of the header itself: what a round digest sums */
};

/* Bytes that move through an fd; counted for the stats. */
struct stream_fd {
  int fd;
  uint64_t bytes;
  bool not_socket; /* writes: sendmsg said ENOTSOCK once */
};

void stream_header_encode(const struct stream_header *h, struct ploop_stream_header *raw);
/* Checks magic, version, checksum and every field's range. */
int stream_header_decode(const struct ploop_stream_header *raw, struct stream_header *h);
/* Fills F->checksum. */
void stream_frame_encode(struct stream_frame *f, struct ploop_stream_frame *raw);
/* Checks magic and checksum, and the fields against header H. FRAME_NO is for messages. */
int stream_frame_decode(const struct ploop_stream_frame *raw, const struct stream_header *h,
                        uint64_t frame_no, struct stream_frame *f);

/* 16 wire bytes <-> braced text. */
void stream_guid_to_wire(const char *text, uint8_t out[16]);
void stream_guid_from_wire(const uint8_t in[16], char out[39]);

/* Full write; retries on EINTR and short writes. */
int stream_write_full(struct stream_fd *s, const void *buf, size_t len);
int stream_writev_full(struct stream_fd *s, const void *a, size_t alen, const void *b, size_t blen);
/* Reads exactly LEN bytes; an early end of the stream is an error naming WHAT. */
int stream_read_full(struct stream_fd *s, void *buf, size_t len, const char *what);

/* True when a checksum read from the stream matches the one computed. A
 * fuzzing build (tests/fuzz, FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) takes
 * every checksum as matching, so the fuzzer reaches the decoding behind
 * them; no other build defines that. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define stream_sum_ok(got, want) ((void)(got), (void)(want), true)
#else
#define stream_sum_ok(got, want) ((got) == (want))
#endif

static inline uint64_t stream_hash(const void *p, size_t len)
{
  return XXH3_64bits(p, len);
}

#endif
