#!/usr/bin/python3
"""Runs rdattn-load against a real coordinator on loopback (tests/load/README.md).

Starts rdattn-coordinator on 127.0.0.1 with an OS-chosen port, a fresh SQLite file in a temp dir
and token authentication (a researcher token for the load, as a user would have), runs
`rdattn-load --clients N --seconds T --json FILE`, and checks from the JSON that no RPC failed,
that live watch streams were checked and none lost, duplicated, reordered or changed an event,
and (with --max-get-p99-ms) that GetSweep's p99 stayed under the bound. The coordinator must
still be serving afterwards and stop cleanly on SIGTERM.

The ctest `load_smoke` runs 10 clients for 5 s. The goal load (README.md) is
    load_test.py --bin BUILD --clients 100 --seconds 30 --max-get-p99-ms 20
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from itest import check  # noqa: E402

TOKEN = "load-researcher-token-0123456789"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--max-get-p99-ms", type=float, default=0, help="0: no latency bound")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (coordinator log, JSON)")
    ap.add_argument("extra", nargs="*", help="more rdattn-load flags, after --")
    args = ap.parse_args()

    coordinator = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    load = os.path.join(args.bin, "tests", "load", "rdattn-load")
    tmp = tempfile.mkdtemp(prefix="rdattn-load-test-")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("%s researcher loader\n" % TOKEN)
    os.chmod(tokens, 0o600)
    log_path = os.path.join(tmp, "coordinator.log")
    log = open(log_path, "w")
    coord = subprocess.Popen([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "coordinator.db"),
                              "--tokens-file", tokens], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = coord.stdout.readline()
        m = re.search(r"listening on (\S+:\d+)", line)
        check(m is not None, "the coordinator prints its OS-chosen address: %r" % line.strip())
        addr = m.group(1)
        out_json = os.path.join(tmp, "load.json")
        cmd = [load, "--coordinator", addr, "--token", TOKEN, "--clients", str(args.clients),
               "--seconds", str(args.seconds), "--json", out_json] + args.extra
        print("+", " ".join(cmd), flush=True)
        t0 = time.time()
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 300)
        print(run.stdout, run.stderr, flush=True)
        check(run.returncode == 0, "rdattn-load exits 0 (PASS) after %.1f s" % (time.time() - t0))
        with open(out_json) as f:
            res = json.load(f)
        check(res["errors"] == 0, "0 RPC errors (%d cycles)" % res["cycles"])
        w = res["watch"]
        check(w["streams_checked"] >= res["cycles"] and w["events_checked"] > 0,
              "%d live watch streams with %d events checked against the replays" %
              (w["streams_checked"], w["events_checked"]))
        for k in ("missing", "duplicates", "out_of_order", "mismatched", "unexpected", "malformed"):
            check(w[k] == 0, "watch events %s: 0" % k)
        for rpc in ("SubmitSweep", "GetSweep", "ListSweeps", "CancelSweep", "WatchSweep (replay)"):
            check(res["rpcs"][rpc]["count"] > 0, "%s called %d times" % (rpc, res["rpcs"][rpc]["count"]))
        if args.max_get_p99_ms > 0:
            p99 = res["rpcs"]["GetSweep"]["p99_ms"]
            check(p99 < args.max_get_p99_ms, "GetSweep p99 %.2f ms < %.0f ms" % (p99, args.max_get_p99_ms))
        check(coord.poll() is None, "the coordinator is still running")
        coord.send_signal(signal.SIGTERM)
        check(coord.wait(timeout=30) == 0, "the coordinator stops cleanly on SIGTERM")
    finally:
        if coord.poll() is None:
            coord.kill()
            coord.wait()
        log.close()
        if args.keep:
            print("kept", tmp)
        else:
            subprocess.run(["rm", "-rf", tmp])
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
