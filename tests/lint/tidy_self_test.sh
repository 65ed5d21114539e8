#!/usr/bin/env bash
# Proves tests/lint/tidy_test.sh can fail: a scratch tree with the repository's .clang-tidy, a
# compilation database, one clean file and one with a finding (a size() == 0 test, which
# readability-container-size-empty flags) must be reported (exit 1, naming only the bad one). The
# file set comes from the database as in the real run, which leaves out a LibTorch TU (a third
# file with the same finding, compiled with the torch include path: never linted).
set -euo pipefail
root=${1:?usage: tidy_self_test.sh REPO_ROOT [CLANG_TIDY]}
tool=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$root/.clang-tidy" "$tmp/"
mkdir -p "$tmp/common" "$tmp/model" "$tmp/build"
printf '#include <string>\nbool Good(const std::string& s) { return s.empty(); }\n' >"$tmp/common/good.cc"
printf '#include <string>\nbool Bad(const std::string& s) { return s.size() == 0; }\n' >"$tmp/common/bad.cc"
cp "$tmp/common/bad.cc" "$tmp/model/torchy.cc"
cat >"$tmp/build/compile_commands.json" <<JSON
[
  {"directory": "$tmp/build", "file": "$tmp/common/good.cc",
   "command": "c++ -std=c++17 -c $tmp/common/good.cc -o good.o"},
  {"directory": "$tmp/build", "file": "$tmp/common/bad.cc",
   "command": "c++ -std=c++17 -c $tmp/common/bad.cc -o bad.o"},
  {"directory": "$tmp/build", "file": "$tmp/model/torchy.cc",
   "command": "c++ -std=c++17 -isystem /usr/include/torch/csrc/api/include -c $tmp/model/torchy.cc"}
]
JSON
set +e
out=$("$root/tests/lint/tidy_test.sh" "$tmp" "$tmp/build" ${tool:+"$tool"} 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 1 ] || ! grep -q "^  common/bad.cc$" <<<"$out" || grep -qE "good.cc|torchy.cc" <<<"$out" ||
  ! grep -q "2 translation units checked" <<<"$out" ||
  ! grep -q "readability-container-size-empty" <<<"$out"; then
  echo "tidy_self_test: the check did not report exactly the file with a finding (exit $rc)" >&2
  exit 1
fi
echo "tidy_self_test: ok"
