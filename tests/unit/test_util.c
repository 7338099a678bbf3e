/* Unit tests for libploop's small helpers: size parsing and UUID handling. */
#include <ctype.h>
#include <pthread.h>

#include "helpers.h"

Test(parse_size, plain_bytes)
{
  uint64_t v = 1;
  OK(ploop_parse_size("4096", &v));
  cr_assert_eq(v, 4096);
  OK(ploop_parse_size("0", &v));
  cr_assert_eq(v, 0);
}

Test(parse_size, binary_suffixes)
{
  static const struct {
    const char *s;
    uint64_t v;
  } cases[] = {
      {"1K", 1ull << 10}, {"512M", 512ull << 20}, {"10G", 10ull << 30},     {"2T", 2ull << 40},
      {"1k", 1ull << 10}, {"3g", 3ull << 30},     {"1536K", 1536ull << 10},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t v = 0;
    cr_assert_eq(ploop_parse_size(cases[i].s, &v), 0, "'%s': %s", cases[i].s, ploop_get_error());
    cr_assert_eq(v, cases[i].v, "'%s' -> %llu, want %llu", cases[i].s, (unsigned long long)v,
                 (unsigned long long)cases[i].v);
  }
}

Test(parse_size, rejects_garbage)
{
  static const char *bad[] = {"", "G", "abc", "10X", "-1", "1 G", "10GG", "0x", " "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t v = 12345;
    cr_assert_eq(ploop_parse_size(bad[i], &v), -1, "'%s' should be rejected", bad[i]);
    cr_assert(ploop_get_error() && *ploop_get_error(), "'%s': no error message", bad[i]);
  }
}

Test(parse_size, rejects_overflow)
{
  uint64_t v;
  /* 2^64 does not fit, neither does 2^24 T = 2^64. */
  cr_assert_eq(ploop_parse_size("18446744073709551616", &v), -1);
  cr_assert_eq(ploop_parse_size("16777216T", &v), -1);
  /* The largest T value that fits must still parse. */
  OK(ploop_parse_size("16777215T", &v));
  cr_assert_eq(v, 16777215ull << 40);
}

static bool is_braced_lower_uuid(const char *s)
{
  if (strlen(s) != PLOOP_UUID_LEN || s[0] != '{' || s[PLOOP_UUID_LEN - 1] != '}')
    return false;
  for (int i = 1; i < PLOOP_UUID_LEN - 1; i++) {
    bool dash = i == 9 || i == 14 || i == 19 || i == 24;
    if (dash ? s[i] != '-' : !(isdigit((unsigned char)s[i]) || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  }
  return true;
}

Test(uuid, generate_is_wellformed_and_unique)
{
  char a[PLOOP_UUID_LEN + 1], b[PLOOP_UUID_LEN + 1];
  ploop_uuid_generate(a);
  ploop_uuid_generate(b);
  cr_assert(is_braced_lower_uuid(a), "bad uuid '%s'", a);
  cr_assert(is_braced_lower_uuid(b), "bad uuid '%s'", b);
  cr_assert_str_neq(a, b);
  cr_assert_str_neq(a, PLOOP_TOP_GUID);
  cr_assert_str_neq(a, PLOOP_NULL_GUID);
}

Test(uuid, normalize_accepts_both_forms)
{
  char out[PLOOP_UUID_LEN + 1];
  OK(ploop_uuid_normalize("5FBAABE3-6958-40FF-92A7-860E329AAB41", out));
  cr_assert_str_eq(out, PLOOP_TOP_GUID);
  memset(out, 0, sizeof out);
  OK(ploop_uuid_normalize("{5fbaabe3-6958-40ff-92a7-860e329aab41}", out));
  cr_assert_str_eq(out, PLOOP_TOP_GUID);
  OK(ploop_uuid_normalize("{5FbaAbe3-6958-40ff-92a7-860e329aAb41}", out));
  cr_assert_str_eq(out, PLOOP_TOP_GUID);
}

Test(uuid, normalize_rejects_malformed)
{
  static const char *bad[] = {
      "",
      "5fbaabe3",
      "{5fbaabe3-6958-40ff-92a7-860e329aab41", /* one brace */
      "5fbaabe3-6958-40ff-92a7-860e329aab41}",
      "{5fbaabe3-6958-40ff-92a7-860e329aab4}",   /* short */
      "{5fbaabe3-6958-40ff-92a7-860e329aab411}", /* long */
      "{5fbaabe3x6958-40ff-92a7-860e329aab41}",  /* dash misplaced */
      "{5fbaabe3-6958-40ff-92a7-860e329aab4g}",  /* not hex */
      "../../etc/passwd-------------------",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char out[PLOOP_UUID_LEN + 1];
    cr_assert_eq(ploop_uuid_normalize(bad[i], out), -1, "'%s' should be rejected", bad[i]);
  }
}

Test(errors, bad_input_is_a_param_error_quoting_the_input)
{
  uint64_t v;
  cr_assert_eq(ploop_parse_size("bogus", &v), -1);
  cr_assert_eq(ploop_get_status(), PLOOP_ERR_PARAM, "bad size is a caller error, got %d", ploop_get_status());
  cr_assert_neq(ploop_get_error(), NULL);
  cr_assert(strstr(ploop_get_error(), "bogus"), "message should quote the input: %s", ploop_get_error());
}

static void *fail_in_thread(void *arg)
{
  uint64_t v;
  (void)arg;
  ploop_parse_size("other-thread", &v);
  return NULL;
}

Test(errors, message_is_kept_per_thread)
{
  uint64_t v;
  cr_assert_eq(ploop_parse_size("main-thread", &v), -1);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, fail_in_thread, NULL), 0);
  pthread_join(t, NULL);
  cr_assert(strstr(ploop_get_error(), "main-thread"),
            "another thread's failure overwrote this thread's error: %s", ploop_get_error());
}
