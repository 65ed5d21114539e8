#!/usr/bin/python3
"""Data identity with real processes (docs/operations.md "Data identity"; issue 24, item 4).

Uses the Cluster harness of faults_test.py (real coordinator, workers and rdattn-train; lease 6 s,
heartbeat 1 s; a tiny 60-step block-vs-rd sweep with milestones at steps 20/40/60).

  shard_rewrite         one worker, seeds 1 and 2 (four jobs, one after another). While the first
                        job trains, its train shard is rewritten in place: same size, other text.
                        Before: the sweep SUCCEEDED silently with a pair whose arms read different
                        tokens. After: the job that was reading the shard fails (it changed on
                        disk), its retry reads other data than its first attempt and the job ends
                        FAILED naming the shard and both digests without using up its attempts;
                        no pair of that seed is ever reported as a pair (GetReport); the other
                        seed's arms, which read only the new text, SUCCEED and every stored val
                        and test NLL is bitwise equal to an uninterrupted run.
  shard_rewrite_resume  one worker, kill -9 mid-job (after a checkpoint), the train shard
                        rewritten in place, a new worker: the resumed attempt reads other data
                        than the first one, and the job ends FAILED naming the shard, after 2
                        attempts of 3.
  manifest_mismatch     rdattn-train alone on shards made by `rdattn-data prepare`: INIT records
                        the manifest's digests; a shard rewritten in place fails the run at start
                        with an error naming the shard, the manifest and both digests.
"""
import os
import signal
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from faults_test import MILESTONES, corpus, ranks_under, run, sweep_yaml, wait_ranks_gone  # noqa: E402
from itest import check  # noqa: E402

SHARD = "f_train_000000.bin"


