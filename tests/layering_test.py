#!/usr/bin/env python3
"""Layering test: the include rules of docs/architecture.md, checked on the source tree.

    layering_test.py REPO_ROOT     scan the tree; exit 1 listing file:line: offending include
    layering_test.py --self-test   prove the check can fail: one violating file per rule must be
                                   reported, and a clean tree must pass

Rules (by the file's top-level folder):
  model/                  no gRPC, protobuf, MPI, NCCL or Prometheus headers
  coordinator/, client/   no torch (torch/, ATen/, c10/), CUDA, NCCL or MPI headers
  floors                  common < model < runspec < proto < worker, coordinator, client: a file
                          includes only its own folder and the floors below it (the three top
                          folders are peers and never include each other; generated rdattn/...pb.h
                          headers are proto's; nothing outside tests/ includes tests/)
and one for the whole tree (tests included):
  the LibTorch version seam  only model/torch_compat.cc tests TORCH_VERSION_* in a preprocessor
                             conditional or includes <torch/version.h> (docs/build.md)

Both direct includes and includes reached through the repository's own headers count: a
coordinator file that includes "worker/x.h", which includes <torch/torch.h>, is reported at its
own #include line with the chain. Quoted includes are resolved against the including file's
folder and the repository root; headers that resolve to neither (system, generated) are not
followed. Commented-out includes are ignored. Python 3 standard library only.
"""

import os
import re
import subprocess
import sys
import tempfile

SOURCE_EXTS = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".cu", ".cuh")
SKIP_DIRS = {".git", "data", "node_modules", "third_party", "__pycache__"}

INCLUDE_RE = re.compile(r'^\s*#\s*(?:include|include_next|import)\s*([<"])([^>"]+)[>"]')


def _prefix(*prefixes):
    return lambda h: any(h.startswith(p) for p in prefixes)


def _header(*names):
    """Matches a header by its file name, with or without a folder (mpi.h, openmpi/mpi.h)."""
    return lambda h: any(h == n or h.endswith("/" + n) for n in names)


GRPC = ("gRPC", _prefix("grpcpp/", "grpc/", "grpc++/"))
PROTOBUF = ("protobuf", lambda h: h.startswith("google/protobuf/") or h.endswith(".pb.h"))
MPI = ("MPI", _header("mpi.h", "mpi++.h", "mpicxx.h"))
NCCL = ("NCCL", _header("nccl.h", "nccl_net.h"))
PROMETHEUS = ("Prometheus", _prefix("prometheus/"))
TORCH = ("torch", _prefix("torch/", "ATen/", "c10/", "caffe2/"))
CUDA = ("CUDA", lambda h: bool(re.match(
    r"^(cuda[A-Za-z_0-9]*\.h|cuda/|cub/|thrust/|cublas|cudnn|curand|cusparse|cusolver|cufft|"
    r"nvrtc|nvToolsExt|nvtx3/|cupti)", h)))

# top-level folder -> its floor: a file may include its own folder and lower floors only. The
# three top folders share floor 4 and are peers: none includes another.
FLOORS = {"common": 0, "model": 1, "runspec": 2, "proto": 3, "worker": 4, "coordinator": 4,
          "client": 4, "tests": 99}
FLOOR_ORDER = "common < model < runspec < proto < worker, coordinator, client"
GENERATED_FOLDER = {"rdattn/": "proto"}  # generated headers (build tree) and the folder they belong to

# top-level folder -> forbidden header classes
RULES = {
    "model": [GRPC, PROTOBUF, MPI, NCCL, PROMETHEUS],
    "coordinator": [TORCH, CUDA, NCCL, MPI],
    "client": [TORCH, CUDA, NCCL, MPI],
}


def includes(path):
    """[(line number, header, quoted)] of a file, skipping // and /* */ comments."""
    out = []
    in_block = False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for no, text in enumerate(lines, 1):
        if in_block:
            end = text.find("*/")
            if end < 0:
                continue
            text = text[end + 2:]
            in_block = False
        # Remove complete /* ... */ pieces, then note an unterminated one.
        text = re.sub(r"/\*.*?\*/", " ", text)
        start = text.find("/*")
        if start >= 0:
            text = text[:start]
            in_block = True
        m = INCLUDE_RE.match(text)
        if m:
            out.append((no, m.group(2).strip(), m.group(1) == '"'))
    return out


VERSION_SEAM = "model/torch_compat.cc"
VERSION_COND_RE = re.compile(r"^\s*#\s*(?:if|elif|ifdef|ifndef)\b.*\bTORCH_VERSION")


