#!/usr/bin/env python3
"""Smoke test of the benchmark suite (ctest bench_smoke, label `bench`): runs rdattn_model_bench
at its tiniest setting and checks that the JSON holds every figure, finite and positive. It
never looks at what the figures are: timings on shared machines are noisy (docs/benchmarks.md).
Then runs the device checks (--gpu-checks) on the CPU, the code path scripts/gpu_check.sh runs
on a GPU.

  bench_smoke_test.py --bench build/tests/bench/rdattn_model_bench --json out.json [--expect-mpi]
"""
import argparse
import json
import math
import subprocess
import sys

KEYS = ["rd_over_block_tokens_per_second", "rd_over_block_peak_memory",
        "block_over_standard_tokens_per_second", "block_over_standard_peak_memory",
        "standard_flops_over_peak", "block_flops_over_peak", "rd_flops_over_peak"]
ARM_KEYS = ["tokens_per_second", "ms_per_step", "peak_memory_bytes", "peak_rss_bytes", "params", "flops_per_token_forward",
            "flops_per_token_training", "achieved_flops_per_second", "flops_over_peak", "flops_over_peak_causal_attention",
            "measured_matmul_over_analytic_flops"]
MPI_KEYS = ["step_seconds", "data_seconds", "compute_seconds", "allreduce_seconds", "optimizer_seconds",
            "tokens_per_second"]
ARMS = ["standard", "block", "rd", "frozen_v", "average"]
PRESETS = ["tiny"]


def positive(where, obj, key, problems):
    v = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        problems.append("%s.%s = %r (want a finite positive number)" % (where, key, v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--expect-mpi", action="store_true")
    a = ap.parse_args()
    cmd = [a.bench, "--presets", ",".join(PRESETS), "--arms", ",".join(ARMS), "--batch", "2", "--rounds", "1",
           "--steps", "1", "--gemm-size", "128", "--gemm-seconds", "0.05", "--mpi-batch", "2", "--mpi-steps", "1",
           "--probe-jobs", str(len(ARMS)), "--depth-read-ops", "--attention-aten", "--json", a.json]
    if not a.expect_mpi:
        cmd.append("--no-mpi")
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=150)
    with open(a.json) as f:
        out = json.load(f)
    problems = []
    if out.get("primary_preset") != PRESETS[-1]:
        problems.append("primary_preset = %r, want %r" % (out.get("primary_preset"), PRESETS[-1]))
    for k in KEYS:
        positive("top", out, k, problems)
    positive("gemm", out.get("gemm", {}), "flops_per_second", problems)
    for p in PRESETS:
        pj = out.get("per_preset", {}).get(p, {})
        for k in KEYS:
            positive("per_preset.%s" % p, pj, k, problems)
        for arm in ARMS:
            aj = pj.get("arms", {}).get(arm, {})
            for k in ARM_KEYS:
                positive("per_preset.%s.arms.%s" % (p, arm), aj, k, problems)
        # --depth-read-ops: every depth arm also timed with the op-by-op depth read.
        for arm in ARMS:
            if arm == "standard":
                continue
            dj = pj.get("depth_read_op_by_op", {}).get(arm, {})
            for k in ("op_by_op_tokens_per_second", "kernel_over_op_by_op_tokens_per_second"):
                positive("per_preset.%s.depth_read_op_by_op.%s" % (p, arm), dj, k, problems)
        if "standard" in pj.get("depth_read_op_by_op", {}):
            problems.append("per_preset.%s.depth_read_op_by_op has standard (no depth read)" % p)
        # --attention-aten: every arm also timed with LibTorch's bmm in the attention.
        for arm in ARMS:
            bj = pj.get("attention_aten_bmm", {}).get(arm, {})
            for k in ("aten_bmm_tokens_per_second", "direct_over_aten_bmm_tokens_per_second",
                      "direct_over_aten_bmm_round_median"):
                positive("per_preset.%s.attention_aten_bmm.%s" % (p, arm), bj, k, problems)
            # Each timing ran on the path it is named for: every attention product of the main
            # timing went straight to BLAS, every one of this timing through LibTorch's bmm.
            main = pj.get("arms", {}).get(arm, {}).get("attention_gemm_calls_per_step", {})
            aten = bj.get("attention_gemm_calls_per_step", {})
            if not (main.get("direct", 0) > 0 and main.get("libtorch") == 0):
                problems.append("per_preset.%s.arms.%s.attention_gemm_calls_per_step = %r: not all "
                                "direct" % (p, arm, main))
            if not (aten.get("libtorch", 0) > 0 and aten.get("direct") == 0):
                problems.append("per_preset.%s.attention_aten_bmm.%s.attention_gemm_calls_per_step "
                                "= %r: not all LibTorch" % (p, arm, aten))
        for k in KEYS:
            if k in out and k in pj and p == out.get("primary_preset") and out[k] != pj[k]:
                problems.append("top-level %s differs from per_preset.%s" % (k, p))
    if a.expect_mpi:
        mpi = out.get("mpi", {})
        if mpi.get("world_size") != 2:
            problems.append("mpi.world_size = %r (mpi: %r)" % (mpi.get("world_size"), mpi))
        for arm in ARMS:
            for k in MPI_KEYS:
                positive("mpi.arms.%s" % arm, mpi.get("arms", {}).get(arm, {}), k, problems)
    checks = subprocess.run([a.bench, "--gpu-checks", "--device", "cpu", "--check-preset", "tiny"],
                            capture_output=True, text=True, timeout=120)
    sys.stdout.write(checks.stdout)
    if checks.returncode != 0 or "device checks: all passed" not in checks.stdout:
        problems.append("--gpu-checks --device cpu failed (exit %d): %s" % (checks.returncode, checks.stderr))
    for p in problems:
        print("FAIL " + p)
    print("bench_smoke: %s" % ("FAILED" if problems else "every key present, finite and positive"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
