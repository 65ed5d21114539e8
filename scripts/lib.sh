# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/demo.sh (source it; it defines functions only).
#
#   rdattn_env              export the run-time environment of CI and the test scripts
#   rdattn_build            configure and build into $RDATTN_BUILD_DIR (default: build/)
#   rdattn_phase NAME CMD…  run CMD as a named phase and print its elapsed time
#   rdattn_sanitize_build DIR LIST   configure DIR with RDATTN_SANITIZE=LIST, build its tests
#   rdattn_sanitize_test DIR [ARGS…] run DIR's `sanitize` tests (ctest ARGS…) with the options below
#
#   rdattn_sanitize_builds_start / _wait / _stop   both sanitizer builds in the background, at
#                           nice 19 (scripts/test.sh): start them, wait for them, or kill them
#   rdattn_debian13_builds_start / _wait / _stop   the Debian 13 roots and builds of the
#                           debian13 ctests (tests/debian13), in the background at nice 19
#
# Knobs (environment): RDATTN_BUILD_DIR (default build), RDATTN_JOBS (default 2),
# RDATTN_TEST_JOBS (tests at a time in scripts/test.sh, default 2),
# RDATTN_CMAKE_ARGS (extra configure arguments, split on spaces).

RDATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RDATTN_BUILD_DIR="${RDATTN_BUILD_DIR:-$RDATTN_ROOT/build}"
RDATTN_JOBS="${RDATTN_JOBS:-2}"
RDATTN_TEST_JOBS="${RDATTN_TEST_JOBS:-2}"

# MPI as root in a container, oversubscribed local ranks, no ssh needed (docs/build.md), and one
# OpenMP thread per process: oversubscribed OpenMP spin barriers are catastrophically slow.
rdattn_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_plm=isolated
  export OMP_NUM_THREADS=1
}

# One configuration for every script (test and demo share build/ without rebuilding each other).
rdattn_build() {
  local cache="$RDATTN_BUILD_DIR/CMakeCache.txt" extra=()
  # A build folder configured with another generator cannot be reused: start it afresh.
  if [ -f "$cache" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$cache"; then
    echo "rdattn: $RDATTN_BUILD_DIR was configured with another generator; reconfiguring with Ninja"
    rm -rf -- "$cache" "$RDATTN_BUILD_DIR/CMakeFiles"
  fi
  if [ -n "${RDATTN_CMAKE_ARGS:-}" ]; then read -r -a extra <<<"$RDATTN_CMAKE_ARGS"; fi
  cmake -S "$RDATTN_ROOT" -B "$RDATTN_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DRDATTN_WERROR=ON "${extra[@]}" || return
  cmake --build "$RDATTN_BUILD_DIR" -j"$RDATTN_JOBS" || return
}

# The sanitizer builds (docs/build.md, "Sanitizer builds"): the coordinator, worker and client
# tests only (target rdattn_sanitize_tests, label sanitize), none of which links LibTorch. No
# -Werror here: the Release build enforces the warnings, and gcc's sanitizer instrumentation adds
# warnings of its own (-Wmaybe-uninitialized) that are not about the code.
rdattn_sanitize_build() {
  local dir=$1 sanitizers=$2
  rdattn_sanitize_env
  cmake -S "$RDATTN_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRDATTN_SANITIZE="$sanitizers" -DRDATTN_BUILD_BENCHMARKS=OFF || return
  cmake --build "$dir" -j"$RDATTN_JOBS" --target rdattn_sanitize_tests || return
}

# Both sanitizer builds, one after the other, in a background subshell whose processes run at
# nice 19: they take only the CPU that the foreground phases (lint, the main tests) leave idle.
# Their output goes to BUILD_DIR/sanitize-build.log; _wait prints each build's time, or the
# log's tail and the exit status of the build that failed.
RDATTN_SANITIZE_LOG="$RDATTN_BUILD_DIR/sanitize-build.log"
rdattn_sanitize_builds_start() {
  echo "==> [sanitize-build] ASan+UBSan then TSan, in the background at nice 19: $RDATTN_SANITIZE_LOG"
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    t0=$SECONDS
    rdattn_sanitize_build "$RDATTN_ROOT/build-asan" address,undefined || exit
    echo "==> asan build done in $((SECONDS - t0)) s"
    t0=$SECONDS
    rdattn_sanitize_build "$RDATTN_ROOT/build-tsan" thread || exit
    echo "==> tsan build done in $((SECONDS - t0)) s"
  ) >"$RDATTN_SANITIZE_LOG" 2>&1 &
  RDATTN_BACKGROUND_PIDS[sanitize]=$!
}

rdattn_sanitize_builds_wait() {
  rdattn_background_wait sanitize "$RDATTN_SANITIZE_LOG" "sanitizer build" '^==> '
}

# Kills a background sanitizer build and everything it started (a no-op when none runs).
rdattn_sanitize_builds_stop() { rdattn_background_stop sanitize; }

