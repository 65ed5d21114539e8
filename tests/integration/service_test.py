#!/usr/bin/python3
"""Integration test of the sweep service with real processes on loopback.

A coordinator (real gRPC server, SQLite file) and 2 workers (each launching real rdattn-train
processes) run a sweep of 2 seeds x 2 arms (block, rd) of a tiny byte-level model, submitted and
watched with the rdattn client. The checks go through an independent Python gRPC client
(Debian's python3-grpcio, stubs generated from proto/ at build time):
  - every job reaches SUCCEEDED, and so does the sweep;
  - in each pair group the initial-parameter checksums are equal, and so is the data order;
  - `rdattn watch` ended with the sweep, and the event stream holds every job's events in order;
  - the report lists 2 pairs, and `rdattn report --format md|csv|json --out DIR` writes report.md
    with 4 PNG plots (gnuplot on the coordinator), the CSV files and report.json.
Ports are chosen by the OS. Every process is stopped at the end, pass or fail.
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, write_shard  # noqa: E402
from itest import check  # noqa: E402

PROCS = []


def start(cmd, log_path, env=None):
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if "coordinator" in os.path.basename(cmd[0]) else log,
                         stderr=log, text=True, env=env)
    PROCS.append(p)
    return p


def stop_all():
    for p in PROCS:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 20
    for p in PROCS:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", required=True, help="folder with the generated Python gRPC stubs")
    args = ap.parse_args()
    sys.path.insert(0, args.pystubs)
    import grpc  # noqa: E402
    from rdattn.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, sweep_pb2 as spb, run_spec_pb2 as rpb  # noqa

    b = args.bin
    coordinator = os.path.join(b, "coordinator", "rdattn-coordinator")
    worker = os.path.join(b, "worker", "daemon", "rdattn-worker")
    train = os.path.join(b, "worker", "trainer", "rdattn-train")
    client = os.path.join(b, "client", "rdattn")
    tmp = tempfile.mkdtemp(prefix="rdattn-service-test-")
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_shard(os.path.join(data, "it_train_000000.bin"), corpus(1, 300, 60))
    write_shard(os.path.join(data, "it_val_000000.bin"), corpus(2, 20, 60))
    write_shard(os.path.join(data, "it_test_000000.bin"), corpus(3, 20, 60))
    sweep = os.path.join(tmp, "sweep.yaml")
    with open(sweep, "w") as f:
        f.write("""name: integration
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [1, 2]
data:
  train_shards: ["%(d)s/it_train_*.bin"]
  val_shards: ["%(d)s/it_val_000000.bin"]
  test_shards: ["%(d)s/it_test_000000.bin"]
  tokenizer: byte
  val_windows: 16
  test_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 12288
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [6144, 12288]
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 2
""" % {"d": data})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        coord = start([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "coordinator.db"),
                       "--lease-seconds", "30", "--heartbeat-seconds", "1"], os.path.join(tmp, "coordinator.log"), env)
        line = coord.stdout.readline()
        m = re.search(r"listening on (\S+:\d+)", line)
        check(m is not None, "the coordinator prints its OS-chosen address: %r" % line.strip())
        addr = m.group(1)
        for i in range(2):
            start([worker, "--coordinator", addr, "--slots", "1", "--kind", "cpu",
                   "--workdir", os.path.join(tmp, "w%d" % i), "--checkpoint-root", os.path.join(tmp, "ckpt"),
                   "--train-binary", train, "--threads-per-rank", "1"], os.path.join(tmp, "worker%d.log" % i), env)
        sub = subprocess.run([client, "--coordinator", addr, "submit", sweep], capture_output=True, text=True, timeout=60)
        check(sub.returncode == 0, "rdattn submit: %s %s" % (sub.stdout.strip(), sub.stderr.strip()))
        sid = re.search(r"(sw-[0-9a-zA-Z-]+)", sub.stdout).group(1)
        watch = subprocess.run([client, "--coordinator", addr, "watch", sid], capture_output=True, text=True, timeout=600)
        print(watch.stdout[-3000:])
        check(watch.returncode == 0, "rdattn watch ended with the sweep (exit 0)")

        channel = grpc.insecure_channel(addr)
        svc = cgrpc.SweepServiceStub(channel)
        status = svc.GetSweep(cpb.GetSweepRequest(sweep_id=sid), timeout=30).sweep
        check(status.state == spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" % spb.SweepState.Name(status.state))
        jobs = list(status.jobs)
        check(len(jobs) == 4, "4 jobs (2 seeds x 2 arms)")
        for j in jobs:
            check(j.state == spb.JOB_STATE_SUCCEEDED, "job %s SUCCEEDED" % j.job.job_id)
            short = j.job.job_id[len(sid) + 1:]
            lines = [l for l in watch.stdout.splitlines() if l.startswith(short + " ")]
            order = [i for key in ("started", "finished at", "-> SUCCEEDED")
                     for i, l in enumerate(lines) if key in l][:3]
            check(len(order) == 3 and order == sorted(order),
                  "rdattn watch showed %s start, finish and succeed, in that order" % short)

        # Every job's events, in order, from the start of the stream.
        events = collections.defaultdict(list)
        for resp in svc.WatchSweep(cpb.WatchSweepRequest(sweep_id=sid, after_seq=0), timeout=60):
            ev = resp.event
            if ev.HasField("metric_event"):
                events[ev.metric_event.job_id].append((ev.seq, ev.metric_event))
            if ev.HasField("sweep_state_change") and ev.sweep_state_change.to_state == spb.SWEEP_STATE_SUCCEEDED:
                break
        K = rpb.MetricEvent
        for j in jobs:
            evs = events[j.job.job_id]
            seqs = [s for s, _ in evs]
            check(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "%s: event seqs strictly increase" % j.job.job_id)
            kinds = [e.kind for _, e in evs]
            check(kinds[0] == K.KIND_INIT and kinds[-1] == K.KIND_FINISHED, "%s: events run from INIT to FINISHED" % j.job.job_id)
            own = [e.seq for _, e in evs]
            check(own == sorted(own), "%s: the trainer's own seq order is kept" % j.job.job_id)
            steps = [e.step for _, e in evs if e.kind == K.KIND_TRAIN_STEP]
            check(steps == sorted(steps) and steps[-1] == 24, "%s: train steps 1..24 in order" % j.job.job_id)
            check(sum(1 for k in kinds if k == K.KIND_EVAL) == 2, "%s: 2 milestone evaluations" % j.job.job_id)

        groups = collections.defaultdict(dict)
        for j in jobs:
            init = [e for _, e in events[j.job.job_id] if e.kind == K.KIND_INIT][0]
            groups[j.job.pair_group][j.job.arm] = (init.init_param_checksum, init.data_order_checksum)
        check(len(groups) == 2, "2 pair groups")
        for g, arms in groups.items():
            check(set(arms) == {"block", "rd"}, "%s holds block and rd" % g)
            check(arms["block"][0] == arms["rd"][0], "%s: equal initial-parameter checksums %s" % (g, arms["block"][0]))
            check(arms["block"][1] == arms["rd"][1], "%s: equal data order %s" % (g, arms["block"][1]))
        a, c = list(groups.values())
        check(a["block"][0] != c["block"][0], "the two seeds start from different weights")

        rep = svc.GetReport(cpb.GetReportRequest(sweep_id=sid), timeout=30).report
        rows = [r for r in rep.rows if r.arm == "rd" and r.milestone_tokens == 12288]
        check(len(rows) == 1 and rows[0].n == 2, "the report pairs rd with block over 2 seeds at the last milestone")
        text = subprocess.run([client, "--coordinator", addr, "report", sid], capture_output=True, text=True, timeout=60)
        check(text.returncode == 0 and "rd" in text.stdout, "rdattn report prints the table")
        print(text.stdout)

        # The files of the report: report.md with 4 PNG plots, the CSVs, report.json.
        out = os.path.join(tmp, "report")
        md = subprocess.run([client, "--coordinator", addr, "report", sid, "--format", "md", "--out", out],
                            capture_output=True, text=True, timeout=120)
        check(md.returncode == 0, "rdattn report --format md: %s %s" % (md.stdout.strip(), md.stderr.strip()))
        report_md = os.path.join(out, "report.md")
        check(("report: %s" % report_md) in md.stdout, "rdattn report names the file it wrote")
        with open(report_md) as f:
            text_md = f.read()
        check(re.search(r"\bn\b", text_md) is not None and "rd" in text_md, "report.md exists and prints n")
        pngs = sorted(n for n in os.listdir(os.path.join(out, "plots")) if n.endswith(".png"))
        check(pngs == ["delta_last_milestone.png", "delta_vs_tokens.png", "js_by_layer.png", "nll_vs_tokens.png"],
              "4 plots: %s" % pngs)
        for n in pngs:
            with open(os.path.join(out, "plots", n), "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "plots/%s is a PNG" % n)
            check("plots/" + n in text_md, "report.md embeds plots/%s" % n)
        csv = subprocess.run([client, "--coordinator", addr, "report", sid, "--format", "csv", "--out", out],
                             capture_output=True, text=True, timeout=120)
        check(csv.returncode == 0 and os.path.exists(os.path.join(out, "paired.csv")), "rdattn report --format csv writes paired.csv")
        with open(os.path.join(out, "paired.csv"), newline="") as f:
            import csv as csvmod
            paired = list(csvmod.DictReader(f))
        last = [r for r in paired if r.get("arm") == "rd" and r.get("milestone_tokens") == "12288"]
        check(len(last) == 1 and last[0].get("n") == "2", "paired.csv: rd vs block at 12288 over n = 2 seeds")
        js = subprocess.run([client, "--coordinator", addr, "report", sid, "--format", "json", "--out", out],
                            capture_output=True, text=True, timeout=120)
        check(js.returncode == 0, "rdattn report --format json")
        import json
        with open(os.path.join(out, "report.json")) as f:
            doc = json.load(f)
        check(doc.get("sweep_id") == sid and doc.get("reference_arm") == "block", "report.json parses and names the sweep")
        rows = [r for r in doc.get("paired", []) if r.get("arm") == "rd" and r.get("milestone_tokens") == 12288]
        check(len(rows) == 1 and rows[0]["summary"]["n"] == 2, "report.json: rd vs block at 12288, n = 2")
    finally:
        stop_all()
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
