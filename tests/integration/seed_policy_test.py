#!/usr/bin/python3
"""A seed-policy sweep end to end with real processes on loopback (docs/sweeps.md "Seed policy").

A coordinator (real gRPC server, SQLite file) and 2 workers (real rdattn-train processes) run a
tiny block-vs-rd sweep whose seeds come from a policy: initial [1, 2], up to 3, one added per
look. Checked through the rdattn client and an independent Python gRPC client:
  - the coordinator computed a design at submission (submit --validate-only prints it);
  - every look's decision agrees with the stored boundaries and the t statistic recomputed here
    from the jobs' own validation NLLs; a look that continued added seed 3's jobs, which ran;
  - `rdattn watch` printed each look's line, and the sweep SUCCEEDED with every job;
  - the report's paired row counts every seed run, and report.md / looks.csv hold the looks.
Every process is stopped at the end, pass or fail.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, write_shard  # noqa: E402
from itest import check  # noqa: E402
from service_test import start, stop_all  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pystubs", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.pystubs)
    import grpc  # noqa: E402
    from rdattn.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, sweep_pb2 as spb  # noqa

    b = args.bin
    coordinator = os.path.join(b, "coordinator", "rdattn-coordinator")
    worker = os.path.join(b, "worker", "daemon", "rdattn-worker")
    train = os.path.join(b, "worker", "trainer", "rdattn-train")
    client = os.path.join(b, "client", "rdattn")
    tmp = tempfile.mkdtemp(prefix="rdattn-seed-policy-test-")
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_shard(os.path.join(data, "it_train_000000.bin"), corpus(1, 300, 60))
    write_shard(os.path.join(data, "it_val_000000.bin"), corpus(2, 20, 60))
    sweep = os.path.join(tmp, "sweep.yaml")
    with open(sweep, "w") as f:
        f.write("""name: seed-policy-it
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: {initial: [1, 2], max: 3, step: 1, alpha: 0.05, boundary: pocock, futility_effect_sd: 0,
        simulations: 20000}
data:
  train_shards: ["%(d)s/it_train_*.bin"]
  val_shards: ["%(d)s/it_val_000000.bin"]
  tokenizer: byte
  val_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 6144
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [6144]
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 2
""" % {"d": data})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        coord = start([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "coordinator.db"),
                       "--lease-seconds", "30", "--heartbeat-seconds", "1"], os.path.join(tmp, "coordinator.log"), env)
        m = re.search(r"listening on (\S+:\d+)", coord.stdout.readline())
        check(m is not None, "the coordinator prints its address")
        addr = m.group(1)
        for i in range(2):
            start([worker, "--coordinator", addr, "--slots", "1", "--kind", "cpu",
                   "--workdir", os.path.join(tmp, "w%d" % i), "--checkpoint-root", os.path.join(tmp, "ckpt"),
                   "--train-binary", train, "--threads-per-rank", "1"], os.path.join(tmp, "worker%d.log" % i), env)

        dry = subprocess.run([client, "--coordinator", addr, "submit", "--validate-only", sweep],
                             capture_output=True, text=True, timeout=120)
        check(dry.returncode == 0 and "seed policy: pocock boundaries" in dry.stdout and "looks at n = 2 3" in dry.stdout,
              "submit --validate-only prints the design: %s %s" % (dry.stdout[-600:], dry.stderr[-300:]))
        sub = subprocess.run([client, "--coordinator", addr, "submit", sweep], capture_output=True, text=True, timeout=120)
        check(sub.returncode == 0, "rdattn submit: %s %s" % (sub.stdout.strip(), sub.stderr.strip()))
        sid = re.search(r"(sw-[0-9a-zA-Z-]+)", sub.stdout).group(1)
        watch = subprocess.run([client, "--coordinator", addr, "watch", "--format", "text", sid],
                               capture_output=True, text=True, timeout=600)
        print(watch.stdout[-2500:])
        check(watch.returncode == 0, "rdattn watch ended with the sweep")

        svc = cgrpc.SweepServiceStub(grpc.insecure_channel(addr))
        status = svc.GetSweep(cpb.GetSweepRequest(sweep_id=sid), timeout=30).sweep
        check(status.state == spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" % spb.SweepState.Name(status.state))
        design = status.sequential.design
        looks = list(status.sequential.looks)
        check(list(design.look_seeds) == [2, 3], "looks planned at n = 2, 3: %s" % list(design.look_seeds))
        check(1 <= len(looks) <= 2 and status.sequential.stopped, "the policy looked and stopped (%d looks)" % len(looks))
        nll = {(j.job.seed, j.job.arm): j.last_val_nll for j in status.jobs}
        for j in status.jobs:
            check(j.state == spb.JOB_STATE_SUCCEEDED, "job %s SUCCEEDED" % j.job.job_id)
        for k, look in enumerate(looks):
            seeds = sorted({s for (s, _) in nll})[:look.n_seeds]
            deltas = [nll[(s, "rd")] - nll[(s, "block")] for s in seeds]
            t = statistics.mean(deltas) / (statistics.stdev(deltas) / math.sqrt(len(deltas)))
            c = look.comparisons[0]
            check(abs(c.t_statistic - t) < 1e-9 * max(1.0, abs(t)),
                  "look %d: t = %.6f as recomputed here from the jobs' NLLs (%.6f)" % (k + 1, c.t_statistic, t))
            crossed = abs(t) >= design.efficacy_t[k]
            last = k + 1 == len(design.look_seeds)
            want = "efficacy" if crossed else ("max_seeds" if last else "continue")
            check(c.outcome == want, "look %d: outcome %s (|t| %.3f vs %.3f)" % (k + 1, c.outcome, abs(t), design.efficacy_t[k]))
            line = "look %d at n = %d: %s" % (k + 1, look.n_seeds, "continue, adding seed 3" if want == "continue" else "stop")
            check(line in watch.stdout, "rdattn watch printed %r" % line)
        continued = looks[0].decision == "continue"
        check(len(status.jobs) == (6 if continued else 4), "%d jobs" % len(status.jobs))
        if continued:
            check({j.job.seed for j in status.jobs} == {1, 2, 3}, "seed 3's jobs were added and ran")

        rep = svc.GetReport(cpb.GetReportRequest(sweep_id=sid), timeout=60).report
        rows = [r for r in rep.rows if r.arm == "rd" and r.milestone_tokens == 6144]
        check(len(rows) == 1 and rows[0].n == looks[-1].n_seeds, "the paired row counts every seed run")
        check(len(rep.sequential.looks) == len(looks), "the report holds every look")
        out = os.path.join(tmp, "report")
        r = subprocess.run([client, "--coordinator", addr, "report", sid, "--format", "md", "--out", out],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "rdattn report --format md")
        md = open(os.path.join(out, "report.md")).read()
        check("## Seed policy (sequential design)" in md and "The policy stopped at look %d." % len(looks) in md,
              "report.md has the seed policy section")
        r = subprocess.run([client, "--coordinator", addr, "report", sid, "--format", "csv", "--out", out],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and os.path.exists(os.path.join(out, "looks.csv")), "looks.csv is written")
        text = subprocess.run([client, "--coordinator", addr, "report", sid], capture_output=True, text=True, timeout=60)
        check("seed policy: pocock" in text.stdout and "stopped at look" in text.stdout, "rdattn report prints the policy")
        print(text.stdout[-1500:])
        print("seed_policy_test: ok")
    finally:
        stop_all()


if __name__ == "__main__":
    main()
