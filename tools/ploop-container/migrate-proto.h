/* The migration protocol of `ploop-container migrate` / `receive`
 * (formats/migration-protocol.md): framed, XXH3-checksummed messages over
 * one TCP connection, with disk streams (ploop_send / ploop_receive) in
 * between. Text payloads are "key=value" lines; values that may hold any
 * byte (the command's arguments) are hex. */
#ifndef CT_MIGRATE_PROTO_H
#define CT_MIGRATE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "migrate-tls.h" /* mig_close; mig_connect speaks TLS when set up */

#define MIG_VERSION 1
#define MIG_MAX_PAYLOAD (1u << 20)
#define MIG_HDR_LEN 24

enum mig_type {
  MIG_HELLO = 1,     /* src->dst: version, id, name, config, limits, command */
  MIG_WELCOME = 2,   /* dst->src: accepted */
  MIG_ERROR = 3,     /* either way: one line, then the sender closes */
  MIG_ROUND = 4,     /* src->dst: round=N guid= since= final=; one disk stream follows */
  MIG_ROUND_ACK = 5, /* dst->src: round=N guid= bytes= */
  MIG_FILE = 6,      /* src->dst: name= size= xxh3=; DATA frames follow (CRIU images) */
  MIG_DATA = 7,      /* raw bytes of the current file */
  MIG_PREPARE = 8,   /* src->dst: everything sent; make the container ready */
  MIG_READY = 9,     /* dst->src: prepared, nothing runs yet */
  MIG_COMMIT = 10,   /* src->dst: run it */
  MIG_COMMITTED = 11,/* dst->src: state=running (or error=...) */
  MIG_QUERY = 12,    /* resolve: id= name= */
  MIG_STATUS = 13,   /* dst->src: state=committed|pending|unknown */
  MIG_CHALLENGE = 14,/* dst->src after HELLO, with --auth: nonce= */
  MIG_AUTH = 15,     /* src->dst: proof= (HMAC of the token over both nonces) */
  MIG_DONE = 16,     /* src->dst: COMMITTED received and the source's copy gone: no doubt left */
  MIG_ATTACH = 17,   /* src->dst: after round 0: attach the disk now (WELCOME offered preattach=1) */
  MIG_ATTACHED = 18, /* dst->src: attach_ms=; later rounds go through the attached disk */
  MIG_HANDOVER = 19, /* src->dst: the shared disk is released here (no rounds): take it */
};

const char *mig_type_name(unsigned type);

/* Socket timeouts (SO_RCVTIMEO/SO_SNDTIMEO + TCP_USER_TIMEOUT): a cut link
 * turns into an error after SECONDS instead of a hang. */
int mig_set_timeout(int fd, unsigned seconds);
/* "ADDR:PORT" or "[V6ADDR]:PORT" (numeric or a host name). */
int mig_connect(const char *addr_port, unsigned timeout_s);
int mig_listen(const char *addr_port);

int mig_send(int fd, unsigned type, const void *payload, size_t len);
int mig_send_text(int fd, unsigned type, const char *text);
/* Reads one message; *PAYLOAD is malloc'd and NUL-terminated (caller frees).
 * A bad magic, length or checksum is an error naming the problem. A
 * MIG_ERROR from the peer becomes our error ("peer: ..."), returned as -1. */
int mig_recv(int fd, unsigned *type, char **payload, size_t *len);
/* mig_recv that also requires TYPE. */
int mig_expect(int fd, unsigned type, char **payload, size_t *len);
/* Best effort: tells the peer why we stop (the current error). */
void mig_send_error(int fd, const char *msg);

int mig_write_all(int fd, const void *buf, size_t len);
int mig_read_all(int fd, void *buf, size_t len);

/* key=value payload helpers. Returns a pointer into TEXT's copy in BUF, or
 * NULL when KEY is absent. */
const char *mig_kv(const char *text, const char *key, char *buf, size_t len);
int mig_kv_u64(const char *text, const char *key, uint64_t *out);
/* Hex encode/decode of arbitrary bytes (command arguments). */
char *mig_hex(const char *s);
char *mig_unhex(const char *hex);

uint64_t mig_xxh3(const void *buf, size_t len);

#endif
