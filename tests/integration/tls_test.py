#!/usr/bin/python3
"""TLS end to end: a coordinator with --tls-cert/--tls-key, the rdattn client and a worker.

In a temp dir, `openssl req -x509` makes a self-signed key and certificate for
subjectAltName IP:127.0.0.1 and DNS:localhost. A coordinator serves with them (token auth, a
fresh SQLite file, an OS-chosen port on 127.0.0.1). Checks:
  - `rdattn --tls --ca-cert CERT` submits a sweep and lists it (by IP and by the DNS name);
  - a plaintext `rdattn` (no --tls) against the TLS port fails cleanly: exit 1, a one-line
    "rdattn: UNAVAILABLE: ..." message, well within its 30 s deadline; a TLS client that trusts
    another CA fails too (exit 1, "rdattn: UNAVAILABLE: ... certificate verify failed");
  - the coordinator still serves the TLS client afterwards (get, cancel, list);
  - rdattn-worker --ca-cert CERT registers over TLS (its log and <workdir>/worker_id), while
    a worker without --ca-cert does not (RegisterWorker UNAVAILABLE, retried);
  - the coordinator is alive at the end and stops cleanly on SIGTERM.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from itest import check  # noqa: E402

RESEARCHER = "tls-researcher-token-0123456789"
WORKER = "tls-worker-token-0123456789"
SWEEP = """name: tls-test
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [1]
data:
  train_shards: ["/nonexistent/train_*.bin"]
  val_shards: ["/nonexistent/val.bin"]
  tokenizer: byte
  val_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 12288
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [12288]
parallel: {world_size: 1}
max_attempts: 1
"""


def self_signed(openssl, tmp, name):
    key, cert = os.path.join(tmp, name + ".key"), os.path.join(tmp, name + ".crt")
    r = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=rdattn-test-" + name,
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "openssl made a self-signed %s certificate for IP:127.0.0.1, DNS:localhost%s" %
          (name, "" if r.returncode == 0 else ": " + r.stderr))
    return key, cert


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--openssl", default="openssl", help="the openssl command")
    args = ap.parse_args()
    coordinator = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    client = os.path.join(args.bin, "client", "rdattn")
    worker = os.path.join(args.bin, "worker", "daemon", "rdattn-worker")

    tmp = tempfile.mkdtemp(prefix="rdattn-tls-test-")
    key, cert = self_signed(args.openssl, tmp, "server")
    _, other_ca = self_signed(args.openssl, tmp, "other")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("%s researcher alice\n%s worker node-a\n" % (RESEARCHER, WORKER))
    os.chmod(tokens, 0o600)
    sweep = os.path.join(tmp, "sweep.yaml")
    with open(sweep, "w") as f:
        f.write(SWEEP)
    env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME=os.path.join(tmp, "xdg"))  # no user config file
    for k in ("RDATTN_COORDINATOR", "RDATTN_TOKEN", "RDATTN_TOKEN_FILE", "RDATTN_CONFIG"):
        env.pop(k, None)

    log = open(os.path.join(tmp, "coordinator.log"), "w")
    coord = subprocess.Popen([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "c.db"),
                              "--tokens-file", tokens, "--tls-cert", cert, "--tls-key", key],
                             stdout=subprocess.PIPE, stderr=log, text=True)
    procs = [coord]
    try:
        line = coord.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        check(m is not None, "the TLS coordinator prints its address: %r" % line.strip())
        port = m.group(1)
        addr = "127.0.0.1:" + port

        def rdattn(*cmd, tls=True, ca=cert, host=addr, timeout=60):
            flags = ["--coordinator", host, "--token", RESEARCHER]
            if tls:
                flags += ["--tls", "--ca-cert", ca]
            t0 = time.time()
            r = subprocess.run([client] + flags + list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
            return r, time.time() - t0

        sub, _ = rdattn("submit", sweep)
        check(sub.returncode == 0, "rdattn --tls --ca-cert submit: %s %s" % (sub.stdout.strip(), sub.stderr.strip()))
        sid = re.search(r"(sw-[0-9a-f]+)", sub.stdout).group(1)
        ls, _ = rdattn("list")
        check(ls.returncode == 0 and sid in ls.stdout, "rdattn --tls list shows %s" % sid)
        ls_dns, _ = rdattn("list", host="localhost:" + port)
        check(ls_dns.returncode == 0 and sid in ls_dns.stdout,
              "rdattn --tls list by the certificate's DNS name localhost:%s" % port)

        plain, took = rdattn("list", tls=False)
        err = plain.stderr.strip()
        check(plain.returncode == 1, "a plaintext client against the TLS port exits 1 (got %d)" % plain.returncode)
        check(err.startswith("rdattn: UNAVAILABLE:") and len(err.splitlines()) == 1 and not plain.stdout.strip(),
              "... with one line 'rdattn: UNAVAILABLE: ...' and nothing on stdout: %r" % err)
        check(took < 10, "... within %.1f s (< 10 s; its deadline is 30 s)" % took)
        wrong_ca, took = rdattn("list", ca=other_ca)
        last = (wrong_ca.stderr.strip().splitlines() or [""])[-1]  # gRPC itself logs the handshake first
        check(wrong_ca.returncode == 1 and last.startswith("rdattn: UNAVAILABLE:") and
              "certificate verify failed" in last and took < 10,
              "a TLS client trusting another CA fails the handshake: exit %d, %r, %.1f s" %
              (wrong_ca.returncode, last, took))

        got, _ = rdattn("get", sid)
        check(got.returncode == 0 and sid in got.stdout, "the TLS client still works afterwards: rdattn get %s" % sid)
        can, _ = rdattn("cancel", sid)  # no job left for the worker below to lease
        check(can.returncode == 0, "rdattn --tls cancel %s: %s %s" % (sid, can.stdout.strip(), can.stderr.strip()))
        ls, _ = rdattn("list")
        check(ls.returncode == 0 and sid in ls.stdout and "CANCELLED" in ls.stdout,
              "rdattn --tls list shows %s CANCELLED" % sid)

        # A worker registers over TLS (and exits when idle); a plaintext one cannot.
        wdir = os.path.join(tmp, "w-tls")
        wlog_path = os.path.join(tmp, "worker-tls.log")
        with open(wlog_path, "w") as wlog:
            w = subprocess.run([worker, "--coordinator", addr, "--token", WORKER, "--ca-cert", cert, "--workdir", wdir,
                                "--train-binary", "/bin/true", "--kind", "cpu", "--slots", "1",
                                "--exit-when-idle", "2", "--lease-wait", "1"],
                               stdout=wlog, stderr=wlog, timeout=60, env=env)
        wtext = open(wlog_path).read()
        check(w.returncode == 0 and "registered with the coordinator as" in wtext,
              "rdattn-worker --ca-cert registers over TLS and exits when idle (exit %d)" % w.returncode)
        with open(os.path.join(wdir, "worker_id")) as f:
            check(f.read().strip() != "", "... and keeps the worker id the coordinator gave it")

        plog_path = os.path.join(tmp, "worker-plain.log")
        plog = open(plog_path, "w")
        pw = subprocess.Popen([worker, "--coordinator", addr, "--token", WORKER, "--workdir", os.path.join(tmp, "w-plain"),
                               "--train-binary", "/bin/true", "--kind", "cpu", "--slots", "1"],
                              stdout=plog, stderr=plog, env=env)
        procs.append(pw)
        time.sleep(4)
        pw.send_signal(signal.SIGTERM)
        pw.wait(timeout=30)
        plog.close()
        ptext = open(plog_path).read()
        check("registered with" not in ptext and "RegisterWorker: UNAVAILABLE" in ptext,
              "a worker without --ca-cert does not register (RegisterWorker UNAVAILABLE, retried)")

        ls, _ = rdattn("list")
        check(ls.returncode == 0 and sid in ls.stdout, "the TLS client still works at the end")
        check(coord.poll() is None, "the coordinator is still running")
        coord.send_signal(signal.SIGTERM)
        check(coord.wait(timeout=30) == 0, "the coordinator stops cleanly on SIGTERM")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
    subprocess.run(["rm", "-rf", tmp])
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
