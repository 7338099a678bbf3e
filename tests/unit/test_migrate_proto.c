/* Unit tests of the migration protocol's framing (tools/ploop-container/
 * migrate-proto.c, formats/migration-protocol.md): messages round-trip over
 * a socket pair, and a damaged, truncated or oversized frame is refused
 * with a one-line reason instead of being handed on. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

/* TLS under the protocol (migrate-tls.c), over real TCP on 127.0.0.1: the
 * destination is a child process (the TLS setup is per process). The link
 * idles longer than the 1 s timeout while neither side reads, and still
 * carries the next message; TCP options land on the socket beneath the
 * relay; the peer's mig_close is a clean end. */
#define TLS_TEST_ADDR "127.0.0.1:21540"

static void write_psk(char *path)
{
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  const char *k = "alice:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  cr_assert_eq(write(fd, k, strlen(k)), (ssize_t)strlen(k));
  close(fd);
}

static void tls_destination(const char *psk, int ready)
{
  struct mig_tls_args a = {.o.psk_file = psk};
  int lfd = mig_tls_setup(&a, true) < 0 ? -1 : mig_listen(TLS_TEST_ADDR);
  if (write(ready, "x", 1) != 1 || lfd < 0)
    _exit(2);
  int fd = mig_tls_accept(accept4(lfd, NULL, NULL, SOCK_CLOEXEC), 1);
  unsigned t;
  char *p = NULL;
  if (fd < 0 || mig_set_timeout(fd, 1) < 0 || mig_recv(fd, &t, &p, NULL) < 0 || t != MIG_HELLO)
    _exit(3);
  sleep(2); /* idle: nothing to read for either relay */
  if (mig_send_text(fd, MIG_WELCOME, p) < 0)
    _exit(4);
  mig_close(fd);
  _exit(0);
}

Test(migrate_tls, psk_link_idles_and_ends_cleanly, .timeout = 30)
{
  signal(SIGPIPE, SIG_IGN);
  char psk[] = "/tmp/test-migrate-tls.XXXXXX";
  write_psk(psk);
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0)
    tls_destination(psk, ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1);
  struct mig_tls_args a = {.o.psk_file = psk};
  cr_assert_eq(mig_tls_setup(&a, false), 0, "%s", ct_error());
  int fd = mig_connect(TLS_TEST_ADDR, 1);
  cr_assert_geq(fd, 0, "%s", ct_error());
  int net = mig_tls_net_fd(fd);
  cr_assert_neq(net, fd, "no relay beneath the connection");
  unsigned ut = 0;
  socklen_t sl = sizeof ut;
  cr_assert_eq(getsockopt(net, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, &sl), 0);
  cr_assert_eq(ut, 1000, "TCP_USER_TIMEOUT on the socket: %u", ut);
  cr_assert_eq(mig_send_text(fd, MIG_HELLO, "name=web\n"), 0);
  sleep(3); /* we do not read either: only the relays hold the link */
  char *p;
  cr_assert_eq(mig_expect(fd, MIG_WELCOME, &p, NULL), 0, "%s", ct_error());
  cr_assert_str_eq(p, "name=web\n");
  free(p);
  unsigned t;
  cr_assert_eq(mig_recv(fd, &t, &p, NULL), -1);
  cr_assert(strstr(ct_error(), "the peer closed the connection"), "%s", ct_error());
  mig_close(fd);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "destination: status %d", st);
  unlink(psk);
}

Test(migrate_tls, refused_combinations)
{
  struct mig_tls_args a = {.mode = "off", .o.psk_file = "/nonexistent"};
  cr_assert_eq(mig_tls_setup(&a, true), -1);
  a = (struct mig_tls_args){.mode = "require"};
  cr_assert_eq(mig_tls_setup(&a, true), -1);
  a = (struct mig_tls_args){.o.psk_file = "/nonexistent"};
  cr_assert_eq(mig_tls_setup(&a, false), -1);
  cr_assert(strstr(ct_error(), "/nonexistent"), "%s", ct_error());
  a = (struct mig_tls_args){.o.cert_dir = "/tmp", .o.verify_peer = true};
  cr_assert_eq(mig_tls_setup(&a, false), -1);
  cr_assert(strstr(ct_error(), "--tls-verify-peer"), "%s", ct_error());
  cr_assert_eq(mig_tls_net_fd(7), 7);
  cr_assert_null(mig_tls_link_error(7));
}
