#!/usr/bin/env python3
"""Every registered ctest test carries a kind label (issue 12, step 9), so that `ctest -L unit`,
`-L integration` and the others select all the tests of their kind and none is left out of every
selection. Reads `ctest --show-only=json-v1` of a build folder; fails naming each test that has no
label of KINDS, with the CMakeLists.txt that registers it where ctest says. Other labels (data,
fast, tls, observability, sanitize, ...) are free to add beside a kind.

  labels_test.py BUILD_DIR [--ctest CTEST]   check a configured and built tree
  labels_test.py --self-test                 show that a test without a kind label is caught
"""
import argparse
import collections
import json
import subprocess
import sys

# The kinds of docs/architecture.md ("Tests"); a test has at least one.
KINDS = ("unit", "integration", "mpi", "deploy", "gpu", "multigpu", "fuzz", "lint", "load",
         "faults")


def labels_of(test):
    for prop in test.get("properties", []):
        if prop.get("name") == "LABELS":
            return list(prop.get("value") or [])
    return []


def where(test, backtrace):
    """The file:line that registered the test, from json-v1's backtrace graph; for a test that
    gtest_discover_tests found (no backtrace), the binary it runs."""
    try:
        node = backtrace["nodes"][test["backtrace"]]
        return "%s:%s" % (backtrace["files"][node["file"]], node.get("line", "?"))
    except (KeyError, IndexError, TypeError):
        command = test.get("command") or ["?"]
        return "the gtest_discover_tests() of binary %s" % command[0].rsplit("/", 1)[-1]


def check(doc):
    """Returns (per-label counts, problems) for a json-v1 document."""
    counts = collections.Counter()
    problems = []
    backtrace = doc.get("backtraceGraph", {})
    for test in doc.get("tests", []):
        labels = labels_of(test)
        counts.update(labels)
        if not labels:
            counts["(none)"] += 1
        if not any(label in KINDS for label in labels):
            problems.append("%s: labels %s have no kind (%s); registered at %s" % (
                test["name"], labels or "[]", "|".join(KINDS), where(test, backtrace)))
    return counts, problems


def report(doc):
    counts, problems = check(doc)
    total = len(doc.get("tests", []))
    print("labels_test: %d tests; per label: %s" % (
        total, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    for p in problems:
        print("no kind label: " + p)
    if problems:
        print("fix: add a LABELS property with one of %s (set_tests_properties, or "
              "gtest_discover_tests(... PROPERTIES LABELS unit)) in the CMakeLists.txt named above"
              % ", ".join(KINDS))
        return 1
    print("labels_test: every test has a kind label")
    return 0


def self_test():
    def test(name, labels):
        t = {"name": name, "properties": []}
        if labels is not None:
            t["properties"].append({"name": "LABELS", "value": labels})
        return t

    doc = {"kind": "ctestInfo", "tests": [
        test("good_unit", ["unit"]), test("good_mixed", ["data", "integration"]),
        test("bare", None), test("no_kind", ["fast", "data"])]}
    _, problems = check(doc)
    named = sorted(p.split(":", 1)[0] for p in problems)
    if named != ["bare", "no_kind"]:
        print("labels_test --self-test: expected exactly bare and no_kind, got %s" % named)
        return 1
    if report(doc) != 1:
        print("labels_test --self-test: report() did not fail")
        return 1
    if report({"tests": [test("good_unit", ["unit"])]}) != 0:
        print("labels_test --self-test: a clean list failed")
        return 1
    print("labels_test --self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir", nargs="?")
    ap.add_argument("--ctest", default="ctest")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.build_dir:
        ap.error("BUILD_DIR is required")
    out = subprocess.run([args.ctest, "--test-dir", args.build_dir, "--show-only=json-v1"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return report(json.loads(out))


if __name__ == "__main__":
    sys.exit(main())
