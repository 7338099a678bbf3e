/* Crash-test hook: named points at every step where a structural operation
 * has made something durable, so a test can kill the process between any
 * two steps instead of hoping a random delay lands there.
 *
 *   PLOOP_FAULT_TRACE=FILE   append "N NAME" for each point passed
 *   PLOOP_FAULT_INJECT=N     SIGKILL this process at the N-th point passed
 *
 * Both unset (production), a point costs one load and a branch. The hook
 * can do nothing a `kill -9` from the same user could not. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static int fault_on; /* read after fault_once */
static long fault_at, fault_count;
static int trace_fd = -1;

static void fault_init(void)
{
  const char *at = getenv("PLOOP_FAULT_INJECT"), *trace = getenv("PLOOP_FAULT_TRACE");
  if (at && *at)
    fault_at = strtol(at, NULL, 10);
  if (trace && *trace)
    trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  fault_on = fault_at > 0 || trace_fd >= 0;
}

void ploop_fault_point(const char *name)
{
  pthread_once(&fault_once, fault_init);
  if (!fault_on)
    return;
  long n = __atomic_add_fetch(&fault_count, 1, __ATOMIC_SEQ_CST);
  if (trace_fd >= 0) {
    char line[128];
    int len = snprintf(line, sizeof line, "%ld %s\n", n, name);
    if (write(trace_fd, line, (size_t)len) != len) {
      /* A short trace shows up as a missing point in the test. */
    }
  }
  if (n == fault_at)
    kill(getpid(), SIGKILL);
}
