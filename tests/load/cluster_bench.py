#!/usr/bin/python3
"""Runs rdattn-cluster-bench against a real coordinator on loopback (tests/load/README.md).

Starts rdattn-coordinator on 127.0.0.1 with an OS-chosen port, a fresh SQLite file in a temp dir,
token authentication (one admin token: the tool is both the workers and the readers),
--heartbeat-seconds 5 --lease-seconds 30 (the issue's setting; --heartbeat-seconds and
--lease-seconds here change them) and Prometheus metrics on an OS-chosen port. Then it runs
`rdattn-cluster-bench --workers W --jobs J ...` with the coordinator's pid, its store file and its
/metrics URL; with --probe-jobs a second coordinator (fresh store) gets the per-call probe. The
coordinator must still be serving afterwards and exit 0 on SIGTERM.

--check (the ctest `cluster_bench_smoke`) also asserts from the JSON: every job SUCCEEDED with
its own NLL, 0 RPC errors, 0 spurious lease expiries (the coordinator's counter, leases lost in
heartbeats, ABORTED answers) and 0 jobs with attempts > 1. Without --check the exit status is the
tool's (0: every job SUCCEEDED with its own NLL and no RPC failed).

--load-test-clients N also runs load_test.py (the closed-loop SweepService client test) with N
clients afterwards; the exit status is then nonzero when either failed.

The full benchmark (CMake target control_plane_bench):
    cluster_bench.py --bin BUILD --workers 1000 --jobs 10000 --probe-jobs 1000,10000 \
        --load-test-clients 100 --load-test-seconds 30 --load-test-max-get-p99-ms 20
"""
import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from itest import check  # noqa: E402

TOKEN = "cluster-bench-admin-token-0123456789"


