/* Unit tests of the migration protocol's framing (tools/ploop-container/
 * migrate-proto.c, formats/migration-protocol.md): messages round-trip over
 * a socket pair, and a damaged, truncated or oversized frame is refused
 * with a one-line reason instead of being handed on. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../tools/ploop-container/error.c"
#include "../../tools/ploop-container/migrate-proto.c"
#include "../../tools/ploop-container/migrate-tls.c"
#include "../../tls/ploop-tls.c"
#include "../../tls/tls-relay.c"

static int sv[2];

static void pair_setup(void)
{
  signal(SIGPIPE, SIG_IGN);
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void pair_teardown(void)
{
  if (sv[0] >= 0)
    close(sv[0]);
  if (sv[1] >= 0)
    close(sv[1]);
}

TestSuite(migrate_proto, .init = pair_setup, .fini = pair_teardown, .timeout = 10);

/* The bytes one mig_send puts on the wire (read back from the pair). */
static size_t frame_bytes(unsigned type, const char *payload, unsigned char *out, size_t cap)
{
  cr_assert_eq(mig_send_text(sv[0], type, payload), 0);
  size_t want = MIG_HDR_LEN + strlen(payload);
  cr_assert(want <= cap);
  cr_assert_eq(mig_read_all(sv[1], out, want), 0);
  return want;
}

Test(migrate_proto, round_trip)
{
  cr_assert_eq(mig_send_text(sv[0], MIG_ROUND, "round=3\nguid={x}\nfinal=1\n"), 0);
  cr_assert_eq(mig_send(sv[0], MIG_COMMIT, NULL, 0), 0);
  unsigned t;
  char *p;
  size_t len;
  cr_assert_eq(mig_recv(sv[1], &t, &p, &len), 0);
  cr_assert_eq(t, MIG_ROUND);
  cr_assert_eq(len, strlen("round=3\nguid={x}\nfinal=1\n"));
  uint64_t v;
  char buf[16];
  cr_assert_eq(mig_kv_u64(p, "round", &v), 0);
  cr_assert_eq(v, 3);
  cr_assert_str_eq(mig_kv(p, "guid", buf, sizeof buf), "{x}");
  cr_assert_null(mig_kv(p, "round_", buf, sizeof buf));
  free(p);
  cr_assert_eq(mig_expect(sv[1], MIG_COMMIT, &p, &len), 0);
  cr_assert_eq(len, 0);
  free(p);
}

Test(migrate_proto, header_layout)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_READY, "ab", f, sizeof f);
  cr_assert_eq(n, MIG_HDR_LEN + 2);
  cr_assert_arr_eq(f, "PCM1", 4);
  cr_assert_eq(f[4] | f[5] << 8, MIG_READY);
  cr_assert_eq(f[8], 2); /* payload length, little-endian */
  cr_assert_arr_eq(f + MIG_HDR_LEN, "ab", 2);
}

/* Writes RAW to the pair and expects mig_recv to refuse it with WHY in the error. */
static void expect_refused(const unsigned char *raw, size_t len, const char *why)
{
  cr_assert_eq(mig_write_all(sv[0], raw, len), 0);
  shutdown(sv[0], SHUT_WR);
  unsigned t;
  char *p = (char *)1;
  cr_assert_eq(mig_recv(sv[1], &t, &p, NULL), -1);
  cr_assert_null(p);
  cr_assert(strstr(ct_error(), why), "error '%s' does not say '%s'", ct_error(), why);
  cr_assert_null(strchr(ct_error(), '\n'), "more than one line: %s", ct_error());
}

Test(migrate_proto, flipped_payload_bit_refused)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_ROUND_ACK, "round=1\nguid=g\n", f, sizeof f);
  f[MIG_HDR_LEN + 6] ^= 0x01; /* round=1 -> round=0 */
  expect_refused(f, n, "checksum mismatch");
}

Test(migrate_proto, flipped_type_refused)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_PREPARE, "criu=0\n", f, sizeof f);
  f[4] = MIG_COMMIT; /* the digest covers the type: PREPARE cannot turn into COMMIT */
  expect_refused(f, n, "checksum mismatch");
}

Test(migrate_proto, flipped_digest_refused)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_WELCOME, "version=1\n", f, sizeof f);
  f[20] ^= 0x80;
  expect_refused(f, n, "checksum mismatch");
}

Test(migrate_proto, bad_magic_refused)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_HELLO, "version=1\n", f, sizeof f);
  f[0] = 'X';
  expect_refused(f, n, "bad message magic");
}

Test(migrate_proto, oversized_length_refused_before_reading)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_FILE, "x", f, sizeof f);
  f[8] = 0xff, f[9] = 0xff, f[10] = 0xff, f[11] = 0x7f;
  expect_refused(f, n, "over the");
}

Test(migrate_proto, truncated_payload_refused)
{
  unsigned char f[64];
  size_t n = frame_bytes(MIG_ROUND, "round=0\nfinal=0\n", f, sizeof f);
  expect_refused(f, n - 3, "closed the connection");
}

Test(migrate_proto, truncated_header_refused)
{
  unsigned char f[64];
  frame_bytes(MIG_READY, "", f, sizeof f);
  expect_refused(f, MIG_HDR_LEN - 1, "closed the connection");
}

Test(migrate_proto, peer_error_becomes_ours)
{
  mig_send_error(sv[0], "disk full");
  unsigned t;
  char *p;
  cr_assert_eq(mig_recv(sv[1], &t, &p, NULL), -1);
  cr_assert_str_eq(ct_error(), "peer: disk full");
}

Test(migrate_proto, unexpected_type_refused)
{
  cr_assert_eq(mig_send_text(sv[0], MIG_READY, ""), 0);
  char *p;
  cr_assert_eq(mig_expect(sv[1], MIG_COMMITTED, &p, NULL), -1);
  cr_assert_null(p);
  cr_assert(strstr(ct_error(), "expected COMMITTED, got READY"), "%s", ct_error());
}

Test(migrate_proto, too_large_to_send)
{
  char *big = calloc(1, MIG_MAX_PAYLOAD + 2);
  cr_assert_eq(mig_send(sv[0], MIG_DATA, big, MIG_MAX_PAYLOAD + 1), -1);
  free(big);
}

Test(migrate_proto, kv_numbers)
{
  uint64_t v;
  cr_assert_eq(mig_kv_u64("a=12\nb=x\nc=\n", "a", &v), 0);
  cr_assert_eq(v, 12);
  cr_assert_eq(mig_kv_u64("a=12\nb=x\nc=\n", "b", &v), -1);
  cr_assert_eq(mig_kv_u64("a=12\nb=x\nc=\n", "c", &v), -1);
  cr_assert_eq(mig_kv_u64("a=12\n", "missing", &v), -1);
  char buf[4];
  cr_assert_str_eq(mig_kv("long=abcdef\n", "long", buf, sizeof buf), "abc"); /* cut, never overrun */
}

Test(migrate_proto, hex_round_trip)
{
  const char *s = "sh -c 'echo \"a b\"'\n\t\x7f\xff";
  char *h = mig_hex(s);
  cr_assert_eq(strspn(h, "0123456789abcdef"), strlen(h));
  char *back = mig_unhex(h);
  cr_assert_str_eq(back, s);
  free(h);
  free(back);
  cr_assert_null(mig_unhex("abc"));  /* odd length */
  cr_assert_null(mig_unhex("4100")); /* an embedded NUL */
  cr_assert_null(mig_unhex("zz"));
}