# The background jobs that a _start function above started in this shell, by name (sanitize,
# debian13); the wait and the stop take a job off the list.
#   rdattn_background_wait NAME LOG WHAT PATTERN   waits for job NAME; when it failed, prints
#       LOG's tail and that WHAT failed, and returns its status; else prints LOG's lines that
#       match PATTERN (the steps' times)
#   rdattn_background_stop NAME   kills job NAME and everything it started (a no-op when none)
declare -gA RDATTN_BACKGROUND_PIDS=()
rdattn_background_wait() {
  local pid=${RDATTN_BACKGROUND_PIDS[$1]:-} log=$2 what=$3 pattern=$4 rc=0
  unset "RDATTN_BACKGROUND_PIDS[$1]"
  [ -n "$pid" ] || { echo "rdattn: no $what was started" >&2; return 2; }
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 80 "$log" >&2
    echo "rdattn: the $what failed (exit $rc); whole log: $log" >&2
    return "$rc"
  fi
  grep "$pattern" "$log" || true
}

rdattn_background_stop() {
  local pid=${RDATTN_BACKGROUND_PIDS[$1]:-}
  unset "RDATTN_BACKGROUND_PIDS[$1]"
  [ -n "$pid" ] || return 0
  rdattn_kill_tree "$pid"
  wait "$pid" 2>/dev/null || true
}

rdattn_kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do rdattn_kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

rdattn_sanitize_test() {
  local dir=$1
  shift
  rdattn_sanitize_env
  ctest --test-dir "$dir" -L sanitize --output-on-failure --timeout 900 "$@"
}

# Left out of the TSan run: the tests that run gRPC calls in process or start a gRPC binary. gRPC
# hands calls between its threads with its own atomics, in uninstrumented code, so TSan reports
# races inside gRPC's slices and call ops on every call (docs/build.md). Their logic still runs
# under ASan+UBSan; every other `sanitize` test runs under TSan.
# shellcheck disable=SC2034  # used by scripts/test.sh
RDATTN_TSAN_EXCLUDE='^(ServiceTest|CliServerTest|MetricsTest|EventRelayTest|WorkerTest)\.|^client_watch_tty$'

# Any report fails the test: UBSan halts (-fno-sanitize-recover=all too), ASan/TSan exit non-zero.
# The suppression files hold known false positives in Debian's uninstrumented libraries only,
# each with its reason (tests/sanitize/).
rdattn_sanitize_env() {
  local supp="$RDATTN_ROOT/tests/sanitize"
  export ASAN_OPTIONS="detect_leaks=1:strict_init_order=1:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
}

# The Debian 13 checks (docs/build.md, "Debian 13"): their roots (scripts/debian13.sh; downloads
# from the Debian mirror the first time) and their builds, in a background subshell at nice 19
# like the sanitizer builds, so that the debian13 ctests (run in a phase of their own) find them
# done. The CPU root first, then the CPU build and the CUDA root side by side, then the CUDA
# build. Output:
# BUILD_DIR/debian13-build.log; _wait prints each step's time, or the log's tail.
RDATTN_DEBIAN13_LOG="$RDATTN_BUILD_DIR/debian13-build.log"
rdattn_debian13_builds_start() {
  echo "==> [debian13-build] Debian 13 roots and builds, in the background at nice 19: $RDATTN_DEBIAN13_LOG"
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    # The idle I/O class too: the roots' package installs write gigabytes, and the tests beside
    # them wait on fsync (SQLite, checkpoints).
    ionice -c 3 -p "$BASHPID" 2>/dev/null || true
    step() {
      local t0=$SECONDS
      "$@" || exit
      echo "==> $* done in $((SECONDS - t0)) s"
    }
    d13="$RDATTN_ROOT/scripts/debian13.sh"
    step "$d13" --flavor cpu prepare
    # The CUDA root's download and unpacking (the mirror and the disk) beside the CPU build.
    (step "$d13" --flavor cuda prepare) &
    cuda_root=$!
    step "$d13" --flavor cpu run -- tests/debian13/check.sh cpu build
    wait "$cuda_root" || exit
    step "$d13" --flavor cuda run -- tests/debian13/check.sh cuda build
  ) >"$RDATTN_DEBIAN13_LOG" 2>&1 &
  RDATTN_BACKGROUND_PIDS[debian13]=$!
}

rdattn_debian13_builds_wait() {
  rdattn_background_wait debian13 "$RDATTN_DEBIAN13_LOG" "Debian 13 root or build" '^==> .* done in'
}

rdattn_debian13_builds_stop() { rdattn_background_stop debian13; }

RDATTN_PHASE=""
RDATTN_PHASE_T0=0
RDATTN_T0=$SECONDS

rdattn_phase() {
  RDATTN_PHASE=$1
  shift
  RDATTN_PHASE_T0=$SECONDS
  echo "==> [$RDATTN_PHASE] $*"
  "$@" || return
  echo "==> [$RDATTN_PHASE] done in $((SECONDS - RDATTN_PHASE_T0)) s"
  RDATTN_PHASE=""
}

# Installed as an EXIT trap by the scripts: names the phase that failed and the total time.
# A trap that does its own clean-up first passes the original exit status as $1.
rdattn_report_exit() {
  local rc=${1:-$?}
  if [ "$rc" -ne 0 ] && [ -n "$RDATTN_PHASE" ]; then
    echo "==> [$RDATTN_PHASE] FAILED (exit $rc) after $((SECONDS - RDATTN_PHASE_T0)) s" >&2
  fi
  echo "==> total $((SECONDS - RDATTN_T0)) s, exit $rc"
  return "$rc"
}