def raise_nofile():
    """One connection per simulated worker needs a file descriptor in the coordinator too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Coordinator:
    def __init__(self, binary, tmp, name, args):
        self.tmp = tmp
        self.db = os.path.join(tmp, name + ".db")
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write("%s admin bench\n" % TOKEN)
        os.chmod(tokens, 0o600)
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        cmd = [binary, "--listen", "127.0.0.1:0", "--db", self.db, "--tokens-file", tokens,
               "--heartbeat-seconds", str(args.heartbeat_seconds),
               "--lease-seconds", str(args.lease_seconds), "--metrics-listen", "127.0.0.1:0"]
        print("+", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     preexec_fn=raise_nofile)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+:\d+)", line)
        check(m is not None, "the coordinator prints its OS-chosen address: %r" % line.strip())
        self.addr = m.group(1)
        # The metrics line goes to stderr (the log): "rdattn-coordinator: metrics on URL".
        self.metrics_url = None
        deadline = time.time() + 30
        while time.time() < deadline and self.metrics_url is None:
            with open(self.log_path) as f:
                m = re.search(r"metrics on (http://\S+)", f.read())
            if m:
                self.metrics_url = m.group(1)
            else:
                time.sleep(0.1)
        check(self.metrics_url is not None, "the coordinator prints its metrics URL")

    def stop(self):
        check(self.proc.poll() is None, "the coordinator is still running")
        self.proc.send_signal(signal.SIGTERM)
        check(self.proc.wait(timeout=60) == 0, "the coordinator stops cleanly on SIGTERM")
        self.log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()


def run_tool(cmd, timeout):
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    # Output as it comes: the run prints progress every 10 s.
    run = subprocess.run(cmd, timeout=timeout)
    print("rdattn-cluster-bench exited %d after %.1f s" % (run.returncode, time.time() - t0),
          flush=True)
    return run.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--workers", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--job-seconds", type=float, default=3)
    ap.add_argument("--idle-seconds", type=float, default=10)
    ap.add_argument("--max-seconds", type=float, default=900)
    ap.add_argument("--heartbeat-seconds", type=int, default=5, help="the coordinator's and the workers'")
    ap.add_argument("--lease-seconds", type=int, default=30, help="the coordinator's lease lifetime")
    ap.add_argument("--probe-jobs", default="", help="also the per-call probe, e.g. 1000,10000")
    ap.add_argument("--probe-samples", type=int, default=30)
    ap.add_argument("--json", default="", help="copy the run's JSON here (the probe's: NAME.probe.json)")
    ap.add_argument("--check", action="store_true",
                    help="assert 0 errors, 0 spurious expiries, 0 attempts > 1, all own NLL")
    ap.add_argument("--load-test-clients", type=int, default=0, help="then load_test.py with N clients")
    ap.add_argument("--load-test-seconds", type=float, default=30)
    ap.add_argument("--load-test-max-get-p99-ms", type=float, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (coordinator logs, JSON)")
    ap.add_argument("extra", nargs="*", help="more rdattn-cluster-bench flags, after --")
    args = ap.parse_args()

    coordinator_bin = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    tool = os.path.join(args.bin, "tests", "load", "rdattn-cluster-bench")
    commit = subprocess.run(["git", "log", "-1", "--format=%h"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="rdattn-cluster-bench-")
    failed = []
    coord = None
    try:
        coord = Coordinator(coordinator_bin, tmp, "coordinator", args)
        out_json = os.path.join(tmp, "run.json")
        cmd = [tool, "--coordinator", coord.addr, "--token", TOKEN,
               "--workers", str(args.workers), "--jobs", str(args.jobs), "--slots", str(args.slots),
               "--job-seconds", str(args.job_seconds), "--idle-seconds", str(args.idle_seconds),
               "--heartbeat-seconds", str(args.heartbeat_seconds),
               "--max-seconds", str(args.max_seconds), "--coordinator-pid", str(coord.proc.pid),
               "--db", coord.db, "--metrics-url", coord.metrics_url, "--json", out_json,
               "--label", "commit %s" % commit] + args.extra
        rc = run_tool(cmd, args.max_seconds + args.idle_seconds + 600)
        with open(out_json) as f:
            res = json.load(f)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
        if args.check:
            check(rc == 0, "rdattn-cluster-bench exits 0 (PASS)")
            v = res["verify"]
            check(v["jobs"] == args.jobs and v["succeeded"] == args.jobs and v["own_nll"] == args.jobs,
                  "all %d jobs SUCCEEDED with their own NLL (read back: %d jobs, %d SUCCEEDED, %d own NLL)"
                  % (args.jobs, v["jobs"], v["succeeded"], v["own_nll"]))
            check(res["errors"] == 0, "0 RPC errors (%s)" % res["error_codes"])
            s = res["spurious"]
            check(s["lease_expiries_metric"] == 0,
                  "0 lease expiries (rdattn_lease_expiries_total %s)" % s["lease_expiries_metric"])
            check(s["lost_leases"] == 0 and s["aborted"] == 0 and s["repeat_leases"] == 0,
                  "0 leases lost, 0 ABORTED, 0 jobs leased twice")
            check(s["attempts_gt1"] == 0, "0 jobs with attempts > 1")
            check(res["events_stored"] == 14 * args.jobs,
                  "14 events stored per job (%d)" % res["events_stored"])
            for rpc in ("RegisterWorker", "Heartbeat", "CompleteJob", "ReportProgress (close)",
                        "GetSweep", "ListSweeps"):
                check(res["rpcs"][rpc]["count"] > 0, "%s answered %d times" % (rpc, res["rpcs"][rpc]["count"]))
            c = res["coordinator"]
            check(c["peak_threads"] > 0 and c["peak_rss_mb"] > 0 and c["cpu_seconds"] > 0,
                  "the coordinator's /proc was sampled (%.1f CPU s, %.0f MB, %d threads)"
                  % (c["cpu_seconds"], c["peak_rss_mb"], c["peak_threads"]))
            check(res["store"]["bytes_per_job"] > 0, "store bytes per job %.0f" % res["store"]["bytes_per_job"])
        elif rc != 0:
            failed.append("rdattn-cluster-bench (W=%d, J=%d) exit %d" % (args.workers, args.jobs, rc))
        coord.stop()
        coord = None

        if args.probe_jobs:
            coord = Coordinator(coordinator_bin, tmp, "probe", args)
            probe_json = os.path.join(tmp, "probe.json")
            cmd = [tool, "--coordinator", coord.addr, "--token", TOKEN, "--probe-jobs", args.probe_jobs,
                   "--probe-samples", str(args.probe_samples), "--coordinator-pid", str(coord.proc.pid),
                   "--json", probe_json, "--label", "commit %s" % commit]
            rc = run_tool(cmd, 1800)
            if args.json:
                with open(os.path.splitext(args.json)[0] + ".probe.json", "w") as f:
                    with open(probe_json) as g:
                        f.write(g.read())
            if args.check:
                check(rc == 0, "the probe exits 0")
                with open(probe_json) as f:
                    rows = json.load(f)["probe"]["rows"]
                check(len(rows) == len(args.probe_jobs.split(",")) and
                      all(r["LeaseJob"]["count"] == args.probe_samples for r in rows),
                      "the probe measured %d leases at each of %s pending jobs"
                      % (args.probe_samples, args.probe_jobs))
            elif rc != 0:
                failed.append("probe exit %d" % rc)
            coord.stop()
            coord = None
    finally:
        if coord is not None:
            coord.kill()
        if args.keep:
            print("kept", tmp)
        else:
            subprocess.run(["rm", "-rf", tmp])

    if args.load_test_clients > 0:
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_test.py"),
               "--bin", args.bin, "--clients", str(args.load_test_clients),
               "--seconds", str(args.load_test_seconds)]
        if args.load_test_max_get_p99_ms > 0:
            cmd += ["--max-get-p99-ms", str(args.load_test_max_get_p99_ms)]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, timeout=args.load_test_seconds + 600).returncode
        if rc != 0:
            failed.append("load_test.py --clients %d exit %d" % (args.load_test_clients, rc))

    if failed:
        print("FAILED: " + "; ".join(failed))
        sys.exit(1)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
