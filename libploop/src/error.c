/* Per-thread error state: the one error convention of libploop. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static __thread char error_msg[1024];
static __thread int error_errno;
static __thread int error_status;

const char *ploop_get_error(void)
{
  return error_msg[0] ? error_msg : "no error";
}
int ploop_get_errno(void)
{
  return error_errno;
}
int ploop_get_status(void)
{
  return error_status ? error_status : PLOOP_ERR_GENERIC;
}

static int set_error(int status, int err, const char *fmt, va_list ap)
{
  vsnprintf(error_msg, sizeof error_msg, fmt, ap);
  error_status = status;
  error_errno = err;
  errno = err;
  return -1;
}

int ploop_error(int status, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_error(status, err, fmt, ap);
  va_end(ap);
  return -1;
}

int ploop_set_error(int status, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_error(status, err, fmt, ap);
  va_end(ap);
  return -1;
}

int ploop_error_wrap(const char *fmt, ...)
{
  char prefix[512], old[sizeof error_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, error_msg, sizeof old);
  size_t pl = strlen(prefix);
  memcpy(error_msg, prefix, pl);
  memcpy(error_msg + pl, ": ", 2);
  size_t room = sizeof error_msg - pl - 3;
  size_t ol = strnlen(old, room);
  memcpy(error_msg + pl + 2, old, ol);
  error_msg[pl + 2 + ol] = 0;
  errno = error_errno;
  return -1;
}

/* The one process-wide flag: a signal handler has no other way to reach
 * the operation running in the thread it interrupted. */
static volatile sig_atomic_t cancel_requested;

void ploop_cancel(void)
{
  cancel_requested = 1;
}
void ploop_cancel_reset(void)
{
  cancel_requested = 0;
}
bool ploop_cancelled(void)
{
  return cancel_requested != 0;
}

int ploop_cancel_check(void)
{
  if (!cancel_requested)
    return 0;
  return ploop_error(PLOOP_ERR_CANCELLED, EINTR, "interrupted");
}
