#!/usr/bin/env python3
"""The lock check (issue 25, step 6): rdattn's non-LibTorch sources compile with clang's
-Wthread-safety as errors, so a member declared ABSL_GUARDED_BY(mu_) and touched without mu_
held, a helper marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) called without it, or a guard on a type
that is no lock (a std::mutex) fails lint. Each translation unit of BUILD_DIR's
compile_commands.json (the folders below, less LibTorch TUs: lint_units.py) is compiled with
`clang++ -fsyntax-only` and the database's own flags (its -W options dropped: only this check is
asked for); every finding is printed once, with the files that carry it. Exit 1 on a finding or a
TU that does not compile, 2 when clang++ or the database is missing. Run after a build (the
generated protobuf headers must exist).

  thread_safety_test.py REPO_ROOT BUILD_DIR [--clang CLANG++] [--jobs N] [FILE...]
  thread_safety_test.py --self-test [--clang CLANG++]   show that an unguarded access fails

scripts/lint.sh runs it (its `locks` check, about 2 min of 2 cores for the whole set);
thread_safety_self_test (ctest, label lint) runs --self-test. docs/architecture.md, "Locks".
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lint_units  # noqa: E402

DIRS = ["common/", "model/", "runspec/", "proto/contract/", "worker/", "coordinator/", "client/"]
CHECK_FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror",
               "-ferror-limit=0"]
FINDING = re.compile(r": (warning|error): ")


def find_clang(name):
    for c in ([name] if name else ["clang++", "clang++-14", "clang++-15"]):
        if shutil.which(c):
            return c
    return None


def clang_command(clang, entry, path):
    """The database's compile command as a clang++ syntax check: compiler, output, dependency
    and warning options dropped, the check's flags added."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clang] + CHECK_FLAGS
    skip_next = False
    for a in args[1:]:
        if skip_next:
            skip_next = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip_next = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-W") or a == entry["file"] or a == path:
            continue
        out.append(a)
    return out + [path]


def check(root, build, clang, jobs, files):
    root, build = os.path.abspath(root), os.path.abspath(build)
    db = os.path.join(build, "compile_commands.json")
    if not os.path.isfile(db):
        print("thread_safety_test: %s not found: configure and build first (scripts/test.sh, or "
              "cmake -S . -B build -G Ninja && cmake --build build -j2)" % db, file=sys.stderr)
        return 2
    tool = find_clang(clang)
    if tool is None:
        print("thread_safety_test: clang++ not found (Debian package clang; scripts/setup.sh "
              "installs it)", file=sys.stderr)
        return 2
    units = lint_units.units(db, root, build, set(), DIRS)
    if files:
        wanted = {os.path.relpath(os.path.abspath(f), root) for f in files}
        units = [(rel, e) for rel, e in units if rel in wanted]
    if not units:
        print("thread_safety_test: no translation units to check in %s" % db, file=sys.stderr)
        return 2

    def run(unit):
        rel, entry = unit
        path = os.path.join(root, rel)
        p = subprocess.run(clang_command(tool, entry, path), cwd=entry.get("directory", build),
                           capture_output=True, text=True)
        return rel, p.returncode, p.stdout + p.stderr

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run, units))
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    version = (re.search(r"version [0-9.]+", version) or re.search(r".*", version)).group(0)
    print("thread_safety_test: %d translation units checked with %s %s -Wthread-safety -Werror "
          "in %.0f s (%d jobs)" % (len(units), tool, version, time.time() - t0, jobs))
    findings, bad = [], []
    for rel, rc, text in results:
        lines = [ln.replace(root + "/", "") for ln in text.splitlines() if FINDING.search(ln)]
        if rc != 0 or lines:
            bad.append(rel)
            findings += lines or ["%s: clang++ exited %d:" % (rel, rc)] + text.splitlines()[-5:]
    if bad:
        # A finding in a header is reported by every TU that includes it: print it once.
        print("thread_safety_test: findings (each once; paths relative to %s):" % root)
        for ln in dict.fromkeys(findings):
            print(ln)
        print("thread_safety_test: FAILED: findings in the translation units of %d files:" % len(bad))
        for rel in bad:
            print("  " + rel)
        print("fix: take the lock the member is ABSL_GUARDED_BY (absl::MutexLock lock(&mu_)), or "
              "mark the function that runs under it ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_); check one "
              "file again: tests/lint/thread_safety_test.py %s %s FILE" % (root, build))
        return 1
    print("thread_safety_test: no findings")
    return 0


