#!/usr/bin/env python3
"""Paired A/B of rdattn-train binaries (a program that prints figures, not a test).

The job of trainer_bench.py (block by default, cpu-small: 16 x 128 tokens, 2 micro-batches per rank,
1 thread per rank). Each round runs every binary at 1 and 2 ranks, the binaries' order reversed every
other round, so machine noise hits each alike; per run the median tokens/s of the TRAIN_STEP events
after the first two. Prints per round the 2 ranks / 1 rank ratio of each binary, then min/median/max
over the rounds and the per-round ratio of every binary to the first.

  tests/bench/trainer_ab.py BEFORE/rdattn-train,AFTER/rdattn-train ROUNDS [ARM]
  env: WORLDS=1,2 (or 2), STEPS=12, PRESET=cpu-small|cpu-bench, BIND=none (mpirun --bind-to),
       MB=N: N sequences per micro-batch at every world size (gradient accumulation makes up the
       global batch of 16), so 2 ranks / 1 rank measures data parallelism alone; default (0):
       trainer_bench.py's 2 micro-batches per rank, i.e. 8 sequences at 1 rank and 4 at 2, which
       also charges 2 ranks for their smaller, less efficient matrix products;
       PAIR=0 skips the control below
The control (with WORLDS 1,2, on by default): per round and binary, two independent 1-rank runs
of the 1-rank job at the same time, pinned to cpu 0 and 1 (taskset). Their summed tokens/s over
one run alone is what this machine gives two busy cores with no communication at all; w2/pair is
the 2-rank job against that yardstick. On a VM whose vCPUs slow each other down, w2/w1 cannot
exceed pair/w1 by much, whatever the trainer does.
"""
import json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, read_events, write_shard  # noqa: E402
bins = sys.argv[1].split(","); rounds = int(sys.argv[2]); arm = sys.argv[3] if len(sys.argv) > 3 else "block"
WORLDS = [int(x) for x in os.environ.get("WORLDS", "1,2").split(",")]
steps = int(os.environ.get("STEPS", "12")); MB = int(os.environ.get("MB", "0")); preset = os.environ.get("PRESET", "cpu-small")
ctx = {"cpu-small": 128, "cpu-bench": 256}[preset]; batch = 16
tmp = tempfile.mkdtemp(prefix="rdattn-trainer-ab-")
shard = os.path.join(tmp, "b_train_000000.bin")
write_shard(shard, corpus(1, 2000, 80))  # the corpus of trainer_bench.py
def write_job(world, tag):  # the job file of this run: trainer_bench.py's job at `world` ranks
    job = {"run_id": tag, "init_seed": 1, "model": {"preset": preset, "arm": arm},
           "data": {"train_shards": [shard], "tokenizer": "byte", "data_seed": 1},
           "optim": {"peak_lr": 1e-3, "warmup_steps": 1},
           "schedule": {"total_tokens": steps * batch * ctx, "global_batch_tokens": batch * ctx,
                        "micro_batch_sequences": MB or batch // (2 * world)},
           "parallel": {"world_size": world, "threads_per_rank": 1}}
    p = os.path.join(tmp, tag + ".json"); json.dump(job, open(p, "w"))
    return p, os.path.join(tmp, tag + ".jsonl")
def medians(ev, keys):  # medians of the TRAIN_STEP events after the first two
    st = [e for e in read_events(ev) if e["kind"] == "KIND_TRAIN_STEP"][2:]
    return {k: statistics.median(s[k] for s in st) for k in keys}
def run(b, world, tag):
    p, ev = write_job(world, tag)
    cmd = [b, "train", "--job", p, "--events", ev]
    if world > 1: cmd = ["mpirun", "-np", str(world), "--oversubscribe"] + (["--bind-to", os.environ["BIND"]] if os.environ.get("BIND") else []) + cmd
    subprocess.run(cmd, check=True, capture_output=True, env=ENV)
    return medians(ev, ("tokens_per_second", "step_seconds", "allreduce_seconds", "compute_seconds", "data_seconds"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_plm="isolated")
res = {}
PAIR = os.environ.get("PAIR", "1") != "0" and WORLDS == [1, 2] and (os.cpu_count() or 1) >= 2


def pair(b, tag):  # two 1-rank runs at once on cpu 0 and 1: their summed tokens/s
    procs, evs = [], []
    for cpu in (0, 1):
        p, ev = write_job(1, "%s_%d" % (tag, cpu)); evs.append(ev)
        procs.append(subprocess.Popen(["taskset", "-c", str(cpu), b, "train", "--job", p, "--events", ev],
                                      env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in procs:
        if p.wait() != 0: raise SystemExit("pair run failed: %s" % b)
    return sum(medians(ev, ("tokens_per_second",))["tokens_per_second"] for ev in evs)


def name(b):  # the binary's folder: build-a/worker/trainer/rdattn-train -> build-a
    parts = os.path.abspath(b).split("/")
    return parts[-4] if len(parts) > 4 and parts[-3:-1] == ["worker", "trainer"] else parts[-2]


for r in range(rounds):
    order = [(b, w) for w in WORLDS for b in (bins if r % 2 == 0 else bins[::-1])]
    for i, (b, w) in enumerate(order):
        res.setdefault((b, w), []).append(run(b, w, "r%d_%d" % (r, i)))
    for i, b in enumerate(bins if r % 2 == 0 else bins[::-1]):
        if PAIR: res.setdefault((b, "pair"), []).append(pair(b, "p%d_%d" % (r, i)))
    line = "round %d:" % r
    for b in (bins if 1 in WORLDS else []):
        line += "  %s w2/w1 %.3f (w1 %.0f, w2 %.0f tok/s, w2 allreduce %.1f ms)" % (
            name(b), res[(b, 2)][-1]["tokens_per_second"] / res[(b, 1)][-1]["tokens_per_second"],
            res[(b, 1)][-1]["tokens_per_second"], res[(b, 2)][-1]["tokens_per_second"], 1e3 * res[(b, 2)][-1]["allreduce_seconds"])
        if PAIR:
            line += " pair/w1 %.3f w2/pair %.3f" % (res[(b, "pair")][-1] / res[(b, 1)][-1]["tokens_per_second"],
                                                  res[(b, 2)][-1]["tokens_per_second"] / res[(b, "pair")][-1])
    for b in bins:
        line += "  [%s w2 %.0f tok/s, ar %.1f ms]" % (name(b), res[(b, 2)][-1]["tokens_per_second"], 1e3 * res[(b, 2)][-1]["allreduce_seconds"]) if 2 in WORLDS else ""
    print(line, "load", open("/proc/loadavg").read().split()[0], flush=True)
print("preset %s arm %s, %d steps, %d rounds" % (preset, arm, steps, rounds))
for b in (bins if 1 in WORLDS else []):
    rat = [x2["tokens_per_second"] / x1["tokens_per_second"] for x1, x2 in zip(res[(b, 1)], res[(b, 2)])]
    t1 = [x["tokens_per_second"] for x in res[(b, 1)]]; t2 = [x["tokens_per_second"] for x in res[(b, 2)]]
    ar = [1e3 * x["allreduce_seconds"] for x in res[(b, 2)]]; st2 = [1e3 * x["step_seconds"] for x in res[(b, 2)]]
    f = lambda v: "%.3f/%.3f/%.3f" % (min(v), statistics.median(v), max(v))
    g = lambda v: "%.0f/%.0f/%.0f" % (min(v), statistics.median(v), max(v))
    print("%-12s w2/w1 min/med/max %s | w1 tok/s %s | w2 tok/s %s | w2 step ms %s | w2 allreduce ms %s" % (name(b), f(rat), g(t1), g(t2), g(st2), "%.1f/%.1f/%.1f" % (min(ar), statistics.median(ar), max(ar))))
    if PAIR:
        pw = [p / x1["tokens_per_second"] for p, x1 in zip(res[(b, "pair")], res[(b, 1)])]
        wp = [x2["tokens_per_second"] / p for p, x2 in zip(res[(b, "pair")], res[(b, 2)])]
        print("%-12s control: two 1-rank runs at once / 1 rank min/med/max %s | w2 / that pair %s" % (name(b), f(pw), f(wp)))
for other in bins[1:]:
    for w in WORLDS:
        pr = [y["tokens_per_second"] / x["tokens_per_second"] for x, y in zip(res[(bins[0], w)], res[(other, w)])]
        print("world %d: %s / %s tokens/s per round min/med/max %.3f/%.3f/%.3f" % (w, name(other), name(bins[0]), min(pr), statistics.median(pr), max(pr)))
