#!/usr/bin/env bash
# The clang-tidy check (issue 12, step 8): rdattn's own non-LibTorch sources pass the checks of
# the repository's .clang-tidy. Reads BUILD_DIR/compile_commands.json of a configured and built
# tree (the generated protobuf headers must exist), runs clang-tidy on each translation unit in
# parallel, prints every finding once and the files that carry them with the command that shows
# them in context, and exits 1; exits 2 when clang-tidy or the compilation database is missing.
#
#   tests/lint/tidy_test.sh REPO_ROOT BUILD_DIR [CLANG_TIDY] [-- FILE...]
#
# Without FILE arguments it lints the translation units of the folders in `dirs` below, less the
# LibTorch ones and the `left_out` list. RDATTN_JOBS sets the number of parallel clang-tidy
# processes (default 2). Run by scripts/lint.sh, not by ctest: the whole set takes about 4 min of
# 2 cores (docs/build.md); tidy_self_test (ctest, label lint) proves the check can fail.
set -euo pipefail
root=${1:?usage: tidy_test.sh REPO_ROOT BUILD_DIR [CLANG_TIDY] [-- FILE...]}
build=${2:?usage: tidy_test.sh REPO_ROOT BUILD_DIR [CLANG_TIDY] [-- FILE...]}
shift 2
build=$(cd "$build" 2>/dev/null && pwd || echo "$build")
tool=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  tool=$1
  shift
fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
if [ -z "$tool" ]; then
  for t in clang-tidy clang-tidy-14 clang-tidy-15; do
    if command -v "$t" >/dev/null 2>&1; then
      tool=$t
      break
    fi
  done
fi
if [ -z "$tool" ] || ! command -v "$tool" >/dev/null 2>&1; then
  echo "tidy_test: clang-tidy not found (Debian package clang-tidy; scripts/setup.sh installs it)" >&2
  exit 2
fi
root=$(cd "$root" && pwd)
db="$build/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "tidy_test: $db not found: configure and build first (scripts/test.sh, or" \
    "cmake -S . -B build -G Ninja && cmake --build build -j2)" >&2
  exit 2
fi
jobs=${RDATTN_JOBS:-2}

# The folders whose translation units are linted (tests/ is not: its gtest TUs double the time).
dirs=(common/ model/ runspec/ proto/contract/ worker/ coordinator/ client/)
# Files with findings that their owners are still to fix; each line: path, then the finding.
# Remove a line once its file is clean (the file is then linted like the others).
left_out=(
)

# The translation units: every entry of the database inside the tree, minus build outputs
# (generated code), LibTorch TUs (30-85 s each only to parse) and the left-out files
# (lint_units.py, shared with thread_safety_test.py).
if [ $# -gt 0 ]; then
  files=("$@")
else
  skip=$(printf '%s\n' "${left_out[@]}" | awk '{print $1}')
  mapfile -t files < <(python3 "$(dirname "$0")/lint_units.py" "$db" "$root" "$build" "$skip" "${dirs[@]}")
fi
if [ "${#files[@]}" -eq 0 ]; then
  echo "tidy_test: no translation units to lint in $db" >&2
  exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
t0=$SECONDS
cd "$root"
# One clang-tidy per file; its diagnostics go to OUT/N.out, its exit status to OUT/N.rc.
export tool build out
# shellcheck disable=SC2016  # the single-quoted script expands $0/$1 in its own sh, as meant
printf '%s\n' "${files[@]}" | awk '{print NR" "$0}' |
  xargs -P "$jobs" -L 1 sh -c '
    "$tool" -p "$build" --quiet "$1" >"$out/$0.out" 2>"$out/$0.err"
    echo $? >"$out/$0.rc"' || true
elapsed=$((SECONDS - t0))

echo "tidy_test: ${#files[@]} translation units checked with $("$tool" --version | grep -m1 -o 'version [0-9.]*')" \
  "and $root/.clang-tidy in ${elapsed} s ($jobs jobs)"
if [ $# -eq 0 ]; then
  echo "tidy_test: left out until their findings are fixed:"
  printf '  %s\n' "${left_out[@]}"
fi
bad_files=()
findings=$(mktemp)
i=0
for f in "${files[@]}"; do
  i=$((i + 1))
  rc=$(cat "$out/$i.rc" 2>/dev/null || echo 1)
  if grep -qE ': (warning|error):' "$out/$i.out" || [ "$rc" -ne 0 ]; then
    bad_files+=("$f")
    grep -E ': (warning|error):' "$out/$i.out" >>"$findings" || true
    if [ "$rc" -ne 0 ] && ! grep -qE ': (warning|error):' "$out/$i.out"; then
      echo "$f: clang-tidy exited $rc:" >>"$findings"
      tail -n 5 "$out/$i.err" >>"$findings"
    fi
  fi
done
if [ "${#bad_files[@]}" -gt 0 ]; then
  # A finding in a header is reported by every TU that includes it: print it once.
  echo "tidy_test: findings (each once; paths relative to $root):"
  sed "s#^$root/##" "$findings" | awk '!seen[$0]++'
  rm -f "$findings"
  echo "tidy_test: FAILED: findings in the translation units of ${#bad_files[@]} files:"
  printf '  %s\n' "${bad_files[@]}"
  echo "fix: edit the lines above; '$tool -p $build FILE' shows them in context, '--fix' applies" \
    "the suggested fixes; a check that is wrong for this code goes off in .clang-tidy with a reason"
  exit 1
fi
rm -f "$findings"
echo "tidy_test: no findings"
