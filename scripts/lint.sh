#!/usr/bin/env bash
# The linters (issue 12, step 8), each over a stated set of files:
#  - format: clang-format --dry-run --Werror on every tracked C++ file (tests/lint/format_test.sh,
#    the rule of the ctest `format`);
#  - shellcheck -x on the shell scripts of scripts/, deploy/slurm/, tests/lint/ and tests/debian13/;
#  - tidy: clang-tidy (.clang-tidy) on the non-LibTorch sources of common/ model/ runspec/ proto/contract/
#    worker/ coordinator/ client/ (tests/lint/tidy_test.sh). It needs BUILD_DIR's
#    compile_commands.json and generated headers, so run it after a build;
#  - locks: the same sources compiled with clang++ -fsyntax-only -Wthread-safety -Werror
#    (tests/lint/thread_safety_test.py): an ABSL_GUARDED_BY member touched without its lock fails.
#    It needs the build too.
# Each check names the files that fail and the command that fixes them; all of them run, and the
# script exits 1 if any failed (2 if a tool is missing).
#
#   scripts/lint.sh [--no-tidy] [BUILD_DIR]   BUILD_DIR defaults to build/; --no-tidy skips the
#                                             two checks that compile (tidy, locks)
#
# scripts/test.sh (CI) runs it as its `lint` phase, after the build. Without tidy it takes a few
# seconds; tidy takes about 4 min on 2 cores, locks about 2 min (RDATTN_JOBS sets their
# parallelism; docs/build.md).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_tidy=1
build=""
for a in "$@"; do
  case "$a" in
    --no-tidy) want_tidy=0 ;;
    -h | --help)
      sed -n 2,20p "$0"
      exit 0
      ;;
    -*)
      echo "lint.sh: unknown option '$a'" >&2
      exit 2
      ;;
    *) build=$a ;;
  esac
done
build=${build:-$root/build}
cd "$root" || exit 2

failed=()
missing=0
status() {  # status NAME RC: record the outcome of one check
  case "$2" in
    0) echo "lint: $1: ok" ;;
    2)
      echo "lint: $1: tool or input missing" >&2
      failed+=("$1")
      missing=1
      ;;
    *) failed+=("$1") ;;
  esac
}

# --- format ---------------------------------------------------------------------------------------
echo "lint: format: clang-format on the tracked C++ files (.clang-format)"
tests/lint/format_test.sh "$root" "$(command -v clang-format || echo clang-format)"
status format $?

# --- shellcheck -----------------------------------------------------------------------------------
mapfile -t scripts < <(git ls-files -co --exclude-standard 'scripts/*.sh' 'deploy/slurm/*.sh' \
  'deploy/slurm/*.sbatch' 'tests/lint/*.sh' 'tests/debian13/*.sh')
echo "lint: shellcheck: ${#scripts[@]} scripts: ${scripts[*]}"
if ! command -v shellcheck >/dev/null 2>&1; then
  echo "lint: shellcheck not found (Debian package shellcheck; scripts/setup.sh installs it)" >&2
  status shellcheck 2
else
  bad=()
  for s in "${scripts[@]}"; do
    [ -f "$s" ] || continue
    # -x follows `source` lines; the directives in the scripts say where the sourced file lies.
    if ! shellcheck -x "$s"; then bad+=("$s"); fi
  done
  if [ "${#bad[@]}" -gt 0 ]; then
    printf 'lint: shellcheck: findings in %s\n' "${bad[@]}"
    echo "fix: edit the lines above (each SC code links its wiki page), then: shellcheck -x ${bad[*]}"
    status shellcheck 1
  else
    echo "lint: shellcheck: $(shellcheck --version | sed -n 's/^version: //p'), no findings"
    status shellcheck 0
  fi
fi

# --- clang-tidy -----------------------------------------------------------------------------------
if [ "$want_tidy" -eq 1 ]; then
  echo "lint: tidy: clang-tidy on the non-LibTorch sources, compilation database $build"
  tests/lint/tidy_test.sh "$root" "$build"
  status tidy $?
else
  echo "lint: tidy: skipped (--no-tidy)"
fi

# --- locks (clang -Wthread-safety) ----------------------------------------------------------------
if [ "$want_tidy" -eq 1 ]; then
  echo "lint: locks: clang++ -Wthread-safety on the non-LibTorch sources, compilation database $build"
  python3 tests/lint/thread_safety_test.py "$root" "$build" --jobs "${RDATTN_JOBS:-2}"
  status locks $?
else
  echo "lint: locks: skipped (--no-tidy)"
fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "lint: FAILED: ${failed[*]}" >&2
  [ "$missing" -eq 1 ] && [ "${#failed[@]}" -eq 1 ] && exit 2
  exit 1
fi
echo "lint: all checks passed"