GOOD = """#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
class Counter {
 public:
  void Add() { absl::MutexLock lock(&mu_); AddLocked(); }
  int value() const { absl::MutexLock lock(&mu_); return n_; }
 private:
  void AddLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++n_; }
  mutable absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
int Use() { Counter c; c.Add(); return c.value(); }
"""
# The planted faults: an unguarded read, and a guard on a type that is no lock.
BAD = GOOD.replace("int value() const { absl::MutexLock lock(&mu_); return n_; }",
                   "int value() const { return n_; }")
STD_MUTEX = """#include <mutex>
#include "absl/base/thread_annotations.h"
struct Box {
  std::mutex mu;
  int n ABSL_GUARDED_BY(mu) = 0;
};
"""


def self_test(clang):
    """A scratch tree and database: common/good.cc (clean), common/bad.cc (an unguarded read),
    client/std_mutex.cc (GUARDED_BY a std::mutex) and model/torchy.cc (the bad file compiled with
    the torch include path: never checked). The check must exit 1 naming exactly the two bad
    files, with the analysis and the attribute finding."""
    assert BAD != GOOD
    with tempfile.TemporaryDirectory() as tmp:
        files = {"common/good.cc": GOOD, "common/bad.cc": BAD, "client/std_mutex.cc": STD_MUTEX,
                 "model/torchy.cc": BAD}
        entries = []
        for rel, text in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(text)
            torch = "-isystem /usr/include/torch/csrc/api/include " if "torchy" in rel else ""
            entries.append('{"directory": "%s/build", "file": "%s", "command": "c++ %s-Wall -Werror '
                           '-std=c++17 -c %s -o x.o"}' % (tmp, path, torch, path))
        os.makedirs(os.path.join(tmp, "build"))
        open(os.path.join(tmp, "build", "compile_commands.json"), "w").write(
            "[\n" + ",\n".join(entries) + "\n]\n")
        p = subprocess.run([sys.executable, os.path.abspath(__file__), tmp, tmp + "/build"] +
                           (["--clang", clang] if clang else []), capture_output=True, text=True)
    out = p.stdout + p.stderr
    print(out)
    listed = re.findall(r"^  (\S+)$", out, re.M)
    ok = (p.returncode == 1 and sorted(listed) == ["client/std_mutex.cc", "common/bad.cc"] and
          "3 translation units checked" in out and
          re.search(r"common/bad.cc:\d+:\d+: error: reading variable 'n_' requires holding mutex "
                    r"'mu_'", out) and
          re.search(r"client/std_mutex.cc:\d+:\d+: error: 'guarded_by' attribute requires", out))
    if not ok:
        print("thread_safety_self_test: the check did not fail on exactly the planted faults "
              "(exit %d)" % p.returncode, file=sys.stderr)
        return 1
    print("thread_safety_self_test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?")
    ap.add_argument("build", nargs="?")
    ap.add_argument("files", nargs="*")
    ap.add_argument("--clang", default="")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("RDATTN_JOBS", "2")))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.clang)
    if not a.root or not a.build:
        ap.error("REPO_ROOT and BUILD_DIR are required (or --self-test)")
    if a.jobs < 1:
        ap.error("--jobs: must be at least 1")
    return check(a.root, a.build, a.clang, a.jobs, a.files)


if __name__ == "__main__":
    sys.exit(main())
