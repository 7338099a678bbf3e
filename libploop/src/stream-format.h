/* The ploop disk stream on the wire (formats/ploop-stream.md): one stream
 * header, then frames, each a fixed header and an optional payload.
 * Everything is little-endian; conversions happen at the door (stream-io.c). */
#ifndef PLOOP_STREAM_FORMAT_H
#define PLOOP_STREAM_FORMAT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define PLOOP_STREAM_MAGIC "PLOOPSTM"
#define PLOOP_STREAM_MAGIC_LEN 8
#define PLOOP_STREAM_VERSION 1u

/* Stream header flags. */
#define PLOOP_STREAM_INCREMENTAL 0x1u /* applies to a copy holding base_guid */
#define PLOOP_STREAM_SNAPSHOTS 0x2u   /* a snapshot frame opens every layer */
#define PLOOP_STREAM_COMPRESSED 0x4u  /* frames may carry deflated payloads */
#define PLOOP_STREAM_KNOWN_FLAGS 0x7u

struct ploop_stream_header {
  char magic[8];          /* "PLOOPSTM" */
  uint32_t version;       /* PLOOP_STREAM_VERSION */
  uint32_t header_bytes;  /* sizeof this struct: 96 */
  uint64_t virtual_bytes; /* the disk's size in the carried state */
  uint32_t cluster_bytes; /* power of two, 32 KiB .. 64 MiB */
  uint32_t flags;         /* PLOOP_STREAM_* */
  uint8_t guid[16];       /* the state carried (RFC 4122 byte order) */
  uint8_t base_guid[16];  /* the state it starts from; zeros = full */
  uint64_t data_clusters; /* data frames to follow (for progress; 0 = unknown) */
  uint8_t reserved[16];   /* zero */
  uint64_t checksum;      /* XXH3-64 of the 88 bytes before it */
} __attribute__((packed));

static_assert(sizeof(struct ploop_stream_header) == 96, "stream header is 96 bytes");
static_assert(offsetof(struct ploop_stream_header, version) == 8, "version");
static_assert(offsetof(struct ploop_stream_header, virtual_bytes) == 16, "virtual_bytes");
static_assert(offsetof(struct ploop_stream_header, cluster_bytes) == 24, "cluster_bytes");
static_assert(offsetof(struct ploop_stream_header, flags) == 28, "flags");
static_assert(offsetof(struct ploop_stream_header, guid) == 32, "guid");
static_assert(offsetof(struct ploop_stream_header, base_guid) == 48, "base_guid");
static_assert(offsetof(struct ploop_stream_header, data_clusters) == 64, "data_clusters");
static_assert(offsetof(struct ploop_stream_header, checksum) == 88, "header checksum");

/* Frame types. */
enum ploop_frame_type {
  PLOOP_FRAME_DATA = 1,     /* arg = virtual cluster, length = bytes of data */
  PLOOP_FRAME_ZERO = 2,     /* arg = first cluster, length = number of clusters */
  PLOOP_FRAME_SNAPSHOT = 3, /* payload: struct ploop_stream_snapshot */
  PLOOP_FRAME_ROUND = 4,    /* arg = digest of the round, length = frames in it */
  PLOOP_FRAME_END = 5,      /* arg = frames before it, length = data frames */
};
/* Frame flags. */
#define PLOOP_FRAME_DEFLATED 0x1u /* the payload is zlib data of LENGTH bytes */

struct ploop_stream_frame {
  uint32_t magic;         /* PLOOP_FRAME_MAGIC: a reader out of step fails at once */
  uint16_t type;          /* enum ploop_frame_type */
  uint16_t flags;         /* PLOOP_FRAME_* */
  uint64_t arg;           /* per type */
  uint64_t length;        /* per type */
  uint32_t payload_bytes; /* bytes that follow this header on the wire */
  uint32_t reserved;      /* zero */
  uint64_t payload_hash;  /* XXH3-64 of the payload after inflating; 0 without payload */
  uint64_t checksum;      /* XXH3-64 of the 40 bytes before it */
} __attribute__((packed));

#define PLOOP_FRAME_MAGIC 0x4d524650u /* "PFRM" as bytes on the wire */

static_assert(sizeof(struct ploop_stream_frame) == 48, "frame header is 48 bytes");
static_assert(offsetof(struct ploop_stream_frame, type) == 4, "type");
static_assert(offsetof(struct ploop_stream_frame, flags) == 6, "flags");
static_assert(offsetof(struct ploop_stream_frame, arg) == 8, "arg");
static_assert(offsetof(struct ploop_stream_frame, length) == 16, "length");
static_assert(offsetof(struct ploop_stream_frame, payload_bytes) == 24, "payload_bytes");
static_assert(offsetof(struct ploop_stream_frame, payload_hash) == 32, "payload_hash");
static_assert(offsetof(struct ploop_stream_frame, checksum) == 40, "frame checksum");

/* Payload of a snapshot frame: the layer that follows. */
struct ploop_stream_snapshot {
  uint8_t guid[16];   /* the snapshot this layer's clusters complete */
  uint8_t parent[16]; /* the state below it (zeros: none) */
} __attribute__((packed));

static_assert(sizeof(struct ploop_stream_snapshot) == 32, "snapshot payload is 32 bytes");

#endif
