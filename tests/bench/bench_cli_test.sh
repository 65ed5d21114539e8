#!/bin/sh
# bench_cli: rdattn_model_bench's command line is common/cli.h's. --help exits 0 and lists the
# flags (internal modes included); a bad value or an unknown flag is one line on stderr,
# "rdattn_model_bench: MESSAGE (see --help)", naming the flag, with exit 2. Nothing is run.
# Usage: bench_cli_test.sh RDATTN_MODEL_BENCH
set -u
bench=$1
fail() { echo "FAIL: $*"; exit 1; }

help=$("$bench" --help 2>&1)
rc=$?
echo "$help"
[ "$rc" -eq 0 ] || fail "--help exited $rc (want 0)"
for flag in --presets --arms --rounds --json --no-mpi --memory-probe --mpi-step --gpu-checks; do
  echo "$help" | grep -q -- "$flag" || fail "--help does not list $flag"
done
echo "$help" | grep -q -- "--presets TEXT=cpu-small,cpu-bench" || fail "--help shows no default of --presets"

# usage_error WANT_IN_MESSAGE ARGS...: exit 2, one line "rdattn_model_bench: ... (see --help)".
usage_error() {
  want=$1
  shift
  err=$("$bench" "$@" 2>&1 >/dev/null)
  rc=$?
  echo "$* -> exit $rc: $err"
  [ "$rc" -eq 2 ] || fail "$* exited $rc (want 2)"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$*: not one line: $err"
  case "$err" in
    "rdattn_model_bench: "*"$want"*" (see --help)") ;;
    *) fail "$*: want 'rdattn_model_bench: ...$want... (see --help)', got: $err" ;;
  esac
}
usage_error "--rounds" --rounds x
usage_error "--warmup" --warmup=-1
usage_error "--gemm-seconds" --gemm_seconds -1
usage_error "--bogus" --bogus
usage_error "--arms" --arms block,nope
usage_error "--presets" --presets nope
echo "ok"