def check_version_seam(root):
    """[violation strings]: LibTorch version tests outside VERSION_SEAM, in every source file."""
    root = os.path.abspath(root)
    out = []
    for path in source_files(root):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel == VERSION_SEAM:
            continue
        for no, header, _ in includes(path):
            if header == "torch/version.h":
                out.append(f"{rel}:{no}: #include <torch/version.h>  (LibTorch version tests belong in {VERSION_SEAM})")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for no, text in enumerate(lines, 1):
            if VERSION_COND_RE.match(text):
                out.append(f"{rel}:{no}: {text.strip()}  (LibTorch version tests belong in {VERSION_SEAM})")
    return out


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not d.startswith(".")
            and not (rel_dir == "." and d.startswith("build")))
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXTS):
                yield os.path.join(dirpath, name)


def check(root):
    """Returns (number of files scanned, [violation strings])."""
    root = os.path.abspath(root)
    cache = {}

    def incs(path):
        if path not in cache:
            cache[path] = includes(path)
        return cache[path]

    def resolve(including, header):
        for base in (os.path.dirname(including), root):
            cand = os.path.normpath(os.path.join(base, header))
            if cand.startswith(root + os.sep) and os.path.isfile(cand):
                return cand
        return None

    def first_violation(path, rules, seen):
        """(header class, chain) of the first forbidden header reachable from path, or None."""
        for _, header, quoted in incs(path):
            for label, match in rules:
                if match(header):
                    return label, [header]
            target = resolve(path, header) if quoted or "/" in header else None
            if target and target not in seen:
                seen.add(target)
                hit = first_violation(target, rules, seen)
                if hit:
                    return hit[0], [os.path.relpath(target, root)] + hit[1]
        return None

    def included_folder(path, header, quoted):
        """The top-level folder an include lands in, or None (system and third-party headers)."""
        target = resolve(path, header) if quoted or "/" in header else None
        if target:
            return os.path.relpath(target, root).split(os.sep, 1)[0]
        for prefix, folder in GENERATED_FOLDER.items():
            if quoted and header.startswith(prefix):
                return folder
        return None

    violations = []
    scanned = 0
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        top = rel.split(os.sep, 1)[0]
        if top not in FLOORS or top == "tests":
            continue
        rules = RULES.get(top, [])
        scanned += 1
        for no, header, quoted in incs(path):
            shown = f'"{header}"' if quoted else f"<{header}>"
            direct = [label for label, match in rules if match(header)]
            if direct:
                violations.append(f"{rel}:{no}: #include {shown}  ({direct[0]} header not allowed in {top}/)")
                continue
            target = resolve(path, header) if quoted or "/" in header else None
            if target and rules:
                hit = first_violation(target, rules, {path, target})
                if hit:
                    chain = " -> ".join([os.path.relpath(target, root)] + hit[1])
                    violations.append(
                        f"{rel}:{no}: #include {shown}  (reaches {hit[0]} header, not allowed in {top}/: {chain})")
                    continue
            folder = included_folder(path, header, quoted)
            if folder in FLOORS and folder != top and FLOORS[folder] >= FLOORS[top]:
                why = "a peer on the same floor" if FLOORS[folder] == FLOORS[top] else "a higher floor"
                violations.append(f"{rel}:{no}: #include {shown}  (climbs: {folder}/ is {why} than {top}/; "
                                  f"floors: {FLOOR_ORDER})")
    return scanned, violations


def main_scan(root):
    if not os.path.isdir(root) or not os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        print(f"layering_test: {root!r} is not the repository root (no CMakeLists.txt)", file=sys.stderr)
        return 2
    scanned, violations = check(root)
    violations += check_version_seam(root)
    if violations:
        print(f"layering_test: {len(violations)} layering violation(s) in {scanned} files "
              f"under {', '.join(d + '/' for d in FLOORS if d != 'tests')}:")
        for v in violations:
            print("  " + v)
        print("See docs/architecture.md: model/ is pure LibTorch; coordinator/ and client/ never see torch;"
              f" the floors are {FLOOR_ORDER}.")
        return 1
    print(f"layering_test: OK, {scanned} files under {', '.join(d + '/' for d in FLOORS if d != 'tests')} "
          f"follow the rules")
    return 0


# ------------------------------------------------------------------------------------------------
# Self-test: one violating file per rule, a transitive case, and a clean tree.

