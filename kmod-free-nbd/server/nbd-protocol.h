/* The NBD wire protocol (fixed newstyle handshake + transmission): every
 * magic, flag and packed struct the server speaks, with size checks and the
 * big-endian helpers used at the socket boundary.  Source: NBD doc/proto.md. */
#ifndef PLOOP_NBD_PROTOCOL_H
#define PLOOP_NBD_PROTOCOL_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>

/* ---- handshake ------------------------------------------------------ */

#define NBD_MAGIC 0x4e42444d41474943ULL     /* "NBDMAGIC" */
#define NBD_OPTS_MAGIC 0x49484156454F5054ULL /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ULL  /* option reply */

/* Handshake flags (server -> client, u16). */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)
/* Client flags (client -> server, u32). */
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)

/* Options. */
#define NBD_OPT_EXPORT_NAME 1
#define NBD_OPT_ABORT 2
#define NBD_OPT_LIST 3
#define NBD_OPT_PEEK_EXPORT 4 /* withdrawn */
#define NBD_OPT_STARTTLS 5
#define NBD_OPT_INFO 6
#define NBD_OPT_GO 7
#define NBD_OPT_STRUCTURED_REPLY 8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT 10
#define NBD_OPT_EXTENDED_HEADERS 11

/* Option reply types; errors have bit 31 set. */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR(n) ((1u << 31) | (n))
#define NBD_REP_ERR_UNSUP NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID NBD_REP_ERR(3)
#define NBD_REP_ERR_PLATFORM NBD_REP_ERR(4)
#define NBD_REP_ERR_TLS_REQD NBD_REP_ERR(5)
#define NBD_REP_ERR_UNKNOWN NBD_REP_ERR(6)
#define NBD_REP_ERR_SHUTDOWN NBD_REP_ERR(7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD NBD_REP_ERR(8)
#define NBD_REP_ERR_TOO_BIG NBD_REP_ERR(9)

/* NBD_OPT_INFO / NBD_OPT_GO information types. */
#define NBD_INFO_EXPORT 0
#define NBD_INFO_NAME 1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE 3

/* Transmission flags (u16, per export). */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_RESIZE (1u << 9)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)

/* Protocol limits (strings MUST be <= 4096 bytes). */
#define NBD_MAX_STRING 4096u

/* ---- transmission --------------------------------------------------- */

#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3
#define NBD_CMD_TRIM 4
#define NBD_CMD_CACHE 5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7

#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

#define NBD_REPLY_FLAG_DONE (1u << 0)

#define NBD_REPLY_TYPE_NONE 0
#define NBD_REPLY_TYPE_OFFSET_DATA 1
#define NBD_REPLY_TYPE_OFFSET_HOLE 2
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_ERROR ((1u << 15) + 1)
#define NBD_REPLY_TYPE_ERROR_OFFSET ((1u << 15) + 2)

