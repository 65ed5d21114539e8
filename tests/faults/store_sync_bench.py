#!/usr/bin/python3
"""The cost of `--store-sync full` (fsync of the WAL before every acknowledged write) against
`normal`, on this machine's disk: one coordinator of each, one after the other, in one run.

For each mode: SubmitSweep calls back to back (submissions/s and latency), then CompleteJob of
leased jobs (latency). Prints a table for docs/operations.md ("Acknowledged means durable").

  store_sync_bench.py --bin BUILD --pystubs PY [--dir DIR] [--submits N] [--completes N]

DIR must be on the disk being measured (not tmpfs); default: a folder under the build tree.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def run_mode(args, mode, pb):
    grpc, cpb, cgrpc, spb = pb
    d = tempfile.mkdtemp(prefix="sync-%s-" % mode, dir=args.dir)
    coord = subprocess.Popen([os.path.join(args.bin, "coordinator", "rdattn-coordinator"), "--listen",
                              "127.0.0.1:0", "--db", os.path.join(d, "c.db"), "--store-sync", mode,
                              "--lease-seconds", "600", "--heartbeat-seconds", "10"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        addr = re.search(r"listening on (\S+)", coord.stdout.readline()).group(1)
        ch = grpc.insecure_channel(addr)
        sweeps, workers = cgrpc.SweepServiceStub(ch), cgrpc.WorkerServiceStub(ch)
        spec = spb.SweepSpec()
        from google.protobuf import text_format
        text_format.Parse(TINY, spec)
        submit_ms = []
        t0 = time.perf_counter()
        for i in range(args.submits):
            spec.name = "bench-%d" % i
            req = cpb.SubmitSweepRequest(request_id="bench-%s-%d" % (mode, i), spec=spec)
            s = time.perf_counter()
            sweeps.SubmitSweep(req, timeout=30)
            submit_ms.append((time.perf_counter() - s) * 1e3)
        rate = args.submits / (time.perf_counter() - t0)
        wid = workers.RegisterWorker(cpb.RegisterWorkerRequest(worker_id="bench", hostname="bench",
                                                               kind=1, slots=1000), timeout=30).worker_id
        complete_ms = []
        for _ in range(args.completes):
            lease = workers.LeaseJob(cpb.LeaseJobRequest(worker_id=wid, free_slots=1000), timeout=30)
            if not lease.lease_id:
                break
            req = cpb.CompleteJobRequest(worker_id=wid, lease_id=lease.lease_id, job_id=lease.job.job_id,
                                         outcome=spb.JOB_OUTCOME_FAILED, exit_code=1, stderr_tail="bench")
            s = time.perf_counter()
            workers.CompleteJob(req, timeout=30)
            complete_ms.append((time.perf_counter() - s) * 1e3)
        return rate, submit_ms, complete_ms
    finally:
        coord.terminate()
        coord.wait()
        shutil.rmtree(d, ignore_errors=True)


TINY = """
name: "bench"
scales { name: "tiny" preset: "tiny" }
arms: "block"
arms: "rd"
seeds: 1
data { train_shards: "/data/train_*.bin" val_shards: "/data/val.bin" tokenizer: "byte" val_windows: 16 }
optim { peak_lr: 0.003 warmup_steps: 2 }
schedule { total_tokens: 12288 global_batch_tokens: 512 micro_batch_sequences: 8
           milestones_tokens: 6144 milestones_tokens: 12288 }
parallel { world_size: 1 }
max_attempts: 1
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pystubs", required=True)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--submits", type=int, default=300)
    ap.add_argument("--completes", type=int, default=300)
    args = ap.parse_args()
    args.dir = args.dir or args.bin
    sys.path.insert(0, args.pystubs)
    import grpc
    from rdattn.v1 import coordinator_pb2, coordinator_pb2_grpc, sweep_pb2
    pb = (grpc, coordinator_pb2, coordinator_pb2_grpc, sweep_pb2)
    fs = subprocess.run(["df", "-T", args.dir], capture_output=True, text=True).stdout.splitlines()[-1].split()[1]
    print("store folder %s (%s)" % (args.dir, fs))
    print("| --store-sync | submissions/s | SubmitSweep p50 / p99 ms | CompleteJob p50 / p99 ms |")
    print("|---|---|---|---|")
    for mode in ("normal", "full", "normal", "full"):
        rate, sub, comp = run_mode(args, mode, pb)
        print("| %s | %.0f | %.2f / %.2f | %.2f / %.2f (%d calls) |" % (
            mode, rate, statistics.median(sub), pct(sub, 99), statistics.median(comp) if comp else 0,
            pct(comp, 99) if comp else 0, len(comp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