VIOLATING = {
    # path: the include that must be reported
    "model/v_grpcpp.cc": "<grpcpp/grpcpp.h>",
    "model/v_grpc.h": "<grpc/grpc.h>",
    "model/v_protobuf.cc": "<google/protobuf/message.h>",
    "model/v_pb.cpp": '"rdattn/v1/run_spec.pb.h"',
    "model/v_mpi.cc": "<mpi.h>",
    "model/v_nccl.cu": "<nccl.h>",
    "model/v_prometheus.hpp": "<prometheus/counter.h>",
    "coordinator/v_torch.cc": "<torch/torch.h>",
    "coordinator/v_aten.h": "<ATen/ATen.h>",
    "coordinator/v_c10.cc": "<c10/util/Optional.h>",
    "coordinator/v_cuda.cc": "<cuda_runtime.h>",
    "coordinator/v_nccl.cc": "<nccl.h>",
    "coordinator/v_mpi.cc": "<mpi.h>",
    "client/v_torch.cc": "<torch/script.h>",
    "client/v_aten.cpp": "<ATen/Tensor.h>",
    "client/v_c10.h": "<c10/core/Device.h>",
    "client/v_cuda.cc": "<cuda.h>",
    "client/v_nccl.cc": "<nccl.h>",
    "client/v_mpi.cc": "<mpi.h>",
    # through a repository header (worker/ may include torch and MPI itself)
    "coordinator/v_transitive.cc": '"worker/uses_torch.h"',
    "model/v_transitive.cc": '"worker/uses_mpi.h"',
    # floors: each include that climbs, and the peers on the top floor
    "common/v_floor_model.cc": '"model/config.h"',
    "model/v_floor_runspec.h": '"runspec/run_config.h"',
    "runspec/v_floor_proto.cc": '"proto/contract.h"',
    "runspec/v_floor_generated.cc": '"rdattn/v1/run_spec.pb.h"',
    "proto/v_floor_worker.cc": '"worker/inner.h"',
    "worker/v_floor_coordinator.cc": '"coordinator/client_api.h"',
    "coordinator/v_floor_client.cc": '"client/main.h"',
    "client/v_floor_worker.cc": '"worker/uses_mpi.h"',
    "coordinator/v_floor_tests.cc": '"tests/helpers.h"',
    "model/v_floor_relative.cc": '"../runspec/run_config.h"',
}

CLEAN = {
    "CMakeLists.txt": "# test tree\n",
    "model/gpt.h": "#pragma once\n#include <torch/torch.h>\n#include <vector>\n#include \"model/config.h\"\n",
    "model/config.h": "#pragma once\n#include <string>\n",
    "model/gpt.cc": ("#include \"model/gpt.h\"\n// #include <mpi.h>\n/* #include <grpcpp/grpcpp.h> */\n"
                     "/*\n#include <prometheus/counter.h>\n*/\nint x;\n"),
    "model/kernels.cu": "#include <cuda_runtime.h>\n#include <ATen/ATen.h>\n",
    "coordinator/server.cc": ("#include <grpcpp/grpcpp.h>\n#include <prometheus/exposer.h>\n"
                              "#include \"rdattn/v1/coordinator.grpc.pb.h\"\n#include \"model/config.h\"\n"
                              "#include <sqlite3.h>\n#include <absl/status/status.h>\n"),
    "client/main.cc": "#include <grpcpp/grpcpp.h>\n#include \"proto/client_api.h\"\n// #include <torch/torch.h>\n",
    "client/main.h": "#pragma once\n#include \"client/main_args.h\"\n#include \"runspec/run_config.h\"\n",
    "client/main_args.h": "#pragma once\n#include \"common/strings.h\"\n#include \"rdattn/v1/run_spec.pb.h\"\n",
    "proto/client_api.h": "#pragma once\n#include <string>\n#include \"runspec/run_config.h\"\n",
    "proto/contract.h": "#pragma once\n#include \"rdattn/v1/run_spec.pb.h\"\n",
    "coordinator/client_api.h": "#pragma once\n#include <string>\n#include \"proto/contract.h\"\n",
    "runspec/run_config.h": "#pragma once\n#include \"model/config.h\"\n#include \"common/strings.h\"\n",
    "runspec/run_config.cc": "#include \"run_config.h\"\n#include <nlohmann/json.hpp>\n",
    "common/strings.h": "#pragma once\n#include <string>\n#include <absl/strings/str_cat.h>\n",
    "tests/helpers.h": "#pragma once\n",
    "worker/trainer.cc": "#include <torch/torch.h>\n#include <mpi.h>\n#include <nccl.h>\n#include <grpcpp/grpcpp.h>\n",
    "worker/uses_torch.h": "#pragma once\n#include \"worker/inner.h\"\n",
    "worker/inner.h": "#pragma once\n#include <torch/torch.h>\n",
    "worker/uses_mpi.h": "#pragma once\n#include <mpi.h>\n",
    "tests/model_test.cc": "#include <torch/torch.h>\n#include <mpi.h>\n#include <grpcpp/grpcpp.h>\n",
    "build/model/ignored.cc": "#include <grpcpp/grpcpp.h>\n",
    # The one file allowed to test the LibTorch version (and a comment elsewhere naming it).
    "model/torch_compat.cc": "#include <torch/version.h>\n#if TORCH_VERSION_MAJOR >= 2\nint v2;\n#endif\n",
    "worker/notes.cc": "// TORCH_VERSION_MAJOR is tested in model/torch_compat.cc only\nint n;\n",
}

