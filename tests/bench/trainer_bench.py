#!/usr/bin/env python3
"""Trainer benchmark (a program that prints figures, not a test).

Runs rdattn-train per arm with 1 rank and with 2 MPI ranks (one thread per rank) on a synthetic
byte-level corpus, and prints tokens/s and the step-time breakdown (compute, all-reduce, data)
from the KIND_TRAIN_STEP events: medians over the steps after the first two. The arms
alternate within one run, so machine noise hits each alike; compare the ratios.

  tests/bench/trainer_bench.py --train build/worker/trainer/rdattn-train [--preset cpu-small]
                               [--steps 12] [--arms standard,block,rd] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, write_shard, read_events  # noqa: E402

CONTEXT = {"cpu-small": 128, "cpu-bench": 256, "tiny": 64}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16, help="global batch in sequences")
    ap.add_argument("--arms", default="standard,block,rd")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    ctx = CONTEXT[a.preset]
    tmp = tempfile.mkdtemp(prefix="rdattn-trainer-bench-")
    write_shard(os.path.join(tmp, "b_train_000000.bin"), corpus(1, 2000, 80))
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_plm="isolated")
    results = {}
    for r in range(a.rounds):
        for world in (1, 2):
            for arm in a.arms.split(","):
                name = "%s_w%d_r%d" % (arm, world, r)
                job = {"run_id": name, "init_seed": 1, "model": {"preset": a.preset, "arm": arm},
                       "data": {"train_shards": [os.path.join(tmp, "b_train_000000.bin")], "tokenizer": "byte",
                                "data_seed": 1},
                       "optim": {"peak_lr": 1e-3, "warmup_steps": 1},
                       "schedule": {"total_tokens": a.steps * a.batch * ctx, "global_batch_tokens": a.batch * ctx,
                                    "micro_batch_sequences": a.batch // (2 * world)},
                       "parallel": {"world_size": world, "threads_per_rank": 1}}
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    json.dump(job, f)
                events = os.path.join(tmp, name + ".jsonl")
                cmd = [a.train, "train", "--job", path, "--events", events]
                if world > 1:
                    cmd = [a.mpirun, "-np", str(world), "--oversubscribe"] + cmd
                subprocess.run(cmd, check=True, env=env, capture_output=True)
                steps = [e for e in read_events(events) if e["kind"] == "KIND_TRAIN_STEP"][2:]
                results.setdefault((arm, world), []).extend(steps)
    print("preset=%s context=%d global_batch=%d seqs (%d tokens) steps=%d rounds=%d, 1 thread per rank"
          % (a.preset, ctx, a.batch, a.batch * ctx, a.steps, a.rounds))
    print("%-10s %5s %12s %10s %10s %12s %10s" % ("arm", "ranks", "tokens/s", "step_ms", "compute_ms", "allreduce_ms", "data_ms"))
    tps = {}
    for (arm, world), steps in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = lambda k: statistics.median(s[k] for s in steps)  # noqa: E731
        tps[(arm, world)] = med("tokens_per_second")
        print("%-10s %5d %12.0f %10.1f %10.1f %12.2f %10.2f" % (arm, world, tps[(arm, world)], 1e3 * med("step_seconds"),
                                                             1e3 * med("compute_seconds"), 1e3 * med("allreduce_seconds"),
                                                             1e3 * med("data_seconds")))
    for world in (1, 2):
        if ("rd", world) in tps and ("block", world) in tps:
            print("ranks=%d rd/block tokens/s ratio: %.3f" % (world, tps[("rd", world)] / tps[("block", world)]))
        if ("block", world) in tps and ("standard", world) in tps:
            print("ranks=%d block/standard tokens/s ratio: %.3f" % (world, tps[("block", world)] / tps[("standard", world)]))
    for arm in a.arms.split(","):
        if (arm, 1) in tps and (arm, 2) in tps:
            print("%s: 2 ranks / 1 rank tokens/s: %.3f" % (arm, tps[(arm, 2)] / tps[(arm, 1)]))


if __name__ == "__main__":
    main()
