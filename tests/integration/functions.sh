# Shared helpers for integration tests (sourced). Each test is a bash script
# that exits 0 on pass, 77 on skip, anything else on failure.
set -euo pipefail
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PLOOP_BUILD:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PLOOP=$BUILD/bin/ploop
PLOOP_NBD=$BUILD/bin/ploop-nbd
PLOOP_CONTAINER=$BUILD/bin/ploop-container
export PATH=$BUILD/bin:$PATH

_cleanups=()
cleanup() { _cleanups+=("$*"); }
_main_pid=$BASHPID
_run_cleanups() {
  # Only the test's own shell cleans up. bash (5.2) runs this EXIT trap in a
  # child forked for `cmd &` or `( ... ) &` when a signal reaches the child
  # before it has reset its traps: a kill of a job just started removed the
  # whole $TMP (and ran every other cleanup) while the test went on.
  [[ $BASHPID == "$_main_pid" ]] || return 0
  local i
  for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[i]}" || true; done
}
trap _run_cleanups EXIT

# A fresh scratch directory, removed at exit (under /var/tmp: O_DIRECT needs a real fs, not tmpfs).
TMP=$(mktemp -d /var/tmp/ploop-test.XXXXXX)
cleanup "rm -rf '$TMP'"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
requires() { command -v "$1" >/dev/null 2>&1 || skip "$1 not installed"; }
requires_root() { [[ $(id -u) -eq 0 ]] || skip "needs root"; }

# expect_fail CMD...: CMD must exit non-zero and print exactly one line on stderr.
expect_fail() {
  local err rc=0
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc -ne 0 ]] || fail "expected failure: $*"
  [[ $(printf '%s\n' "$err" | grep -c .) -eq 1 ]] || fail "expected one-line error from '$*', got: $err"
  printf '%s\n' "$err"
}
# Checksum of a file's bytes.
sum() { sha256sum "$1" | cut -d' ' -f1; }

# check_ro PATH: `ploop check -f --ro PATH`, its output in $out. True when the
# image is clean or only marked in use (exit 37, SYSEXIT_PLOOPINUSE: what a
# killed writer leaves behind); any other exit (11 corrupt, 4 cannot open) is false.
check_ro() {
  local rc=0
  out=$("$PLOOP" check -f --ro "$1" 2>&1) || rc=$?
  [[ $rc -eq 0 || $rc -eq 37 ]]
}
