#!/usr/bin/env python3
"""The translation units that the whole-tree linters check (tidy_test.sh, thread_safety_test.py):
every entry of a compilation database inside the source tree, in one of the given folders, less
build outputs (generated code), LibTorch TUs (30-85 s each only to parse; the trainer's threads
use std::mutex, since the trainer-only build has no Abseil) and a skip list.

  lint_units.py DB ROOT BUILD SKIP DIR...   prints one path per line, relative to ROOT
                                            (SKIP: space-separated paths, may be empty)
"""
import json
import os
import sys


def units(db, root, build, skip, dirs):
    """[(path relative to root, database entry)] in database order, each file once."""
    root, build = os.path.abspath(root), os.path.abspath(build)
    seen = set()
    out = []
    for e in json.load(open(db)):
        path = os.path.normpath(os.path.join(e.get("directory", ""), e["file"]))
        rel = os.path.relpath(path, root)
        command = e.get("command") or " ".join(e.get("arguments", []))
        if rel.startswith("..") or path.startswith(build + os.sep) or rel in seen:
            continue
        if not any(rel.startswith(d) for d in dirs) or rel in skip:
            continue
        if "/torch/csrc/api/include" in command or "/include/torch" in command:
            continue
        if os.path.exists(path):
            seen.add(rel)
            out.append((rel, e))
    return out


if __name__ == "__main__":
    db, root, build, skip, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]
    for rel, _ in units(db, root, build, skip, dirs):
        print(rel)
