#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (a sub-build with -DRDATTN_FUZZ=ON) and
# runs each for a bounded time from a fresh copy of its seed corpus (tests/fuzz/corpus/<target>/,
# regression inputs included). Fails on any crash, leak, timeout, out-of-memory, sanitizer report
# or property check, and prints "fuzz <target>: N executions in T s" for each target.
#
#   run_fuzz.sh [--build-dir DIR] [--seconds N] [--jobs N] [TARGET...]
#
#   --build-dir  the sub-build folder (default: build/fuzz-build)
#   --seconds    fuzzing time per target (default 60; libFuzzer's -max_total_time)
#   --jobs       parallel compile jobs (default: RDATTN_JOBS or 2)
#   TARGET       sweep, run_spec, shard (default: all three, one after the other)
#
# Knobs (environment): RDATTN_FUZZ_CXX, a clang++ to use instead of the first of clang++-14,
# clang++-15, clang++ that links -fsanitize=fuzzer.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build/fuzz-build"
seconds=60
jobs="${RDATTN_JOBS:-2}"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    sweep|run_spec|shard) targets+=("$1"); shift ;;
    *) echo "run_fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ "${#targets[@]}" -gt 0 ] || targets=(sweep run_spec shard)
t0=$SECONDS

fail() {
  echo "fuzz: FAILED: $*" >&2
  exit 1
}

# --- A clang that can build a libFuzzer binary with ASan and UBSan --------------------------
mkdir -p "$build" || fail "cannot create $build"
probe_dir="$build/probe"
mkdir -p "$probe_dir"
printf '%s\n' 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) {' \
  '  return 0;' '}' >"$probe_dir/probe.cc"
cxx=""
tried=()
for c in ${RDATTN_FUZZ_CXX:-clang++-14 clang++-15 clang++}; do
  tried+=("$c")
  command -v "$c" >/dev/null 2>&1 || continue
  if "$c" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" \
    >"$probe_dir/probe.log" 2>&1; then
    cxx="$(command -v "$c")"
    break
  fi
done
if [ -z "$cxx" ]; then
  [ -f "$probe_dir/probe.log" ] && tail -5 "$probe_dir/probe.log" >&2
  fail "no clang++ that links -fsanitize=fuzzer,address,undefined (tried: ${tried[*]});" \
    "install the Debian packages clang-14 libclang-rt-14-dev llvm-14 (scripts/setup.sh)"
fi
cc="${cxx/clang++/clang}"
[ -x "$cc" ] || fail "$cxx has no matching C compiler ($cc)"
version="$("$cxx" --version | head -1)"
echo "fuzz: compiler $cxx ($version)"

# The symbolizer of the same LLVM, for readable sanitizer stacks.
suffix="${cxx##*clang++}"
symbolizer="$(command -v "llvm-symbolizer$suffix" || command -v llvm-symbolizer || true)"
if [ -n "$symbolizer" ]; then
  export ASAN_SYMBOLIZER_PATH="$symbolizer"
else
  echo "fuzz: WARNING: no llvm-symbolizer (Debian package llvm-14): stacks are not symbolized" >&2
fi

# --- The sub-build ---------------------------------------------------------------------------
cache="$build/CMakeCache.txt"
if [ -f "$cache" ] && ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=$cxx\$" "$cache"; then
  echo "fuzz: $build was configured with another compiler; configuring it afresh"
  rm -rf -- "$cache" "$build/CMakeFiles"
fi
tb=$SECONDS
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz -DRDATTN_FUZZ=ON \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >"$build/configure.log" 2>&1 ||
  { tail -30 "$build/configure.log" >&2; fail "configure (log: $build/configure.log)"; }
exes=()
for t in "${targets[@]}"; do exes+=("rdattn_fuzz_$t"); done
cmake --build "$build" -j"$jobs" --target "${exes[@]}" >"$build/build.log" 2>&1 ||
  { grep -E "error|Error" "$build/build.log" | head -30 >&2; fail "build (log: $build/build.log)"; }
echo "fuzz: built ${exes[*]} in $((SECONDS - tb)) s"

# --- Fuzzing ---------------------------------------------------------------------------------
# halt_on_error + abort: the first report ends the run with a crash artifact; LSan is on (ASan's
# default on Linux) so that a leak fails too.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:symbolize=1"
ASAN_OPTIONS+=":detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:symbolize=1"
status=0
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/rdattn_fuzz_$t"
  work="$build/runs/$t"
  rm -rf -- "$work"
  mkdir -p "$work/corpus" "$work/artifacts" "$work/tmp"
  cp -r "$here/corpus/$t/." "$work/corpus/"
  dict="$here/$t.dict"
  [ "$t" = run_spec ] && dict="$here/sweep.dict"
  log="$work/fuzz.log"
  tf=$SECONDS
  TMPDIR="$work/tmp" "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -dict="$dict" -artifact_prefix="$work/artifacts/" \
    "$work/corpus" >"$log" 2>&1
  rc=$?
  elapsed=$((SECONDS - tf))
  # "Done 123456 runs in 61 second(s)" is libFuzzer's last line; "#N DONE" the same count.
  runs="$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)"
  secs="$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -1)"
  [ -n "$runs" ] || runs="$(sed -n 's/^#\([0-9]*\)[[:space:]]*DONE.*/\1/p' "$log" | tail -1)"
  problems=()
  [ "$rc" -eq 0 ] || problems+=("exit status $rc")
  [ -n "$runs" ] || problems+=("no 'Done N runs' line")
  reports="ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|FUZZ_CHECK failed"
  reports+="|SUMMARY: (Address|Leak|Undefined)"
  if grep -qE "$reports" "$log"; then
    problems+=("a sanitizer, libFuzzer or property report")
  fi
  artifacts="$(find "$work/artifacts" -type f | head -5 | tr '\n' ' ')"
  [ -z "$artifacts" ] || problems+=("crash artifacts: $artifacts")
  if [ "${#problems[@]}" -gt 0 ]; then
    echo "fuzz $t: FAILED after $elapsed s: ${problems[*]}" >&2
    grep -nE -A25 "ERROR: |runtime error:|FUZZ_CHECK failed" "$log" | head -60 >&2 ||
      tail -40 "$log" >&2
    echo "fuzz $t: log $log; add a fixed crash input to tests/fuzz/corpus/$t/ as a regression" >&2
    status=1
    continue
  fi
  echo "fuzz $t: ${runs} executions in ${secs:-$elapsed} s" \
    "($(find "$work/corpus" -type f | wc -l) corpus inputs; log $log)"
done
echo "fuzz: total $((SECONDS - t0)) s"
exit "$status"
