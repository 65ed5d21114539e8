#!/usr/bin/env python3
"""Bitwise comparison of two rdattn-train binaries on fixed tiny jobs (a tool, not a ctest).

Six jobs (1 and 2 MPI ranks; rd, block without clipping, fp64, event cadence 5, stop after 10 steps
then resume), each run by both binaries: every event's non-timing fields (losses, grad norms, val/test
NLLs, depth diagnostics, checksums, steps) must be equal, floats bit for bit. Exit 1 on a difference.

  tests/bench/trainer_events_equal.py A/rdattn-train B/rdattn-train   (MPI environment: rdattn_env)
"""
import json, os, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, write_shard, read_events  # noqa: E402
A, B, MPIRUN = sys.argv[1], sys.argv[2], "mpirun"
tmp = tempfile.mkdtemp(prefix="rdattn-events-equal-")
for n, seed, docs in (("train", 1, 300), ("val", 2, 20), ("test", 3, 20)):
    write_shard(os.path.join(tmp, "c_%s_000000.bin" % n), corpus(seed, docs, 60))
TIMING = ("seconds", "memory", "per_second", "time", "mfu", "flops_over", "hostname", "pid", "wall", "rss", "ts")
def job(name, world, arm="rd", clip=None, every=1, prec="fp32", steps=24):
    spec = {"run_id": name, "init_seed": 5, "model": {"preset": "tiny", "arm": arm},
            "data": {"train_shards": [os.path.join(tmp, "c_train_000000.bin")],
                     "val_shards": [os.path.join(tmp, "c_val_000000.bin")],
                     "test_shards": [os.path.join(tmp, "c_test_000000.bin")],
                     "tokenizer": "byte", "data_seed": 11, "val_windows": 16, "test_windows": 16},
            "optim": {"peak_lr": 3e-3, "warmup_steps": 4},
            "schedule": {"total_tokens": steps * 512, "global_batch_tokens": 512, "micro_batch_sequences": 2,
                         "milestones_tokens": [8 * 512, 16 * 512]},
            "parallel": {"world_size": world, "threads_per_rank": 1, "precision": prec},
            "metrics": {"train_event_every_steps": every}}
    if clip is not None: spec["optim"]["grad_clip"] = clip
    return spec
def run(binary, spec, tag, extra=()):
    d = os.path.join(tmp, tag); os.makedirs(d, exist_ok=True)
    spec = json.loads(json.dumps(spec)); spec["checkpoint"] = {"dir": os.path.join(d, "ckpt"), "keep_last": 3}
    p = os.path.join(d, "job.json"); json.dump(spec, open(p, "w"))
    ev = os.path.join(d, "events.jsonl")
    cmd = [binary, "train", "--job", p, "--events", ev] + list(extra)
    if spec["parallel"]["world_size"] > 1: cmd = [MPIRUN, "-np", str(spec["parallel"]["world_size"]), "--oversubscribe"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, ev, d
def strip(e):
    if isinstance(e, dict):
        return {k: strip(v) for k, v in e.items() if not any(t in k for t in TIMING)}
    if isinstance(e, float): return e.hex()
    if isinstance(e, list): return [strip(x) for x in e]
    if isinstance(e, str): return e.replace("_A/", "_X/").replace("_B/", "_X/")
    return e
cases = [("w1_rd", job("w1_rd", 1), ()), ("w2_rd", job("w2_rd", 2), ()),
         ("w1_block_noclip", job("w1_b", 1, arm="block", clip=0), ()),
         ("w2_block_noclip_every5", job("w2_b", 2, arm="block", clip=0, every=5), ()),
         ("w2_fp64", job("w2_f", 2, prec="fp64"), ()),
         ("w2_stop_after_10", job("w2_s", 2), ("--stop-after-steps", "10"))]
bad = 0
for name, spec, extra in cases:
    out = []
    for tag, binary in (("A", A), ("B", B)):
        rc, ev, d = run(binary, spec, name + "_" + tag, extra)
        evs = [strip(e) for e in read_events(ev)] if os.path.exists(ev) else []
        # a stopped run: resume it to the end (same command again)
        if rc == 75:
            rc2, _, _ = run(binary, spec, name + "_" + tag, ())
            evs = [strip(e) for e in read_events(ev)]
            rc = (rc, rc2)
        out.append((rc, evs))
    (ra, ea), (rb, eb) = out
    nl = sum(1 for e in ea if e.get("kind") == "KIND_TRAIN_STEP")
    ok = ra == rb and ea == eb
    bad += not ok
    print("%-26s rc %s/%s  events %d/%d  train_step events %d  %s" % (name, ra, rb, len(ea), len(eb), nl, "IDENTICAL" if ok else "DIFFER"))
    if not ok:
        for x, y in zip(ea, eb):
            if x != y: print("  A:", json.dumps(x)[:600]); print("  B:", json.dumps(y)[:600]); break
print("tmp", tmp)
sys.exit(1 if bad else 0)
