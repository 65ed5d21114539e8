#!/usr/bin/env bash
# The formatting check (issue 12, step 8): every C++ file of the tree is as clang-format leaves
# it under the repository's .clang-format (Google base, 100 columns). Prints the files that are
# not, with the command that fixes them, and exits 1; exits 2 when clang-format is missing.
#
#   tests/lint/format_test.sh REPO_ROOT [CLANG_FORMAT]
set -euo pipefail
root=${1:?usage: format_test.sh REPO_ROOT [CLANG_FORMAT]}
tool=${2:-clang-format}
if ! command -v "$tool" >/dev/null 2>&1; then
  echo "format_test: $tool not found (Debian package clang-format; scripts/setup.sh installs it)" >&2
  exit 2
fi
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -co --exclude-standard '*.cc' '*.h' '*.inc')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' -o -name '*.inc' \) -print)
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! "$tool" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
echo "format_test: ${#files[@]} files checked with $("$tool" --version | head -1)"
if [ "${#bad[@]}" -gt 0 ]; then
  printf 'not formatted: %s\n' "${bad[@]}"
  echo "fix: $tool -i ${bad[*]}"
  exit 1
fi
echo "format_test: all formatted"
