/* The FUSE kernel ABI our own session speaks: the base protocol from the
 * system's <linux/fuse.h> (7.38 on Debian 12) plus the FUSE-over-io_uring
 * additions of protocol 7.42 (Linux 6.14), which that header lacks. */
#ifndef PLOOP_FUSE_ABI_H
#define PLOOP_FUSE_ABI_H

#include <assert.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>

/* The minor version we answer INIT with: 7.42 is the first with io_uring;
 * nothing we use changed after it. */
#define PLOOP_FUSE_MINOR 42

#ifndef FUSE_OVER_IO_URING
/* init flags bit 41: lives in flags2 (bits 32..63 of the flags, shifted). */
#define FUSE_OVER_IO_URING (1ULL << 41)
#endif
#define PLOOP_FUSE_FLAGS2_URING ((uint32_t)(FUSE_OVER_IO_URING >> 32))

/* The rest mirrors include/uapi/linux/fuse.h of Linux 6.18 (io_uring part,
 * unchanged since 6.14). */
#define PLOOP_FUSE_URING_IN_OUT_HEADER_SZ 128
#define PLOOP_FUSE_URING_OP_IN_OUT_SZ 128

struct ploop_fuse_uring_ent_in_out {
  uint64_t flags;
  uint64_t commit_id; /* the request's unique, echoed back in the commit */
  uint32_t payload_sz; /* bytes used in the payload buffer, either way */
  uint32_t padding;
  uint64_t reserved;
};

/* iov[0] of a ring entry: the kernel writes fuse_in_header + the opcode's
 * fixed argument here, we write fuse_out_header back. */
struct ploop_fuse_uring_req_header {
  char in_out[PLOOP_FUSE_URING_IN_OUT_HEADER_SZ];
  char op_in[PLOOP_FUSE_URING_OP_IN_OUT_SZ];
  struct ploop_fuse_uring_ent_in_out ring_ent_in_out;
};

enum ploop_fuse_uring_cmd {
  PLOOP_FUSE_IO_URING_CMD_REGISTER = 1,         /* give buffers, wait for a request */
  PLOOP_FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2, /* reply, wait for the next */
};

/* In the 80-byte command area of a 128-byte SQE. */
struct ploop_fuse_uring_cmd_req {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid; /* the queue = the CPU whose requests this entry serves */
  uint8_t padding[6];
};

static_assert(sizeof(struct fuse_in_header) == 40, "fuse_in_header");
static_assert(sizeof(struct fuse_out_header) == 16, "fuse_out_header");
static_assert(sizeof(struct fuse_init_out) == 64, "fuse_init_out");
static_assert(sizeof(struct fuse_write_in) == 40, "fuse_write_in");
static_assert(sizeof(struct fuse_read_in) == 40, "fuse_read_in");
static_assert(sizeof(struct ploop_fuse_uring_ent_in_out) == 32, "fuse_uring_ent_in_out");
static_assert(sizeof(struct ploop_fuse_uring_req_header) == 288, "fuse_uring_req_header");
static_assert(offsetof(struct ploop_fuse_uring_req_header, ring_ent_in_out) == 256,
              "fuse_uring_req_header.ring_ent_in_out");
static_assert(sizeof(struct ploop_fuse_uring_cmd_req) == 24, "fuse_uring_cmd_req");

#endif
