#!/usr/bin/env python3
"""End-to-end tests of rdattn-train with real processes (and real mpirun for world size 2).

Each --case is one ctest test. Shards are written here in the llm.c format from a deterministic
synthetic byte-level corpus (EOT 256 before every document), so the test needs no download.
"""
import argparse
import json
import math
import os
import re
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

EOT = 256


def write_shard(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def corpus(seed, docs, words_per_doc):
    """A byte-level corpus from a small Markov chain over words: learnable structure."""
    rng = random.Random(seed)
    vocab = ["the", "model", "reads", "depth", "value", "query", "block", "routes", "over", "layers",
             "and", "a", "residual", "stream", "with", "learned", "softmax", "mixture", "of", "sources"]
    nxt = {w: rng.sample(vocab, 4) for w in vocab}
    tokens = []
    for _ in range(docs):
        w = rng.choice(vocab)
        words = []
        for _ in range(words_per_doc):
            words.append(w)
            w = rng.choice(nxt[w])
        tokens.append(EOT)
        tokens.extend(" ".join(words).encode())
    return tokens


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}
    return tensors, meta


class Env:
    def __init__(self, args):
        self.train = args.train
        self.mpirun = args.mpirun
        self.tmp = tempfile.mkdtemp(prefix="rdattn-train-test-")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        write_shard(os.path.join(self.data, "c_train_000000.bin"), corpus(1, 300, 60))
        write_shard(os.path.join(self.data, "c_val_000000.bin"), corpus(2, 20, 60))
        write_shard(os.path.join(self.data, "c_test_000000.bin"), corpus(3, 20, 60))

    def job(self, name, **over):
        spec = {
            "run_id": name,
            "init_seed": 5,
            "model": {"preset": "tiny", "arm": "rd"},
            "data": {"train_shards": [os.path.join(self.data, "c_train_*.bin")],
                     "val_shards": [os.path.join(self.data, "c_val_000000.bin")],
                     "test_shards": [os.path.join(self.data, "c_test_000000.bin")],
                     "tokenizer": "byte", "data_seed": 11, "val_windows": 16, "test_windows": 16},
            "optim": {"peak_lr": 3e-3, "warmup_steps": 4},
            "schedule": {"total_tokens": 40 * 512, "global_batch_tokens": 512, "micro_batch_sequences": 2,
                         "milestones_tokens": [10 * 512, 20 * 512]},
            "parallel": {"world_size": 1, "threads_per_rank": 1, "precision": "fp32"},
            "checkpoint": {"dir": os.path.join(self.tmp, name, "ckpt"), "keep_last": 3},
        }
        for path, value in over.items():
            node = spec
            keys = path.split("__")
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            if value is None:
                node.pop(keys[-1], None)
            else:
                node[keys[-1]] = value
        os.makedirs(os.path.join(self.tmp, name), exist_ok=True)
        path = os.path.join(self.tmp, name, "job.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def run(self, job, world=1, extra=(), check=True, events=None):
        events = events or job.replace("job.json", "events.jsonl")
        cmd = [self.train, "train", "--job", job, "--events", events] + list(extra)
        if world > 1:
            cmd = [self.mpirun, "-np", str(world), "--oversubscribe"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
        if check and p.returncode != 0:
            raise AssertionError("%s exited %d\nstdout:%s\nstderr:%s" % (cmd, p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        return p, events


def losses(events):
    return {e["step"]: e["train_loss"] for e in read_events(events) if e["kind"] == "KIND_TRAIN_STEP"}


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print("ok:", msg)


def case_mpi_agreement(env):
    for precision, tol in (("fp64", 1e-9), ("fp32", 1e-4)):
        over = dict(parallel__precision=precision, schedule__total_tokens=20 * 512, schedule__milestones_tokens=[],
                    checkpoint__dir="")
        _, e1 = env.run(env.job("agree1_" + precision, **over))
        over["parallel__world_size"] = 2
        _, e2 = env.run(env.job("agree2_" + precision, **over), world=2)
        l1, l2 = losses(e1), losses(e2)
        check(sorted(l1) == list(range(1, 21)) and sorted(l2) == sorted(l1), "%s: 20 steps logged by both runs" % precision)
        worst = max(abs(l1[s] - l2[s]) / abs(l1[s]) for s in l1)
        print("%s: worst relative loss difference, 1 rank vs 2 MPI ranks: %.3g" % (precision, worst))
        check(worst <= tol, "%s: every step agrees to %.0e relative (worst %.3g)" % (precision, tol, worst))
        check(l1[20] < l1[1], "%s: the loss decreases (%.4f -> %.4f)" % (precision, l1[1], l1[20]))
        init2 = [e for e in read_events(e2) if e["kind"] == "KIND_INIT"][0]
        check(init2["world_size"] == 2, "the 2-rank run reports world_size 2")


def final_tensors(env, name):
    ckpt_dir = os.path.join(env.tmp, name, "ckpt")
    last = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".pt"))[-1]
    out = os.path.join(env.tmp, name, "final.safetensors")
    p = subprocess.run([env.train, "export", "--checkpoint", os.path.join(ckpt_dir, last), "--out", out],
                       capture_output=True, text=True)
    check(p.returncode == 0, "export of %s/%s: %s" % (name, last, p.stderr.strip()))
    return read_safetensors(out)[0]


def case_resume(env):
    _, straight = env.run(env.job("straight"))
    p, part = env.run(env.job("resumed"), extra=["--stop-after-steps", "20"], check=False)
    check(p.returncode == 75, "a run stopped after 20 steps exits 75 (got %d: %s)" % (p.returncode, p.stderr[-500:]))
    kinds = [e["kind"] for e in read_events(part)]
    check("KIND_CHECKPOINT" in kinds and "KIND_FINISHED" not in kinds, "it checkpointed and did not finish")
    env.run(env.job("resumed"))
    a, b = losses(straight), losses(part)
    check(sorted(a) == list(range(1, 41)) and sorted(b) == sorted(a), "both runs logged steps 1..40")
    check(all(a[s] == b[s] for s in a), "every loss is bitwise equal across the interruption")
    ta, tb = final_tensors(env, "straight"), final_tensors(env, "resumed")
    check(sorted(ta) == sorted(tb) and all(ta[k] == tb[k] for k in ta), "final parameters are bitwise equal (%d tensors)" % len(ta))
    # A resume with a config that differs numerically is refused, naming the field.
    job = env.job("resumed", optim__peak_lr=1e-3, schedule__total_tokens=60 * 512)
    p, _ = env.run(job, check=False)
    check(p.returncode != 0 and "optim.peak_lr" in p.stderr, "resume refuses a changed optim.peak_lr: %s" % p.stderr.strip()[-300:])


def case_sigterm(env):
    _, straight = env.run(env.job("straight_t", schedule__total_tokens=300 * 512))
    job = env.job("term", schedule__total_tokens=300 * 512)
    events = job.replace("job.json", "events.jsonl")
    proc = subprocess.Popen([env.train, "train", "--job", job, "--events", events],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(events) and len(losses(events)) >= 30:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    stopped = max(losses(events))
    check(proc.returncode == 75, "SIGTERM at step ~%d: exit 75 (got %d: %s)" % (stopped, proc.returncode, err[-300:]))
    check(stopped < 300, "it stopped before the end (step %d)" % stopped)
    ck = [e for e in read_events(events) if e["kind"] == "KIND_CHECKPOINT"]
    check(ck and ck[-1]["step"] == stopped, "the last checkpoint is at the step it stopped (%d)" % stopped)
    env.run(job)
    a, b = losses(straight), losses(events)
    check(all(a[s] == b[s] for s in a), "all 300 losses equal the uninterrupted run's")
    ta, tb = final_tensors(env, "straight_t"), final_tensors(env, "term")
    check(all(ta[k] == tb[k] for k in ta), "final parameters are bitwise equal after SIGTERM and resume")


def case_bad_input(env):
    d = env.data
    trunc = os.path.join(d, "bad_trunc.bin")
    with open(os.path.join(d, "c_val_000000.bin"), "rb") as f:
        good = f.read()
    with open(trunc, "wb") as f:
        f.write(good[:-7])
    magic = os.path.join(d, "bad_magic.bin")
    with open(magic, "wb") as f:
        f.write(struct.pack("<i", 12345) + good[4:])
    big = os.path.join(d, "bad_vocab.bin")
    write_shard(big, [EOT, 65, 300, 66])
    cases = [
        ("missing shard", dict(data__val_shards=[os.path.join(d, "nope.bin")]), "nope.bin"),
        ("truncated shard", dict(data__val_shards=[trunc]), "bad_trunc.bin"),
        ("wrong magic", dict(data__val_shards=[magic]), "bad_magic.bin"),
        ("token id >= vocab", dict(data__val_shards=[big]), "bad_vocab.bin"),
        ("unknown arm", dict(model__arm="rdx"), "model.arm"),
        ("width not divisible by heads", dict(model__shape={"width": 66, "heads": 4}), "width"),
        ("global batch not divisible", dict(parallel__world_size=1, schedule__global_batch_tokens=3 * 64,
                                            schedule__micro_batch_sequences=2), "schedule.global_batch_tokens"),
        ("milestone beyond the budget", dict(schedule__milestones_tokens=[10 ** 9]), "schedule.milestones_tokens"),
    ]
    for i, (what, over, needle) in enumerate(cases):
        name = "bad%d" % i
        job = env.job(name, **over)
        p, events = env.run(job, check=False)
        check(p.returncode != 0, "%s: non-zero exit (%d)" % (what, p.returncode))
        check(needle in p.stderr, "%s: the error names %s: %s" % (what, needle, p.stderr.strip()[-240:]))
        ckpt = os.path.join(env.tmp, name, "ckpt")
        check(not os.path.exists(ckpt) or not os.listdir(ckpt), "%s: nothing half-written" % what)


def case_export_eval(env):
    _, events = env.run(env.job("ee", schedule__total_tokens=20 * 512, schedule__milestones_tokens=[]))
    ev = [e for e in read_events(events) if e["kind"] == "KIND_EVAL"][-1]
    fin = [e for e in read_events(events) if e["kind"] == "KIND_FINISHED"][-1]
    ckpt_dir = os.path.join(env.tmp, "ee", "ckpt")
    ckpt = os.path.join(ckpt_dir, sorted(os.listdir(ckpt_dir))[-1])
    val = os.path.join(env.data, "c_val_000000.bin")
    out = subprocess.run([env.train, "eval", "--checkpoint", ckpt, "--shard", val, "--windows", "16"],
                         capture_output=True, text=True)
    check(out.returncode == 0, "eval of the checkpoint runs: %s" % out.stderr.strip())
    nll_ckpt = json.loads(out.stdout)["nll"]
    st = os.path.join(env.tmp, "ee", "model.safetensors")
    subprocess.run([env.train, "export", "--checkpoint", ckpt, "--out", st], check=True, capture_output=True)
    tensors, meta = read_safetensors(st)
    check("emb" in tensors and "l0.q_v" in tensors and meta.get("arm") == "rd", "export holds every parameter and the arm")
    check(json.loads(meta["config"])["model"]["arm"] == "rd", "export holds the resolved config")
    out = subprocess.run([env.train, "eval", "--weights", st, "--shard", val, "--windows", "16"],
                         capture_output=True, text=True)
    nll_st = json.loads(out.stdout)["nll"]
    print("val NLL: trainer %.9f, eval(checkpoint) %.9f, eval(export) %.9f" % (ev["val_nll"], nll_ckpt, nll_st))
    check(abs(nll_ckpt - ev["val_nll"]) < 1e-6, "eval of the checkpoint equals the trainer's final val NLL")
    check(abs(nll_st - nll_ckpt) < 1e-6, "eval of the export equals eval of the checkpoint")
    check("test_nll" in fin and math.isfinite(fin["test_nll"]), "FINISHED carries the test NLL (%.4f)" % fin["test_nll"])
    check(len(ev["js_nats"]) == 2 and all(0 <= x <= math.log(2) for x in ev["js_nats"]), "EVAL carries JS per layer in [0, ln 2]")
    p = subprocess.run([env.train, "eval", "--weights", st + ".missing", "--shard", val], capture_output=True, text=True)
    check(p.returncode != 0 and ".missing" in p.stderr, "eval of a missing file names it")


def case_pairing(env):
    sums, orders = {}, {}
    for arm in ("block", "rd", "frozen_v"):
        _, events = env.run(env.job("pair_" + arm, model__arm=arm, schedule__total_tokens=2 * 512,
                                    optim__warmup_steps=1, schedule__milestones_tokens=[], checkpoint__dir=""))
        init = [e for e in read_events(events) if e["kind"] == "KIND_INIT"][0]
        sums[arm], orders[arm] = init["init_param_checksum"], init["data_order_checksum"]
    check(len(set(sums.values())) == 1, "block, rd and frozen_v start from the same shared weights: %s" % sums)
    check(len(set(orders.values())) == 1, "block, rd and frozen_v see the same data order: %s" % orders)
    _, events = env.run(env.job("pair_data", data__data_seed=12, schedule__total_tokens=2 * 512, optim__warmup_steps=1,
                                schedule__milestones_tokens=[], checkpoint__dir=""))
    other_order = [e for e in read_events(events) if e["kind"] == "KIND_INIT"][0]["data_order_checksum"]
    check(other_order != orders["rd"], "another data seed gives another data order checksum")
    _, events = env.run(env.job("pair_seed", init_seed=6, schedule__total_tokens=2 * 512, optim__warmup_steps=1,
                                schedule__milestones_tokens=[], checkpoint__dir=""))
    other = [e for e in read_events(events) if e["kind"] == "KIND_INIT"][0]["init_param_checksum"]
    check(other != sums["rd"], "another init seed gives another checksum")

def evals(events):
    return {e["milestone_tokens"]: e["val_nll"] for e in read_events(events) if e["kind"] == "KIND_EVAL"}


def case_corrupt_checkpoint(env):
    """A truncated newest checkpoint: the trainer falls back to the previous one and says so."""
    _, straight = env.run(env.job("cc_straight"))
    job = env.job("cc", checkpoint__every_steps=5)
    p, events = env.run(job, extra=["--stop-after-steps", "27"], check=False)
    check(p.returncode == 75, "stopped after 27 steps (exit %d)" % p.returncode)
    ckpt = os.path.join(env.tmp, "cc", "ckpt")
    names = sorted(f for f in os.listdir(ckpt) if f.endswith(".pt"))
    newest = os.path.join(ckpt, names[-1])
    check(names[-1] == "ckpt_step_00000027.pt", "the newest checkpoint is step 27 (%s)" % names)
    with open(newest, "rb") as f:
        data = f.read()
    with open(newest, "wb") as f:
        f.write(data[: len(data) // 2])  # a crash in the middle of a copy, a full disk
    p, _ = env.run(job)
    # A warning line of the shared log format (docs/architecture.md "Logs"), with the rank.
    check(re.search(r"^\S+Z W rdattn-train rank=0: .*ckpt_step_00000027\.pt does not read", p.stderr, re.M),
          "the trainer names the bad checkpoint in a warning line on stderr: %s" % p.stderr.strip()[-300:])
    warn = [e for e in read_events(events) if e["kind"] == "KIND_WARNING"]
    check(warn and "ckpt_step_00000027.pt" in warn[0]["warning"], "a KIND_WARNING event names it: %s" %
          (warn[0]["warning"] if warn else None))
    inits = [e for e in read_events(events) if e["kind"] == "KIND_INIT"]
    check(inits[-1]["step"] == 25, "it resumed from the previous checkpoint, step 25 (got %d)" % inits[-1]["step"])
    a, b = losses(straight), losses(events)
    check(sorted(b) == list(range(1, 41)) and all(a[s] == b[s] for s in a),
          "every loss is bitwise equal to the uninterrupted run's")
    check(evals(straight) == evals(events), "every milestone's val NLL is bitwise equal: %s" % evals(events))
    # Another worker's checkpoint (the lease's resume_checkpoint_path, readable here): a run with
    # an empty directory of its own resumes from it.
    theirs = os.path.join(ckpt, "ckpt_step_00000020.pt")
    job2 = env.job("cc_elsewhere", checkpoint__coordinator_checkpoint=theirs)
    p, events2 = env.run(job2)
    init = [e for e in read_events(events2) if e["kind"] == "KIND_INIT"][0]
    check(init["step"] == 20, "a run with an empty directory resumes from the coordinator's checkpoint (step %d)" %
          init["step"])
    b = losses(events2)
    check(sorted(b) == list(range(21, 41)) and all(a[s] == b[s] for s in b),
          "and continues bitwise equal to the uninterrupted run (steps 21..40)")


def case_reevaluate(env):
    """A resumed run evaluates again the milestones the coordinator lacks, bitwise as before."""
    _, straight = env.run(env.job("re_straight"))
    want = evals(straight)
    check(sorted(want) == [10 * 512, 20 * 512, 40 * 512], "the straight run evaluates 3 milestones: %s" % sorted(want))
    # An orphan ran the job to the end; only milestone 10 reached the coordinator.
    _, first = env.run(env.job("re"))
    known = dict(checkpoint__stored_evals_known=True, checkpoint__stored_eval_milestones=[10 * 512])
    events = os.path.join(env.tmp, "re", "events2.jsonl")
    env.run(env.job("re", **known), events=events)
    got = evals(events)
    check(sorted(got) == [20 * 512, 40 * 512], "the resumed run evaluates milestones 20 and 40 again: %s" % sorted(got))
    check(all(got[m] == want[m] for m in got), "bitwise equal to the uninterrupted run's: %s" % got)
    kinds = [e["kind"] for e in read_events(events)]
    check(kinds.count("KIND_TRAIN_STEP") == 0 and kinds[-1] == "KIND_FINISHED",
          "no training step was repeated, and it finished")
    fin = [e for e in read_events(events) if e["kind"] == "KIND_FINISHED"][0]
    fin0 = [e for e in read_events(straight) if e["kind"] == "KIND_FINISHED"][0]
    check(fin["test_nll"] == fin0["test_nll"], "the test NLL is bitwise equal too (%.6f)" % fin["test_nll"])
    # A milestone checkpoint that is gone: the run goes back to an earlier checkpoint and
    # trains through the milestone again.
    ckpt = os.path.join(env.tmp, "re", "ckpt")
    os.remove(os.path.join(ckpt, "ckpt_step_00000020.pt"))
    events3 = os.path.join(env.tmp, "re", "events3.jsonl")
    p, _ = env.run(env.job("re", checkpoint__stored_evals_known=True, checkpoint__stored_eval_milestones=[10 * 512,
                                                                                                       40 * 512]),
                   events=events3)
    got = evals(events3)
    steps = sorted(losses(events3))
    check(20 * 512 in got and got[20 * 512] == want[20 * 512] and steps and steps[0] == 11,
          "without its checkpoint, milestone 20 is trained to again from step 10 and equals: %s (steps %s..)" %
          (got, steps[:1]))
    check("no readable checkpoint" in p.stderr, "and the trainer says why: %s" % p.stderr.strip()[-200:])
    # Standalone (nothing from a coordinator): the checkpoint's own record is trusted.
    events4 = os.path.join(env.tmp, "re", "events4.jsonl")
    env.run(env.job("re"), events=events4)
    check(not evals(events4), "a standalone resume of a finished run evaluates nothing again")


def proc_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def start_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def case_orphan(env):
    """Ranks whose launching worker is gone stop within a second, with no checkpoint."""
    import socket
    for world in (1, 2):
        name = "orphan%d" % world
        job = env.job(name, schedule__total_tokens=2000 * 512, checkpoint__every_steps=5,
                      parallel__world_size=world)
        events = job.replace("job.json", "events.jsonl")
        sup = subprocess.Popen(["sleep", "600"])
        sup_env = dict(os.environ, RDATTN_SUPERVISOR_PID=str(sup.pid), RDATTN_SUPERVISOR_START=start_ticks(sup.pid),
                       RDATTN_SUPERVISOR_HOST=socket.gethostname())
        cmd = [env.train, "train", "--job", job, "--events", events, "--attempt", "1"]
        if world > 1:
            cmd = [env.mpirun, "-np", "2", "--oversubscribe", "-x", "RDATTN_SUPERVISOR_PID", "-x",
                   "RDATTN_SUPERVISOR_START", "-x", "RDATTN_SUPERVISOR_HOST"] + cmd
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sup_env)
        deadline = time.time() + 120
        while time.time() < deadline and not (os.path.exists(events) and len(losses(events)) >= 12):
            time.sleep(0.05)
        check(proc.poll() is None, "%d rank(s): training under a live supervisor" % world)
        ckpt = os.path.join(env.tmp, name, "ckpt")
        sup.kill()
        t0 = time.time()
        sup.wait()
        _, err = proc.communicate(timeout=120)
        detect = time.time() - t0
        listing = sorted(os.listdir(ckpt))
        n_events = len(read_events(events))
        time.sleep(1.0)
        print("detection: %d rank(s) stopped %.2f s after their supervisor was killed" % (world, detect))
        check(proc.returncode == 70 if world == 1 else proc.returncode != 0,
              "%d rank(s): exit %d (%s)" % (world, proc.returncode, err.strip()[-200:]))
        check("is gone" in err, "%d rank(s): the rank says its worker is gone" % world)
        check(detect < 10, "%d rank(s): stopped within 10 s (%.2f s; goal < 60 s)" % (world, detect))
        check(sorted(os.listdir(ckpt)) == listing and len(read_events(events)) == n_events,
              "%d rank(s): nothing written after it stopped" % world)
        if world == 2:
            check(not any(r.endswith(".tmp") for r in listing), "no half-written checkpoint left")
    # mpirun itself ends a 2-rank job when one rank dies.
    job = env.job("rankkill", schedule__total_tokens=2000 * 512, parallel__world_size=2, checkpoint__dir="")
    events = job.replace("job.json", "events.jsonl")
    proc = subprocess.Popen([env.mpirun, "-np", "2", "--oversubscribe", env.train, "train", "--job", job, "--events",
                             events], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(events) and len(losses(events)) >= 5):
        time.sleep(0.05)
    ranks = [int(x) for x in subprocess.run(["pgrep", "-s", str(proc.pid), "-x", "rdattn-train"],
                                            capture_output=True, text=True).stdout.split()]
    check(len(ranks) == 2, "2 ranks running under mpirun (%s)" % ranks)
    os.kill(max(ranks), signal.SIGKILL)
    t0 = time.time()
    proc.communicate(timeout=120)
    detect = time.time() - t0
    print("detection: mpirun ended the 2-rank job %.2f s after one rank was killed" % detect)
    check(proc.returncode != 0 and detect < 60, "mpirun fails the job within 60 s (%.2f s)" % detect)
    t1 = time.time()
    while time.time() - t1 < 10 and not all(proc_gone(r) for r in ranks):
        time.sleep(0.05)
    check(all(proc_gone(r) for r in ranks), "no rank outlives mpirun by more than 10 s (%.2f s)" % (time.time() - t1))


def case_fence(env):
    """An attempt that sees a newer attempt's claim on its checkpoint directory writes nothing more."""
    job = env.job("fence", schedule__total_tokens=2000 * 512, checkpoint__every_steps=3)
    events = job.replace("job.json", "events.jsonl")
    ckpt = os.path.join(env.tmp, "fence", "ckpt")
    asan = os.environ.get("ASAN_OPTIONS", "")  # under ASan, a dead frame's use is reported
    proc = subprocess.Popen([env.train, "train", "--job", job, "--events", events, "--attempt", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, ASAN_OPTIONS=(asan + ":" if asan else "") +
                                     "detect_stack_use_after_return=1"))
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(events) and len(losses(events)) >= 10):
        time.sleep(0.05)
    check(os.path.exists(os.path.join(ckpt, "attempt-3.fence")), "attempt 3 claimed its checkpoint directory")
    with open(os.path.join(ckpt, "attempt-4.fence"), "w") as f:
        f.write("newer\n")
    t0 = time.time()
    n0 = len(read_events(events))
    listing = sorted(f for f in os.listdir(ckpt) if f.endswith(".pt"))
    _, err = proc.communicate(timeout=120)
    print("fenced: attempt 3 stopped %.2f s after attempt 4's claim" % (time.time() - t0))
    check(proc.returncode != 0 and "fenced" in err, "the stale attempt stops, saying it is fenced: %s" %
          err.strip()[-200:])
    check("ERROR: AddressSanitizer" not in err, "no sanitizer report (an ASan build): %s" %
          "\n".join(ln for ln in err.splitlines() if "Sanitizer" in ln or "#" in ln)[:2000])
    fenced_lines = [e for e in read_events(events) if "fenced" in e.get("error", "")]
    check(not fenced_lines, "no KIND_FAILED 'fenced' event: a fenced rank writes nothing after it sees the claim")
    n1 = len(read_events(events))
    check(n1 <= n0 + 1, "at most the one event already in flight is written after the claim (%d -> %d)" % (n0, n1))
    after = sorted(f for f in os.listdir(ckpt) if f.endswith(".pt"))
    check(after == listing, "no checkpoint is written after the claim (%s -> %s)" % (listing[-2:], after[-2:]))
    # And an attempt that starts after a newer one claimed the directory refuses to run.
    p, _ = env.run(job, extra=["--attempt", "2"], check=False)
    check(p.returncode != 0 and "fenced" in p.stderr, "a stale attempt refuses to start: %s" % p.stderr.strip()[-200:])



def case_usage(env):
    """The command line (CLI11, common/cli.h): --help on the binary and on every command exits 0
    and lists the flags with their help and defaults; a usage error is one line on stderr naming
    the flag, "rdattn-train: MESSAGE (see --help)", with exit 2; `train` is the default command and
    --flag_name is still accepted."""
    def run(*argv):
        return subprocess.run([env.train] + list(argv), capture_output=True, text=True, timeout=120)

    for argv in (["--help"], ["-h"]):
        p = run(*argv)
        check(p.returncode == 0 and all(("  %s " % c) in p.stdout for c in ("train", "validate", "export", "eval")),
              "%s lists the commands (exit %d): %s" % (argv, p.returncode, p.stdout))
    flags = {"train": ["--job", "--events TEXT=-", "--peak-flops", "--attempt", "--stop-after-steps"],
             "validate": ["--job"], "export": ["--checkpoint", "--out"],
             "eval": ["--checkpoint", "--weights", "--shard", "--windows", "--micro-batch INT:NONNEGATIVE=8"]}
    for command, names in flags.items():
        p = run(command, "--help")
        check(p.returncode == 0 and all(n in p.stdout for n in names),
              "%s --help lists %s (exit %d): %s" % (command, names, p.returncode, p.stdout))
    job = env.job("usage")
    bad = [
        (["train", "--job", job, "--bogus", "1"], "The following arguments were not expected: 1 --bogus"),
        (["--job", job, "--stop-after-steps", "-1"], "--stop-after-steps: '-1' is not a non-negative integer"),
        (["eval", "--shard", "x.bin", "--windows", "many"], "--windows: 'many' is not a non-negative integer"),
        (["eval", "--shard", "x.bin"], "eval needs exactly one of --checkpoint and --weights"),
        (["export", "--checkpoint", "c.pt"], "--out is required"),
        (["validate", "--job", job, "--events", "e"], "The following arguments were not expected: e --events"),
        ([], "--job is required"),
        (["frobnicate"], "unknown command 'frobnicate'"),
    ]
    for argv, message in bad:
        p = run(*argv)
        want = "rdattn-train: %s (see --help)\n" % message
        check(p.returncode == 2 and p.stderr == want and p.stdout == "",
              "%s: exit 2 and one line %r (got %d: %r)" % (argv, want, p.returncode, p.stderr))
    p = run("validate", "--job", job)
    check(p.returncode == 0 and json.loads(p.stdout)["run_id"] == "usage", "validate prints the resolved job")
    events = os.path.join(env.tmp, "usage", "events.jsonl")
    p = run("--job", job, "--events", events, "--stop_after_steps", "3", "--attempt=2")
    steps = [e for e in read_events(events) if e["kind"] == "KIND_TRAIN_STEP"]
    check(p.returncode == 75 and len(steps) == 3 and all(e["attempt"] == 2 for e in steps),
          "no command is `train`; --stop_after_steps and --attempt=VALUE parse (exit %d, %d steps): %s"
          % (p.returncode, len(steps), p.stderr[-500:]))


# OpenBLAS 0.3's x86-64 cores by the widest instructions their kernels use (common/cpu_features.cc).
BLAS_LEVEL = {name: level for level, names in enumerate((
    ("Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn", "Dunnington",
     "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"),
    ("Sandybridge", "Bulldozer", "Piledriver", "Steamroller"),
    ("Excavator", "Haswell", "Zen"),
    ("SkylakeX", "Cooperlake", "SapphireRapids"))) for name in names}


def best_blas_core():
    """The best OpenBLAS core this CPU runs, from /proc/cpuinfo's flags."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return "Sandybridge" if "avx" in flags else None


def case_blas_core(env):
    """OpenBLAS's kernels (common/cpu_features.h): a user's OPENBLAS_CORETYPE is kept and
    reported; without it, rdattn-train runs the best kernels this CPU has, re-executing itself
    when OpenBLAS chose weaker ones (bookworm's 0.3.21 picks Prescott on CPUs newer than it),
    and the KIND_INIT event says which core ran and how it was chosen."""
    def start(name, extra, total_steps):
        job = env.job(name, schedule__total_tokens=total_steps * 512, schedule__milestones_tokens=[],
                      checkpoint__dir="")
        events = job.replace("job.json", "events.jsonl")
        run_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "RDATTN_BLAS_CORE")}
        run_env.update(extra)
        proc = subprocess.Popen([env.train, "train", "--job", job, "--events", events], env=run_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return proc, events

    def init_event(events):
        return [e for e in read_events(events) if e["kind"] == "KIND_INIT"][0]

    proc, events = start("blas_user", {"OPENBLAS_CORETYPE": "Prescott"}, 6)
    _, err = proc.communicate(timeout=300)
    check(proc.returncode == 0, "blas_user: rdattn-train exits 0 (got %d: %s)" % (proc.returncode, err[-2000:]))
    core = init_event(events).get("blas_core")
    check(core == "Prescott (OPENBLAS_CORETYPE)", "OPENBLAS_CORETYPE=Prescott is kept and reported (blas_core %r)" % core)

    # Without OPENBLAS_CORETYPE: a long run, stopped once it trains.
    proc, events = start("blas_auto", {}, 2000)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not (os.path.exists(events) and len(losses(events)) >= 2):
        time.sleep(0.05)
    check(proc.poll() is None, "blas_auto: rdattn-train is training (exit %s)" % proc.returncode)
    with open("/proc/%d/comm" % proc.pid) as f:
        comm = f.read().strip()
    proc.kill()
    proc.communicate()
    # Re-executed or not, the process keeps its name (ps, pgrep -x, mpirun's messages).
    check(comm == "rdattn-train", "the training process is named rdattn-train (%r)" % comm)
    core = init_event(events).get("blas_core", "")
    best = best_blas_core()
    print("this CPU's best OpenBLAS core: %s; rdattn-train ran: %r" % (best, core))
    fixed = re.match(r"^(\w+) \(set by rdattn: OpenBLAS chose (\w+)\)$", core)
    if fixed:
        check(fixed.group(1) == best and BLAS_LEVEL[fixed.group(2)] < BLAS_LEVEL[best],
              "OpenBLAS chose %s, weaker than this CPU's %s; rdattn-train re-ran with %s" %
              (fixed.group(2), best, fixed.group(1)))
    else:
        check(core in BLAS_LEVEL and (best is None or BLAS_LEVEL[core] >= BLAS_LEVEL[best]),
              "OpenBLAS chose %r itself, at least as wide as this CPU's best (%s)" % (core, best))


def case_cpu_fallback(env):
    """A CUDA build of rdattn-train on a machine without a GPU (tests/debian13): the job runs to
    the end on the CPU, and parallel.device cuda is refused with the reason, before any step."""
    p, events = env.run(env.job("fallback", schedule__total_tokens=12 * 512, schedule__milestones_tokens=[6 * 512]))
    kinds = [e["kind"] for e in read_events(events)]
    check("KIND_FINISHED" in kinds, "the tiny job finished on the CPU (%d events)" % len(kinds))
    init = [e for e in read_events(events) if e["kind"] == "KIND_INIT"][0]
    check(init.get("hardware_kind") == "HARDWARE_KIND_CPU", "it ran on the CPU: %s, %s" % (init.get("hardware_kind"), init.get("device_name")))
    l = losses(events)
    check(sorted(l) == list(range(1, 13)) and all(math.isfinite(v) for v in l.values()), "12 finite losses")
    p, events = env.run(env.job("fallback_cuda", parallel__device="cuda", checkpoint__dir=""), check=False)
    check(p.returncode != 0, "parallel.device cuda without a GPU fails (exit %d)" % p.returncode)
    check("parallel.device" in p.stderr and "no CUDA device" in p.stderr,
          "and says why: %s" % p.stderr.strip()[-300:])
    kinds = [e["kind"] for e in read_events(events)] if os.path.exists(events) else []
    check("KIND_TRAIN_STEP" not in kinds, "no step was taken")


def case_attention_sdpa(env):
    """--attention sdpa (LibTorch >= 2.1): the job trains to the end through SDPA on the CPU, with
    losses that follow the default kernel's to 1e-6 (2.7e-8 measured on LibTorch 2.6); --attention rdattn is the
    default's bits."""
    over = dict(schedule__total_tokens=12 * 512, schedule__milestones_tokens=[6 * 512], checkpoint__dir="")
    _, default = env.run(env.job("attn_default", **over))
    _, own = env.run(env.job("attn_rdattn", **over), extra=["--attention", "rdattn"])
    _, sdpa = env.run(env.job("attn_sdpa", **over), extra=["--attention", "sdpa"])
    ld, lo, ls = losses(default), losses(own), losses(sdpa)
    check(sorted(ls) == list(range(1, 13)) and sorted(ld) == sorted(ls), "12 steps with each kernel")
    check(all(ld[s] == lo[s] for s in ld), "--attention rdattn gives the default's bits on the CPU")
    worst = max(abs(ld[s] - ls[s]) / abs(ld[s]) for s in ld)
    print("worst relative loss difference, sdpa vs rdattn's kernel over 12 steps: %.3g" % worst)
    check(worst <= 1e-6, "sdpa's losses follow rdattn's kernel to 1e-6 relative (worst %.3g)" % worst)
    p, _ = env.run(env.job("attn_bad", **over), extra=["--attention", "flash"], check=False)
    check(p.returncode == 2 and "--attention" in p.stderr, "an unknown kernel is refused: %s" % p.stderr.strip()[-200:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    env = Env(args)
    globals()["case_" + args.case](env)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