/* base:allocation status bits. */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* Error values on the wire (not the host's errno numbering by contract). */
#define NBD_EPERM 1
#define NBD_EIO 5
#define NBD_ENOMEM 12
#define NBD_EINVAL 22
#define NBD_ENOSPC 28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP 95
#define NBD_ESHUTDOWN 108

/* ---- packed wire structs (all fields big-endian) --------------------- */

struct nbd_new_handshake {
  uint64_t nbdmagic;      /* NBD_MAGIC */
  uint64_t version;       /* NBD_OPTS_MAGIC */
  uint16_t gflags;        /* handshake flags */
} __attribute__((packed));

struct nbd_option_header {
  uint64_t version;       /* NBD_OPTS_MAGIC */
  uint32_t option;
  uint32_t optlen;
} __attribute__((packed));

struct nbd_option_reply {
  uint64_t magic;         /* NBD_REP_MAGIC */
  uint32_t option;
  uint32_t reply;
  uint32_t replylen;
} __attribute__((packed));

/* NBD_OPT_EXPORT_NAME's reply: size + flags, then 124 zero bytes unless
 * NO_ZEROES was negotiated. */
struct nbd_export_name_reply {
  uint64_t exportsize;
  uint16_t eflags;
  uint8_t zeroes[124];
} __attribute__((packed));

struct nbd_info_export {
  uint16_t info;          /* NBD_INFO_EXPORT */
  uint64_t exportsize;
  uint16_t eflags;
} __attribute__((packed));

struct nbd_info_block_size {
  uint16_t info;          /* NBD_INFO_BLOCK_SIZE */
  uint32_t minimum;
  uint32_t preferred;
  uint32_t maximum;
} __attribute__((packed));

struct nbd_request {
  uint32_t magic;         /* NBD_REQUEST_MAGIC */
  uint16_t flags;
  uint16_t type;
  uint64_t cookie;
  uint64_t offset;
  uint32_t count;
} __attribute__((packed));

struct nbd_simple_reply {
  uint32_t magic;         /* NBD_SIMPLE_REPLY_MAGIC */
  uint32_t error;
  uint64_t cookie;
} __attribute__((packed));

struct nbd_structured_reply {
  uint32_t magic;         /* NBD_STRUCTURED_REPLY_MAGIC */
  uint16_t flags;
  uint16_t type;
  uint64_t cookie;
  uint32_t length;        /* payload bytes that follow */
} __attribute__((packed));

struct nbd_chunk_offset_data {
  uint64_t offset;        /* data follows */
} __attribute__((packed));

struct nbd_chunk_offset_hole {
  uint64_t offset;
  uint32_t length;
} __attribute__((packed));

struct nbd_chunk_error {
  uint32_t error;
  uint16_t len;           /* message bytes that follow */
} __attribute__((packed));

struct nbd_block_descriptor {
  uint32_t length;
  uint32_t status_flags;
} __attribute__((packed));

_Static_assert(sizeof(struct nbd_new_handshake) == 18, "handshake");
_Static_assert(sizeof(struct nbd_option_header) == 16, "option header");
_Static_assert(sizeof(struct nbd_option_reply) == 20, "option reply");
_Static_assert(offsetof(struct nbd_option_reply, replylen) == 16, "option reply len");
_Static_assert(sizeof(struct nbd_export_name_reply) == 134, "export name reply");
_Static_assert(sizeof(struct nbd_info_export) == 12, "info export");
_Static_assert(sizeof(struct nbd_info_block_size) == 14, "info block size");
_Static_assert(sizeof(struct nbd_request) == 28, "request");
_Static_assert(offsetof(struct nbd_request, type) == 6, "request type");
_Static_assert(offsetof(struct nbd_request, cookie) == 8, "request cookie");
_Static_assert(offsetof(struct nbd_request, offset) == 16, "request offset");
_Static_assert(offsetof(struct nbd_request, count) == 24, "request count");
_Static_assert(sizeof(struct nbd_simple_reply) == 16, "simple reply");
_Static_assert(sizeof(struct nbd_structured_reply) == 20, "structured reply");
_Static_assert(offsetof(struct nbd_structured_reply, length) == 16, "chunk length");
_Static_assert(sizeof(struct nbd_chunk_offset_hole) == 12, "hole chunk");
_Static_assert(sizeof(struct nbd_chunk_error) == 6, "error chunk");
_Static_assert(sizeof(struct nbd_block_descriptor) == 8, "block descriptor");

/* ---- byte order at the boundary ------------------------------------ */

static inline uint16_t nbd_be16(uint16_t v) { return htobe16(v); }
static inline uint32_t nbd_be32(uint32_t v) { return htobe32(v); }
static inline uint64_t nbd_be64(uint64_t v) { return htobe64(v); }
static inline uint16_t nbd_h16(uint16_t v) { return be16toh(v); }
static inline uint32_t nbd_h32(uint32_t v) { return be32toh(v); }
static inline uint64_t nbd_h64(uint64_t v) { return be64toh(v); }

/* Reads a big-endian integer from an unaligned byte pointer (option data). */
static inline uint32_t nbd_get32(const void *p) {
  uint32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return be32toh(v);
}
static inline uint16_t nbd_get16(const void *p) {
  uint16_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return be16toh(v);
}

#endif