# Version tests outside the seam: each must be reported.
VERSION_VIOLATING = {
    "worker/v_version_if.cc": "#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)\n#endif\n",
    "tests/v_version_elif.cc": "#if 0\n#elif TORCH_VERSION_MINOR\n#endif\n",
    "model/v_version_include.h": "#include <torch/version.h>\n",
}


def _write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    failures = []
    me = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory(prefix="rdattn_layering_") as tmp:
        clean = os.path.join(tmp, "clean")
        _write_tree(clean, CLEAN)
        scanned, violations = check(clean)
        if violations:
            failures.append("clean tree reported violations: " + "; ".join(violations))
        if scanned != 20:
            failures.append(f"clean tree: expected 20 files under the floors' folders, scanned {scanned}")
        if check_version_seam(clean):
            failures.append("clean tree reported version-seam violations: " + "; ".join(check_version_seam(clean)))
        run = subprocess.run([sys.executable, me, clean], capture_output=True, text=True)
        if run.returncode != 0:
            failures.append(f"clean tree: exit {run.returncode}, expected 0: {run.stdout}{run.stderr}")

        # Each violating file in a tree of its own (plus the clean files), so each rule is shown
        # to fail on its own; then all together.
        for rel, inc in VIOLATING.items():
            tree = os.path.join(tmp, "v_" + rel.replace("/", "_"))
            files = dict(CLEAN)
            files[rel] = f"// rule check\n#include {inc}\n"
            _write_tree(tree, files)
            _, violations = check(tree)
            expect = f"{rel}:2: #include {inc}"
            if not any(v.startswith(expect) for v in violations):
                failures.append(f"{rel}: expected a violation '{expect}', got {violations}")
            if len(violations) != 1:
                failures.append(f"{rel}: expected exactly 1 violation, got {violations}")
            run = subprocess.run([sys.executable, me, tree], capture_output=True, text=True)
            if run.returncode != 1 or expect not in run.stdout:
                failures.append(f"{rel}: expected exit 1 listing '{expect}', got exit {run.returncode}: {run.stdout}")

        for rel, text in VERSION_VIOLATING.items():
            tree = os.path.join(tmp, "vv_" + rel.replace("/", "_"))
            files = dict(CLEAN)
            files[rel] = text
            _write_tree(tree, files)
            found = check_version_seam(tree)
            if len(found) != 1 or not found[0].startswith(rel + ":"):
                failures.append(f"{rel}: expected exactly 1 version-seam violation in it, got {found}")
            run = subprocess.run([sys.executable, me, tree], capture_output=True, text=True)
            if run.returncode != 1 or rel not in run.stdout:
                failures.append(f"{rel}: expected exit 1 naming it, got exit {run.returncode}: {run.stdout}")

        everything = os.path.join(tmp, "all")
        files = dict(CLEAN)
        files.update({rel: f"#include {inc}\n" for rel, inc in VIOLATING.items()})
        _write_tree(everything, files)
        _, violations = check(everything)
        if len(violations) != len(VIOLATING):
            failures.append(f"all rules together: expected {len(VIOLATING)} violations, got {len(violations)}")

        run = subprocess.run([sys.executable, me, os.path.join(tmp, "no_such_dir")], capture_output=True, text=True)
        if run.returncode != 2:
            failures.append(f"missing root: expected exit 2, got {run.returncode}")

    if failures:
        print("layering_test --self-test: FAILED")
        for f in failures:
            print("  " + f)
        return 1
    print(f"layering_test --self-test: OK ({len(VIOLATING)} violating files and "
          f"{len(VERSION_VIOLATING)} version-seam violations each reported, "
          f"clean tree passes, missing root rejected)")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) == 2 and not argv[1].startswith("-"):
        return main_scan(argv[1])
    print(__doc__.strip().splitlines()[0], file=sys.stderr)
    print("usage: layering_test.py REPO_ROOT | --self-test", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
