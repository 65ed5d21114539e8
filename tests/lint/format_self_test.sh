#!/usr/bin/env bash
# Proves tests/lint/format_test.sh can fail: a scratch tree with the repository's .clang-format,
# one formatted file and one misformatted file must be reported (exit 1, naming only the bad one).
set -euo pipefail
root=${1:?usage: format_self_test.sh REPO_ROOT [CLANG_FORMAT]}
tool=${2:-clang-format}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$root/.clang-format" "$tmp/"
printf 'int Good(int x) { return x + 1; }\n' >"$tmp/good.cc"
printf 'int   Bad( int x ){return x+1;}\n' >"$tmp/bad.cc"
set +e
out=$("$root/tests/lint/format_test.sh" "$tmp" "$tool" 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 1 ] || ! grep -q "not formatted: ./bad.cc" <<<"$out" || grep -q "not formatted: ./good.cc" <<<"$out"; then
  echo "format_self_test: the check did not report exactly the misformatted file (exit $rc)" >&2
  exit 1
fi
echo "format_self_test: ok"
