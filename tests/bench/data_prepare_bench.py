#!/usr/bin/env python3
"""Benchmark of `rdattn-data prepare --threads N` (issue 26): MB/s of text at 1..N threads.

Builds a JSONL corpus from the SOTU addresses (each address once per copy, ids distinct, so the
hash split is exercised), runs `prepare` at every thread count in interleaved rounds (the order
turns each round), and prints per thread count the median MB/s (the tool's own figure: text bytes
over the time of Prepare), MB/s per thread and the scaling over 1 thread, with the goal
>= 0.9 x N on N free cores. Every run's shards and manifest must be byte-identical to the
1-thread run's, else it fails. The load average is printed before and after: on a shared machine
the scaling measures the cores that were free, not the tool. Not a ctest: speed is never asserted.

  cmake --build build --target rdattn_data_prepare_bench
  python3 tests/bench/data_prepare_bench.py --bin build/worker/data/rdattn-data \\
      --vocab-bpe data/third_party/gpt2/vocab.bpe --sotu data/third_party/sotu [--threads 1,2]
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("data_prepare_bench: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def folder_digest(path):
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        h.update(name.encode())
        with open(os.path.join(path, name), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def cores_obtained(n, seconds=2.0):
    """CPU seconds per wall second that n busy-looping processes get together right now: the
    cores this benchmark can actually use (a shared or throttled machine gives fewer than n)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    procs = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(n)]
    time.sleep(seconds)
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="rdattn-data")
    ap.add_argument("--vocab-bpe", required=True)
    ap.add_argument("--sotu", required=True, help="folder of the 233 SOTU .txt files")
    ap.add_argument("--threads", default="",
                    help="comma-separated thread counts (default: 1 and every power of 2 up to the "
                         "usable cores, and the cores)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--copies", type=int, default=3, help="copies of SOTU in the corpus")
    ap.add_argument("--gzip", action="store_true", help="gzip the corpus (.jsonl.gz)")
    ap.add_argument("--json", default="", help="also write the figures here")
    a = ap.parse_args()
    if a.rounds < 1 or a.copies < 1:
        fail("--rounds and --copies must be >= 1")
    cores = len(os.sched_getaffinity(0))
    if a.threads:
        try:
            counts = [int(x) for x in a.threads.split(",")]
        except ValueError:
            fail("--threads '%s': expected comma-separated integers" % a.threads)
        if any(n < 1 for n in counts):
            fail("--threads: every count must be >= 1")
    else:
        counts = sorted({1, cores} | {2 ** k for k in range(1, 11) if 2 ** k < cores})
    if 1 not in counts:
        counts = [1] + counts
    for p in (a.bin, a.vocab_bpe):
        if not os.path.exists(p):
            fail(p + " is missing (build rdattn-data; run scripts/fetch_data.sh)")
    files = sorted(f for f in os.listdir(a.sotu) if f.endswith(".txt")) if os.path.isdir(a.sotu) else []
    if len(files) != 233:
        fail(a.sotu + " should hold the 233 SOTU .txt files: run scripts/fetch_data.sh")

    tmp = tempfile.mkdtemp(prefix="rdattn_prepare_bench_")
    try:
        lines = []
        for c in range(a.copies):
            for f in files:
                with open(os.path.join(a.sotu, f), "rb") as fh:
                    text = fh.read().decode("utf-8")
                lines.append(json.dumps({"text": text, "id": "%d/%s" % (c, f)}) + "\n")
        data = "".join(lines).encode("utf-8")
        corpus = os.path.join(tmp, "corpus.jsonl" + (".gz" if a.gzip else ""))
        with (gzip.open(corpus, "wb", compresslevel=6) if a.gzip else open(corpus, "wb")) as fh:
            fh.write(data)
        load_before = os.getloadavg()
        probe_before = cores_obtained(max(counts))
        print("corpus: %d documents, %.1f MB of JSONL%s; thread counts %s; %d rounds; "
              "%d usable cores; load average before %.2f %.2f %.2f"
              % (len(lines), len(data) / 1e6, " (gzipped)" if a.gzip else "", counts, a.rounds,
                 cores, *load_before))
        mbps = {n: [] for n in counts}
        cpu_mbps = {n: [] for n in counts}  # MB of text per CPU second (user + sys, all threads)
        want = None
        pattern = re.compile(r"\(([0-9.]+) s, ([0-9.]+) MB/s of text, (\d+) thread\(s\)\)")
        for r in range(a.rounds):
            order = counts[r % len(counts):] + counts[:r % len(counts)]
            for n in order:
                out = os.path.join(tmp, "out")
                shutil.rmtree(out, ignore_errors=True)
                ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                p = subprocess.run([a.bin, "prepare", "--tokenizer", "gpt2", "--vocab-bpe",
                                    a.vocab_bpe, "--out", out, "--prefix", "b", "--threads", str(n),
                                    "--jsonl", corpus], capture_output=True, text=True)
                if p.returncode != 0:
                    fail("prepare --threads %d exited %d: %s" % (n, p.returncode, p.stderr))
                m = pattern.search(p.stdout)
                if not m or int(m.group(3)) != n:
                    fail("cannot read the speed from: " + p.stdout)
                ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
                mbps[n].append(float(m.group(2)))
                # The whole process (start-up and tokenizer load included) over the text bytes.
                cpu_mbps[n].append(float(m.group(2)) * float(m.group(1)) / cpu if cpu > 0 else 0.0)
                d = folder_digest(out)
                if want is None:
                    want = d
                elif d != want:
                    fail("--threads %d wrote other bytes than the first run" % n)
        load_after = os.getloadavg()
        probe_after = cores_obtained(max(counts))
        base = statistics.median(mbps[1])
        rows = []
        print("\n%8s %12s %16s %10s %12s %14s %s" % ("threads", "MB/s median", "MB/s per thread",
                                                    "scaling", "goal 0.9xN", "MB/CPU-s",
                                                    "runs (MB/s)"))
        for n in counts:
            med = statistics.median(mbps[n])
            scale = med / base
            cpu_med = statistics.median(cpu_mbps[n])
            rows.append({"threads": n, "mb_per_s_median": med, "mb_per_s_per_thread": med / n,
                         "scaling_over_1_thread": scale, "goal": 0.9 * n,
                         "mb_per_cpu_s_median": cpu_med, "runs_mb_per_s": mbps[n]})
            print("%8d %12.1f %16.1f %9.2fx %11.1fx %14.1f  %s"
                  % (n, med, med / n, scale, 0.9 * n, cpu_med,
                     " ".join("%.1f" % x for x in mbps[n])))
        print("\nMB/CPU-s: MB of text per CPU second of the whole process (all threads, start-up "
              "included); equal figures mean the threads add no work, whatever the load.")
        print("output identical for every thread count (sha256 %s...)" % want[:16])
        print("load average after %.2f %.2f %.2f (%d usable cores; other work on them lowers "
              "the scaling)" % (*load_after, cores))
        print("cores obtained by %d busy loops: %.2f before, %.2f after (the scaling cannot "
              "exceed this)" % (max(counts), probe_before, probe_after))
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as fh:
                json.dump({"corpus_bytes": len(data), "documents": len(lines), "gzip": a.gzip,
                           "rounds": a.rounds, "usable_cores": cores,
                           "load_average_before_after": [list(load_before), list(load_after)],
                           "cores_obtained_before_after": [probe_before, probe_after],
                           "rows": rows}, fh, indent=2)
                fh.write("\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
