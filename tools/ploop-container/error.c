/* The single error slot of ploop-container (see error.h). The tool is
 * single-threaded, so one static buffer is enough. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char message[1024];
static int code = CT_EXIT_FAIL;

/* Formatted aside first: an argument may be ct_error() itself. */
static int set_message(int errnum, const char *fmt, va_list ap)
{
  char text[sizeof message];
  int n = vsnprintf(text, sizeof text, fmt, ap);
  if (errnum && n >= 0 && (size_t)n < sizeof text)
    snprintf(text + n, sizeof text - (size_t)n, ": %s", strerror(errnum));
  memcpy(message, text, sizeof message);
  return -1;
}

int ct_fail(int errnum, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_message(errnum, fmt, ap);
  va_end(ap);
  code = CT_EXIT_FAIL;
  return -1;
}

int ct_wrap(const char *fmt, ...)
{
  char prefix[512], old[sizeof message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, message, sizeof old);
  size_t plen = strlen(prefix);
  if (plen + 2 < sizeof message) {  /* "prefix: old", old truncated to fit */
    memcpy(message, prefix, plen);
    memcpy(message + plen, ": ", 2);
    size_t room = sizeof message - plen - 3, olen = strnlen(old, room);
    memcpy(message + plen + 2, old, olen);
    message[plen + 2 + olen] = 0;
  }
  return -1;
}

int ct_usage(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_message(0, fmt, ap);
  va_end(ap);
  code = CT_EXIT_USAGE;
  return -1;
}

const char *ct_error(void) { return message[0] ? message : "unknown error"; }
int ct_error_code(void) { return code; }
void ct_set_error_code(int c) { code = c; }

int ct_state_fail(int c, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_message(0, fmt, ap);
  va_end(ap);
  code = c;
  return -1;
}
