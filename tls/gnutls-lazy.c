/* GnuTLS, loaded on first use. Linked normally, libgnutls and the eight
 * libraries it needs (p11-kit, nettle, gmp, tasn1, idn2, ...) are mapped
 * and relocated, and its constructor initialises, at every start of every
 * binary: ~5 ms of CPU (perf stat) in each ploop-nbd that an attach forks,
 * where only --tls ever calls into it. So the binaries link this shim
 * instead of -lgnutls: each entry point ploop-tls.c uses forwards to the
 * real one, resolved with dlopen/dlsym the first time any is called. The
 * prototypes are the header's own (a mismatch does not compile). */
#include <dlfcn.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>

static void *lib;

static void *sym(const char *name)
{
  if (!lib) {
    lib = dlopen("libgnutls.so.30", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "cannot load GnuTLS: %s\n", dlerror());
      exit(1);
    }
  }
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "GnuTLS lacks %s\n", name);
    exit(1);
  }
  return p;
}

/* One forwarding function per entry point, typed by the header's declaration. */
#define FWD(ret, name, params, args)                                                 \
  ret name params                                                                     \
  {                                                                                   \
    static __typeof__(&name) real;                                                    \
    if (!real)                                                                        \
      *(void **)&real = sym(#name);                                                   \
    return real args;                                                                 \
  }

FWD(gnutls_alert_description_t, gnutls_alert_get, (gnutls_session_t s), (s))
FWD(const char *, gnutls_alert_get_name, (gnutls_alert_description_t alert), (alert))
FWD(int, gnutls_alert_send_appropriate, (gnutls_session_t s, int err), (s, err))
FWD(int, gnutls_bye, (gnutls_session_t s, gnutls_close_request_t how), (s, how))
FWD(int, gnutls_certificate_allocate_credentials, (gnutls_certificate_credentials_t * res), (res))
FWD(void, gnutls_certificate_free_credentials, (gnutls_certificate_credentials_t sc), (sc))
FWD(const gnutls_datum_t *, gnutls_certificate_get_peers, (gnutls_session_t s, unsigned int *n), (s, n))
FWD(void, gnutls_certificate_server_set_request, (gnutls_session_t s, gnutls_certificate_request_t req),
    (s, req))
FWD(int, gnutls_certificate_set_x509_crl_file,
    (gnutls_certificate_credentials_t res, const char *file, gnutls_x509_crt_fmt_t type), (res, file, type))
FWD(int, gnutls_certificate_set_x509_key_file,
    (gnutls_certificate_credentials_t res, const char *cert, const char *key, gnutls_x509_crt_fmt_t type),
    (res, cert, key, type))
FWD(int, gnutls_certificate_set_x509_trust_file,
    (gnutls_certificate_credentials_t cred, const char *file, gnutls_x509_crt_fmt_t type), (cred, file, type))
FWD(int, gnutls_certificate_verification_status_print,
    (unsigned int status, gnutls_certificate_type_t type, gnutls_datum_t *out, unsigned int flags),
    (status, type, out, flags))
FWD(int, gnutls_credentials_set, (gnutls_session_t s, gnutls_credentials_type_t type, void *cred),
    (s, type, cred))
FWD(void, gnutls_deinit, (gnutls_session_t s), (s))
FWD(int, gnutls_error_is_fatal, (int error), (error))
FWD(int, gnutls_handshake, (gnutls_session_t s), (s))
FWD(void, gnutls_handshake_set_timeout, (gnutls_session_t s, unsigned int ms), (s, ms))
FWD(int, gnutls_init, (gnutls_session_t * s, unsigned int flags), (s, flags))
FWD(int, gnutls_psk_allocate_client_credentials, (gnutls_psk_client_credentials_t * sc), (sc))
FWD(int, gnutls_psk_allocate_server_credentials, (gnutls_psk_server_credentials_t * sc), (sc))
FWD(void, gnutls_psk_free_client_credentials, (gnutls_psk_client_credentials_t sc), (sc))
FWD(void, gnutls_psk_free_server_credentials, (gnutls_psk_server_credentials_t sc), (sc))
FWD(const char *, gnutls_psk_server_get_username, (gnutls_session_t s), (s))
FWD(int, gnutls_psk_set_client_credentials,
    (gnutls_psk_client_credentials_t res, const char *user, const gnutls_datum_t *key, gnutls_psk_key_flags f),
    (res, user, key, f))
FWD(int, gnutls_psk_set_server_credentials_file, (gnutls_psk_server_credentials_t res, const char *file),
    (res, file))
FWD(size_t, gnutls_record_check_pending, (gnutls_session_t s), (s))
FWD(ssize_t, gnutls_record_recv, (gnutls_session_t s, void *data, size_t n), (s, data, n))
FWD(ssize_t, gnutls_record_send, (gnutls_session_t s, const void *data, size_t n), (s, data, n))
FWD(unsigned int, gnutls_session_get_verify_cert_status, (gnutls_session_t s), (s))
FWD(void, gnutls_session_set_verify_cert, (gnutls_session_t s, const char *host, unsigned flags),
    (s, host, flags))
FWD(int, gnutls_set_default_priority, (gnutls_session_t s), (s))
FWD(int, gnutls_set_default_priority_append,
    (gnutls_session_t s, const char *add, const char **err_pos, unsigned flags), (s, add, err_pos, flags))
FWD(const char *, gnutls_strerror, (int error), (error))
FWD(void, gnutls_transport_set_int2, (gnutls_session_t s, int r, int w), (s, r, w))
FWD(void, gnutls_transport_set_pull_function, (gnutls_session_t s, gnutls_pull_func f), (s, f))
FWD(void, gnutls_transport_set_push_function, (gnutls_session_t s, gnutls_push_func f), (s, f))
FWD(void, gnutls_x509_crt_deinit, (gnutls_x509_crt_t c), (c))
FWD(int, gnutls_x509_crt_get_dn, (gnutls_x509_crt_t c, char *buf, size_t *len), (c, buf, len))
FWD(int, gnutls_x509_crt_import, (gnutls_x509_crt_t c, const gnutls_datum_t *data, gnutls_x509_crt_fmt_t f),
    (c, data, f))
FWD(int, gnutls_x509_crt_init, (gnutls_x509_crt_t * c), (c))

/* gnutls_free is a variable (a function pointer) in GnuTLS, read at each call. */
static void free_lazy(void *p)
{
  gnutls_free_function *real = sym("gnutls_free");
  (*real)(p);
}
gnutls_free_function gnutls_free = free_lazy;