def rewrite_in_place(path, seed=7):
    """Overwrites the tokens of an llm.c shard in place (same inode, same size, other text)."""
    with open(path, "rb") as f:
        old = f.read()
    n = struct.unpack_from("<i", old, 8)[0]
    new = corpus(seed, 400, 60)
    new = (new * (n // len(new) + 1))[:n]
    body = struct.pack("<%dH" % n, *new)
    check(body != old[1024:], "the new text differs from the old")
    before = os.stat(path)
    with open(path, "r+b") as f:  # no truncation, no rename: the same file
        f.seek(1024)
        f.write(body)
    after = os.stat(path)
    check(after.st_ino == before.st_ino and after.st_size == before.st_size,
          "rewritten in place: same inode, same size (%d bytes)" % after.st_size)


def inits_of(c, events, job_id):
    K = c.rpb.MetricEvent
    return [e for e in events.get(job_id, []) if e.kind == K.KIND_INIT]


def check_no_pair_of_different_data(c, sid, done, events):
    """No two SUCCEEDED jobs of one pair group read different data, and GetReport never pairs
    arms whose INIT data digests differ."""
    groups = {}
    for j in done.jobs:
        inits = inits_of(c, events, j.job.job_id)
        digests = {e.data_digest for e in inits}
        check(all(digests), "%s: every INIT event carries a data digest (%s)" % (j.job.job_id, digests))
        groups.setdefault(j.job.seed, []).append((j, digests))
    rep = c.svc.GetReport(c.cpb.GetReportRequest(sweep_id=sid, omit_files=True), timeout=120).report
    paired = {}
    for row in rep.rows:
        if row.arm != "rd" or row.kind != "main" or row.split != "val":
            continue
        for p in row.pairs:
            if p.complete:
                paired.setdefault(p.seed, set()).add(row.milestone_tokens)
    for seed, members in groups.items():
        all_digests = set().union(*[d for _, d in members])
        if len(all_digests) > 1:
            check(seed not in paired, "seed %d: its arms read different data (%s) and GetReport pairs them at no "
                  "milestone (paired at %s)" % (seed, sorted(all_digests), sorted(paired.get(seed, []))))
    return rep, paired


def scenario_shard_rewrite(c):
    c.start_coordinator()
    c.start_worker("w0")
    sid = c.submit(sweep_yaml(c.data, max_attempts=3, seeds=(1, 2)))
    st = c.wait(sid, lambda s: any(j.state == c.spb.JOB_STATE_RUNNING and j.step >= 1 for j in s.jobs),
                "the first job to train", 300)
    first = [j for j in st.jobs if j.state == c.spb.JOB_STATE_RUNNING][0]
    # The rank is paused while the shard is rewritten, so that the rewrite lands mid-run on any
    # machine (a tiny job trains 60 steps in a few seconds).
    ranks = ranks_under(c.workers["w0"][1])
    check(len(ranks) == 1, "w0 runs one rank (%s)" % ranks)
    os.kill(ranks[0], signal.SIGSTOP)
    path = os.path.join(c.data, SHARD)
    with open(path, "rb") as f:
        old_bytes = f.read()
    rewrite_in_place(path)
    os.kill(ranks[0], signal.SIGCONT)
    print("rewrote %s in place while %s was at step %d" % (SHARD, first.job.job_id, c.status(sid).jobs[0].step))
    done = c.wait_terminal(sid)
    by_id = {j.job.job_id: j for j in done.jobs}
    for j in done.jobs:
        print("%s: %s after %d attempts: %s" % (j.job.job_id, c.spb.JobState.Name(j.state), j.attempts,
                                                j.failure_reason[:400].replace("\n", " | ")))
    check(done.state != c.spb.SWEEP_STATE_SUCCEEDED,
          "the sweep did not SUCCEED silently with a shard rewritten under it (%s)" %
          c.spb.SweepState.Name(done.state))
    events = c.events(sid)
    K = c.rpb.MetricEvent
    j1 = by_id[first.job.job_id]
    # Its first attempt noticed the rewrite before reporting a result read from mixed data.
    failed1 = [e for e in events.get(j1.job.job_id, []) if e.kind == K.KIND_FAILED and e.attempt == 1]
    check(failed1 and SHARD in failed1[0].error and "changed on disk while this run read it" in failed1[0].error,
          "attempt 1 of %s failed naming the shard that changed under it: %s" %
          (j1.job.job_id, failed1[0].error[:300] if failed1 else None))
    # Whatever attempt 1 stored was computed from the old text only: bitwise equal to an
    # uninterrupted run on the old shard (run with the old bytes put back for a moment).
    evals1 = {e.milestone_tokens: e.val_nll for e in events.get(j1.job.job_id, [])
              if e.kind == K.KIND_EVAL and e.attempt == 1}
    if evals1:
        new_bytes = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(old_bytes)
        want, _ = c.baseline(j1.job.run, "old_" + j1.job.job_id.replace("/", "_"))
        with open(path, "wb") as f:
            f.write(new_bytes)
        check(all(v == want[m] for m, v in evals1.items()),
              "attempt 1's stored val NLLs %s are those of the old text, bitwise" % sorted(evals1))
    print("attempt 1 stored val NLLs at %s (all from the old text)" % sorted(evals1))
    # Its retry read other data than its first attempt: FAILED at once, naming the shard.
    inits = inits_of(c, events, j1.job.job_id)
    check(j1.state == c.spb.JOB_STATE_FAILED and j1.attempts == 2,
          "%s is FAILED after 2 of 3 attempts, not retried into the same data (attempts %d)" %
          (j1.job.job_id, j1.attempts))
    reason = j1.failure_reason
    check(reason.startswith("data changed: ") and SHARD in reason and "not retried" in reason,
          "its reason names the shard: %s" % reason[:400])
    check(len(inits) == 2 and inits[0].data_digest != inits[1].data_digest,
          "its two attempts' INIT events carry different data digests")
    d0 = [d.digest for d in inits[0].shard_digests if d.path.endswith(SHARD)]
    d1 = [d.digest for d in inits[1].shard_digests if d.path.endswith(SHARD)]
    check(d0 and d1 and d0[0] in reason and d1[0] in reason,
          "the reason quotes both digests of the shard (%s, %s)" % (d0, d1))
    for d in inits[0].shard_digests:
        check(d.digest.startswith("xxh3:") and d.bytes > 1024 and d.role in ("train", "val", "test"),
              "INIT records role, path, digest and size of %s" % d.path)
    check(sorted(d.role for d in inits[0].shard_digests) == ["test", "train", "val"],
          "INIT records every shard the run opened (train, val, test)")
    _, paired = check_no_pair_of_different_data(c, sid, done, events)
    check(first.job.seed not in paired, "seed %d (the pair the rewrite split) is never reported as a pair" %
          first.job.seed)
    # The other seed's arms read only the new text: they SUCCEED, are paired, and every result is
    # bitwise equal to an uninterrupted run (of the data now on disk).
    others = [j for j in done.jobs if j.job.seed != first.job.seed]
    check(len(others) == 2 and all(j.state == c.spb.JOB_STATE_SUCCEEDED for j in others),
          "the untouched seed's two jobs SUCCEEDED (%s)" % [c.spb.JobState.Name(j.state) for j in others])
    check(sorted(paired.get(others[0].job.seed, [])) == MILESTONES,
          "the untouched seed is paired at every milestone (%s)" % sorted(paired.get(others[0].job.seed, [])))
    c.check_results_equal_baseline(done, events, jobs={j.job.job_id for j in others})


def scenario_shard_rewrite_resume(c):
    c.start_coordinator()
    c.start_worker("w0")
    sid = c.submit(sweep_yaml(c.data, max_attempts=3))
    st = c.wait(sid, lambda s: any(j.state == c.spb.JOB_STATE_RUNNING and j.last_checkpoint_path for j in s.jobs),
                "the first job to checkpoint", 300)
    victim = [j for j in st.jobs if j.state == c.spb.JOB_STATE_RUNNING][0]
    ranks, t0 = c.kill_worker("w0")
    wait_ranks_gone(ranks, t0)
    rewrite_in_place(os.path.join(c.data, SHARD))
    print("killed w0 with %s at step %d, rewrote %s" % (victim.job.job_id, victim.step, SHARD))
    c.start_worker("w1")
    done = c.wait_terminal(sid)
    by_id = {j.job.job_id: j for j in done.jobs}
    for j in done.jobs:
        print("%s: %s after %d attempts: %s" % (j.job.job_id, c.spb.JobState.Name(j.state), j.attempts,
                                                j.failure_reason[:400].replace("\n", " | ")))
    check(done.state != c.spb.SWEEP_STATE_SUCCEEDED,
          "the sweep did not SUCCEED silently with a job resumed on rewritten data (%s)" %
          c.spb.SweepState.Name(done.state))
    j = by_id[victim.job.job_id]
    events = c.events(sid)
    inits = inits_of(c, events, j.job.job_id)
    check(j.state == c.spb.JOB_STATE_FAILED and j.attempts == 2,
          "the resumed job is FAILED in attempt 2 of 3 (attempts %d)" % j.attempts)
    check(len(inits) == 2 and inits[1].step > 0, "attempt 2 resumed from a checkpoint (step %d)" %
          (inits[1].step if len(inits) == 2 else -1))
    check(j.failure_reason.startswith("data changed: ") and SHARD in j.failure_reason and
          "attempt 1" in j.failure_reason,
          "its reason names the shard and the first attempt: %s" % j.failure_reason[:400])
    K = c.rpb.MetricEvent
    late = [e for e in events.get(j.job.job_id, []) if e.attempt == 2 and e.kind == K.KIND_EVAL]
    check(not late, "attempt 2 stored no val NLL (%d)" % len(late))
    check_no_pair_of_different_data(c, sid, done, events)


def scenario_manifest_mismatch(c):
    """rdattn-train alone on shards made by `rdattn-data prepare`: the INIT event records the
    manifest's digests; after a shard is rewritten in place the run fails at start, naming the
    shard, the manifest and both digests."""
    import json
    import subprocess
    words = " ".join(chr(97 + (i * 7) % 26) * (1 + i % 5) for i in range(20000))
    src = os.path.join(c.tmp, "text")
    os.makedirs(src)
    for name, text in (("train.txt", words), ("val.txt", words[:6000]), ("test.txt", words[6000:12000])):
        with open(os.path.join(src, name), "w") as f:
            f.write(text)
    out = os.path.join(c.tmp, "prepared")
    data_bin = os.path.join(os.path.dirname(c.train), "..", "data", "rdattn-data")
    p = subprocess.run([data_bin, "prepare", "--tokenizer", "byte", "--out", out, "--prefix", "m", "--text",
                        os.path.join(src, "train.txt"), "--val-files", os.path.join(src, "val.txt"),
                        "--test-files", os.path.join(src, "test.txt"), "--split", "files"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "rdattn-data prepare: %s" % p.stderr.strip()[-300:])
    manifest = json.load(open(os.path.join(out, "m.manifest.json")))
    want = {}
    for split, e in manifest["splits"].items():
        for sh in e["shards"]:
            want[os.path.join(out, sh["file"])] = sh.get("digest")
    check(all(want.values()), "the manifest records a digest for every shard (%s)" % want)

    def run(name):
        spec = {"run_id": name, "init_seed": 5, "model": {"preset": "tiny", "arm": "rd"},
                "data": {"train_shards": [os.path.join(out, "m_train_*.bin")],
                         "val_shards": [os.path.join(out, "m_val_000000.bin")],
                         "test_shards": [os.path.join(out, "m_test_000000.bin")],
                         "tokenizer": "byte", "data_seed": 11, "val_windows": 4, "test_windows": 4},
                "optim": {"peak_lr": 3e-3, "warmup_steps": 2},
                "schedule": {"total_tokens": 4 * 512, "global_batch_tokens": 512, "micro_batch_sequences": 8},
                "parallel": {"world_size": 1, "threads_per_rank": 1, "precision": "fp32"},
                "checkpoint": {"dir": os.path.join(c.tmp, name, "ckpt"), "keep_last": 1}}
        os.makedirs(os.path.join(c.tmp, name))
        job = os.path.join(c.tmp, name, "job.json")
        json.dump(spec, open(job, "w"))
        events = os.path.join(c.tmp, name, "events.jsonl")
        r = subprocess.run([c.train, "train", "--job", job, "--events", events], capture_output=True, text=True,
                           timeout=600, env=c.env)
        evs = [json.loads(line) for line in open(events)] if os.path.exists(events) else []
        return r, evs

    r, evs = run("before")
    check(r.returncode == 0, "the run on the prepared shards succeeds: %s" % r.stderr.strip()[-300:])
    init = [e for e in evs if e["kind"] == "KIND_INIT"][0]
    got = {d["path"]: d["digest"] for d in init.get("shard_digests", [])}
    check(got == want, "INIT records the digest of every shard, equal to the manifest's (%s)" % got)
    check(init.get("data_digest", "").startswith("xxh3:"), "INIT records the data digest %s" %
          init.get("data_digest"))
    shard = os.path.join(out, "m_train_000000.bin")
    rewrite_in_place(shard)
    r, evs = run("after")
    err = r.stderr + " ".join(e.get("error", "") for e in evs if e["kind"] == "KIND_FAILED")
    print("rdattn-train on the rewritten shard: exit %d: %s" % (r.returncode, r.stderr.strip()[-400:]))
    check(r.returncode == 1, "the run on a shard that differs from its manifest fails (exit %d)" % r.returncode)
    check(shard in err and want[shard] in err and os.path.join(out, "m.manifest.json") in err and
          "data.train_shards" in err,
          "the error names the config field, the shard, the manifest and its digest: %s" % err.strip()[-400:])


if __name__ == "__main__":
    run({"shard_rewrite": scenario_shard_rewrite, "shard_rewrite_resume": scenario_shard_rewrite_resume,
         "manifest_mismatch": scenario_manifest_mismatch})
