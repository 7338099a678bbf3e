/* Unit tests of kmod-free-nbd/server/nbd-protocol.h: the wire structs encode
 * to the exact bytes the NBD protocol document gives, and the big-endian
 * helpers read unaligned network data correctly. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "../../kmod-free-nbd/server/nbd-protocol.h"

Test(nbd_protocol, request_header_bytes) {
  /* C: magic, flags FUA, type WRITE, cookie, offset 0x1000, length 512. */
  struct nbd_request r = {
      .magic = nbd_be32(NBD_REQUEST_MAGIC),
      .flags = nbd_be16(NBD_CMD_FLAG_FUA),
      .type = nbd_be16(NBD_CMD_WRITE),
      .cookie = nbd_be64(0x0102030405060708ULL),
      .offset = nbd_be64(0x1000),
      .count = nbd_be32(512),
  };
  static const uint8_t want[28] = {0x25, 0x60, 0x95, 0x13, 0x00, 0x01, 0x00, 0x01, 0x01, 0x02,
                                   0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x00, 0x00, 0x00, 0x00,
                                   0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x02, 0x00};
  cr_assert_eq(sizeof r, sizeof want);
  cr_assert_arr_eq(&r, want, sizeof want);
}

Test(nbd_protocol, handshake_magics_spell_their_names) {
  struct nbd_new_handshake h = {.nbdmagic = nbd_be64(NBD_MAGIC),
                                .version = nbd_be64(NBD_OPTS_MAGIC),
                                .gflags = nbd_be16(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES)};
  cr_assert_arr_eq(&h, "NBDMAGICIHAVEOPT\x00\x03", 18);
}

Test(nbd_protocol, option_reply_magic_and_error_bit) {
  struct nbd_option_reply r = {.magic = nbd_be64(NBD_REP_MAGIC),
                               .option = nbd_be32(NBD_OPT_GO),
                               .reply = nbd_be32(NBD_REP_ERR_UNKNOWN),
                               .replylen = 0};
  static const uint8_t want[20] = {0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0,
                                   7,    0x80, 0,    0,    6,    0,    0,    0,    0};
  cr_assert_arr_eq(&r, want, sizeof want);
  cr_assert_eq(NBD_REP_ERR_UNSUP, 0x80000001u);
  cr_assert_eq(NBD_REP_ERR_BLOCK_SIZE_REQD, 0x80000008u);
}

Test(nbd_protocol, structured_chunk_and_error_types) {
  struct nbd_structured_reply c = {.magic = nbd_be32(NBD_STRUCTURED_REPLY_MAGIC),
                                   .flags = nbd_be16(NBD_REPLY_FLAG_DONE),
                                   .type = nbd_be16(NBD_REPLY_TYPE_ERROR),
                                   .cookie = 0,
                                   .length = nbd_be32(6)};
  const uint8_t *b = (const uint8_t *)&c;
  cr_assert_eq(b[0], 0x66);
  cr_assert_eq(b[3], 0xef);
  cr_assert_eq(b[5], 1);   /* DONE */
  cr_assert_eq(b[6], 0x80); /* 2^15 + 1 */
  cr_assert_eq(b[7], 0x01);
  cr_assert_eq(b[19], 6);
}

Test(nbd_protocol, export_info_layout) {
  struct nbd_info_export e = {.info = nbd_be16(NBD_INFO_EXPORT),
                              .exportsize = nbd_be64(1ULL << 30),
                              .eflags = nbd_be16(NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY)};
  static const uint8_t want[12] = {0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 3};
  cr_assert_arr_eq(&e, want, sizeof want);
}

Test(nbd_protocol, unaligned_reads) {
  uint8_t buf[16] = {0xff, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc};
  cr_assert_eq(nbd_get32(buf + 1), 0x12345678u);
  cr_assert_eq(nbd_get16(buf + 5), 0x9abcu);
  cr_assert_eq(nbd_h64(nbd_be64(0x1122334455667788ULL)), 0x1122334455667788ULL);
  cr_assert_eq(nbd_h32(nbd_be32(0xdeadbeefu)), 0xdeadbeefu);
  cr_assert_eq(nbd_h16(nbd_be16(0xbeefu)), 0xbeefu);
}
