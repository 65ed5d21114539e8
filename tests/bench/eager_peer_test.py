#!/usr/bin/env python3
"""ctest bench_eager_pytorch (labels integration, bench): rdattn against its eager PyTorch peer
(tests/bench/eager_peer.py, docs/benchmarks.md "rdattn against eager PyTorch") at the tiny preset.
It asserts no speed. It checks that

  1. `rdattn_model_bench --eager-pytorch` runs every arm in both, and that its JSON carries the
     `*_over_eager_pytorch_*` keys (per preset, top level, and the summary), finite and positive,
     the peer's parameter count equal to rdattn's per arm, and the losses of the init forward and
     of each warm-up step (same weights, same batch) equal within the bench's tolerance;
  2. the peer alone (--check) reports the same parameter counts and init losses near ln(vocab);
  3. the bench refuses a peer that is not the same model: copies of the peer with one change
     each (an extra parameter; the depth keys without their RMSNorm; the block boundary one layer
     late; rd's V route reading with the QK query) make it exit 1 naming the parameter count or
     the losses;
  4. a python that cannot run the peer is exit 1 with the reason, not a hang.

  eager_peer_test.py --bench build/tests/bench/rdattn_model_bench --peer tests/bench/eager_peer.py
                     --python /usr/bin/python3 --json out.json
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ARMS = ["standard", "block", "rd", "tied", "average", "average_asym", "frozen_v"]
RATIO_KEYS = ["_over_eager_pytorch_tokens_per_second",
              "_over_eager_pytorch_tokens_per_second_round_median"]
WARMUP = 3


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def run_bench(a, peer, presets, arms, json_path=None, python=None, timeout=300, warmup=WARMUP):
    cmd = [a.bench, "--presets", presets, "--arms", ",".join(arms), "--batch", "2",
           "--rounds", "2", "--steps", "1", "--warmup", str(warmup), "--no-mpi", "--no-memory",
           "--no-flop-check", "--gemm-size", "128", "--gemm-seconds", "0.05", "--eager-pytorch",
           "--eager-peer", peer, "--eager-python", python or a.python]
    if json_path:
        cmd += ["--json", json_path]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_json(doc, problems):
    pj = doc["per_preset"]["tiny"]
    eager = pj.get("eager_pytorch", {})
    for arm in ARMS:
        for suffix in RATIO_KEYS:
            key = arm + suffix
            for where, obj in (("per_preset.tiny", pj), ("top level", doc),
                               ("rdattn_over_eager_pytorch.tiny",
                                doc.get("rdattn_over_eager_pytorch", {}).get("tiny", {}))):
                if not positive(obj.get(key)):
                    problems.append("%s: %s = %r (want a finite positive number)"
                                    % (where, key, obj.get(key)))
        e = eager.get("arms", {}).get(arm, {})
        for key in ("tokens_per_second", "ms_per_step", "params", "init_loss"):
            if not positive(e.get(key)):
                problems.append("eager_pytorch.arms.%s.%s = %r" % (arm, key, e.get(key)))
        rounds = e.get("rdattn_over_eager_pytorch_round_ratios")
        if not isinstance(rounds, list) or len(rounds) != 2 or not all(map(positive, rounds)):
            problems.append("eager_pytorch.arms.%s.rdattn_over_eager_pytorch_round_ratios = %r "
                            "(want 2 positive numbers, one per round)" % (arm, rounds))
        if e.get("params") != pj["arms"][arm]["params"]:
            problems.append("arm %s: peer params %r, rdattn %r"
                            % (arm, e.get("params"), pj["arms"][arm]["params"]))
        if e.get("compared_losses") != WARMUP + 1:
            problems.append("arm %s: %r losses compared, want %d (init + warm-up)"
                            % (arm, e.get("compared_losses"), WARMUP + 1))
        diff = e.get("loss_max_rel_diff")
        if not isinstance(diff, (int, float)) or not diff <= eager.get("loss_tolerance", 0):
            problems.append("arm %s: loss_max_rel_diff %r over the tolerance %r"
                            % (arm, diff, eager.get("loss_tolerance")))
    if eager.get("threads") != doc.get("threads"):
        problems.append("peer threads %r, rdattn %r" % (eager.get("threads"), doc.get("threads")))
    if eager.get("blas_core", "?").split(" ")[0] != doc.get("blas_core", "").split(" ")[0]:
        problems.append("peer OpenBLAS core %r, rdattn %r"
                        % (eager.get("blas_core"), doc.get("blas_core")))


def mutant(src, old, new, tmp, name):
    if src.count(old) != 1:
        raise SystemExit("eager_peer_test: the peer has changed: %r is not in it once; update "
                         "this test's mutation" % old)
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(src.replace(old, new))
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    problems = []

    # 1. The comparison at the tiny preset, every arm.
    r = run_bench(a, a.peer, "tiny", ARMS, a.json)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print("FAIL: rdattn_model_bench --eager-pytorch exited %d" % r.returncode)
        return 1
    if "rdattn ÷ eager PyTorch" not in r.stdout:
        problems.append("the table has no 'rdattn ÷ eager PyTorch' summary")
    with open(a.json) as f:
        doc = json.load(f)
    check_json(doc, problems)

    # 2. The peer alone.
    c = subprocess.run([a.python, a.peer, "--check", "--preset", "tiny", "--arms", ",".join(ARMS)],
                       capture_output=True, text=True, timeout=120)
    if c.returncode != 0:
        problems.append("eager_peer.py --check exited %d: %s" % (c.returncode, c.stdout + c.stderr))
    else:
        info = json.loads(c.stdout)
        for arm in ARMS:
            got = info["arms"][arm]
            if got["params"] != doc["per_preset"]["tiny"]["arms"][arm]["params"]:
                problems.append("--check: arm %s has %d parameters, rdattn %d" % (
                    arm, got["params"], doc["per_preset"]["tiny"]["arms"][arm]["params"]))
            if abs(got["init_loss"] - math.log(257)) > 0.05:
                problems.append("--check: arm %s init loss %.4f, not near ln(257) = %.4f"
                                % (arm, got["init_loss"], math.log(257)))

    # 3. Peers that are not the same model are refused.
    with open(a.peer) as f:
        src = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        mutants = [
            ("extra_param", mutant(src, 'if arm == "rd":', 'if arm in ("rd", "tied"):', tmp,
                                   "extra_param"), ["block", "tied"], "parameters in the peer"),
            ("no_key_norm", mutant(src, "(x @ gq) * inv for x, inv in sources",
                                   "(x @ gq) for x, inv in sources", tmp, "no_key_norm"),
             ["block"], "does not compute the same model"),
            # cpu-small: 2 layers per block, so a late boundary is another source topology.
            ("late_boundary", mutant(src, "if i % per_block == 0:",
                                     "if i % per_block == per_block - 1:", tmp, "late_boundary"),
             ["block"], "does not compute the same model"),
            # rd's V route reading with q_attn (rd computed as tied): equal at init (both queries
            # are 0), apart only as the queries train: 8 warm-up steps at cpu-small.
            ("rd_as_tied", mutant(src, 'qv = layer.q_attn if self.arm == "tied" else layer.q_v',
                                  "qv = layer.q_attn", tmp, "rd_as_tied"),
             ["rd"], "does not compute the same model"),
        ]
        for name, path, arms, want in mutants:
            presets = "cpu-small" if name in ("late_boundary", "rd_as_tied") else "tiny"
            m = run_bench(a, path, presets, arms, warmup=8 if name == "rd_as_tied" else WARMUP)
            if m.returncode != 1 or want not in m.stderr:
                problems.append("mutant %s: exit %d, stderr %r (want exit 1 and %r)"
                                % (name, m.returncode, m.stderr.strip()[-300:], want))
            else:
                print("eager_peer_test: mutant %s refused: %s" % (name, m.stderr.strip()))

    # 4. A python that cannot run the peer.
    m = run_bench(a, a.peer, "tiny", ["block"], python="/nonexistent/python3", timeout=60)
    if m.returncode != 1 or "ended before it was ready" not in m.stderr:
        problems.append("a missing python: exit %d, stderr %r" % (m.returncode, m.stderr.strip()))

    for p in problems:
        print("FAIL: " + p)
    if problems:
        return 1
    print("eager_peer_test: ok; rdattn ÷ eager PyTorch at tiny (round medians, not asserted): " +
          ", ".join("%s %.3f" % (arm, doc["per_preset"]["tiny"][arm + RATIO_KEYS[1]])
                    for arm in ARMS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
