#!/usr/bin/python3
"""Bad clients do not harm good ones: a real coordinator on loopback, rdattn-load as the good
client, and a series of bad clients against the same port while it runs.

The coordinator serves with token auth, a fresh SQLite file and the default
--max-message-bytes (4 MiB). First rdattn-load (2 clients, 5 ms think time) runs alone for a
baseline. Then it runs again while the bad clients do, one after the other:
  - 40 half-open TCP connections that never send a byte, and 10 that send half of the HTTP/2
    client preface and stop; both stay open until the end of the phase;
  - a SubmitSweep larger than 4 MiB: RESOURCE_EXHAUSTED; one just under it (validate_only) is
    served; the same channel then still serves SubmitSweep and GetSweep;
  - a GetSweep whose payload is not a protobuf message: refused (not OK), and the channel still works;
  - raw garbage (64 KiB of random bytes) and an HTTP/1.1 request on a plain TCP socket: the
    coordinator closes the connection;
  - a truncated preface, then close;
  - a valid preface and SETTINGS followed by a HEADERS frame with an undecodable HPACK block,
    and one followed by a DATA frame on a stream never opened: nothing is served (no DATA
    back); the connection is closed, or it lives on (the stream reset or the frame ignored)
    and still answers a PING.
Checks: the good client had 0 errors and lost no watch event in either run, and its GetSweep p99
stayed within max(3 x baseline, baseline + 25 ms); the coordinator is alive, serves a fresh
client, and stops cleanly. A second coordinator with --max-message-bytes 65536 refuses a 70 KB
request and accepts a 60 KB one: the flag sets the limit.
"""
import argparse
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from itest import check  # noqa: E402

TOKEN = "bad-clients-researcher-token-0123"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def frames_of(data):
    """[(type, flags)] of the HTTP/2 frames in `data` (a server's bytes), as far as they parse."""
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        out.append((data[i + 3], data[i + 4]))
        i += 9 + n
    return out


def read_until_closed(sock, timeout, until=None):
    """(bytes the server sent, True when it closed the connection) after `timeout` seconds, or
    as soon as `until(bytes so far)` holds."""
    data, deadline = b"", time.time() + timeout
    try:
        while time.time() < deadline and not (until and until(data)):
            sock.settimeout(max(0.01, deadline - time.time()))
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return data, True
    except socket.timeout:
        pass
    return data, False


def ping_acked(data):
    return (0x6, 0x1) in frames_of(data)


def start_coordinator(coordinator, tmp, name, extra=()):
    tokens = os.path.join(tmp, "tokens")
    if not os.path.exists(tokens):
        with open(tokens, "w") as f:
            f.write("%s researcher good\n" % TOKEN)
        os.chmod(tokens, 0o600)
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, name + ".db"),
                          "--tokens-file", tokens] + list(extra), stdout=subprocess.PIPE, stderr=log, text=True)
    m = re.search(r"listening on (127\.0\.0\.1):(\d+)", p.stdout.readline())
    check(m is not None, "%s listens on an OS-chosen port" % name)
    return p, log, int(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", required=True, help="folder with the generated Python gRPC stubs")
    args = ap.parse_args()
    sys.path.insert(0, args.pystubs)
    import grpc  # noqa: E402
    from rdattn.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, sweep_pb2 as spb  # noqa: E402

    coordinator = os.path.join(args.bin, "coordinator", "rdattn-coordinator")
    load = os.path.join(args.bin, "tests", "load", "rdattn-load")
    tmp = tempfile.mkdtemp(prefix="rdattn-bad-clients-")
    md = (("authorization", "Bearer " + TOKEN),)
    procs, logs, socks = [], [], []

    def good_client(port, seconds, name):
        out = os.path.join(tmp, name + ".json")
        return subprocess.Popen([load, "--coordinator", "127.0.0.1:%d" % port, "--token", TOKEN, "--clients", "2",
                                 "--seconds", str(seconds), "--think-ms", "5", "--json", out],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out

    def good_result(p, out, name):
        text, _ = p.communicate(timeout=120)
        print(text, flush=True)
        check(p.returncode == 0, "%s: rdattn-load passed (exit 0)" % name)
        with open(out) as f:
            res = json.load(f)
        w = res["watch"]
        check(res["errors"] == 0 and w["streams_checked"] > 0 and
              sum(w[k] for k in ("missing", "duplicates", "out_of_order", "mismatched", "unexpected", "malformed")) == 0,
              "%s: 0 errors, %d watch streams (%d events) with nothing lost" %
              (name, w["streams_checked"], w["events_checked"]))
        return res

    def spec(name):
        s = spb.SweepSpec(name=name, arms=["block", "rd"], seeds=[1], max_attempts=1)
        s.scales.add(name="tiny", preset="tiny")
        s.data.train_shards.append("/nonexistent/train_*.bin")
        s.data.val_shards.append("/nonexistent/val.bin")
        s.data.tokenizer = "byte"
        s.data.val_windows = 16
        s.optim.peak_lr = 0.003
        s.optim.warmup_steps = 2
        s.schedule.total_tokens = 12288
        s.schedule.global_batch_tokens = 512
        s.schedule.micro_batch_sequences = 8
        s.schedule.milestones_tokens.append(12288)
        s.parallel.world_size = 1
        return s

    def padded_submit(total_bytes, validate_only):
        """A SubmitSweepRequest of `total_bytes` serialized (the padding is the description)."""
        req = cpb.SubmitSweepRequest(request_id="bad-%d" % total_bytes, spec=spec("padded"), validate_only=validate_only)
        req.spec.description = "x" * (total_bytes - req.ByteSize())
        while req.ByteSize() > total_bytes:  # the length prefix grew
            req.spec.description = req.spec.description[:-1]
        return req

    try:
        coord, log, port = start_coordinator(coordinator, tmp, "coordinator")
        procs.append(coord)
        logs.append(log)
        addr = "127.0.0.1:%d" % port

        base_p, base_out = good_client(port, 3, "baseline")
        base = good_result(base_p, base_out, "baseline")
        base_p99 = base["rpcs"]["GetSweep"]["p99_ms"]

        run_p, run_out = good_client(port, 8, "under-bad-clients")
        time.sleep(0.5)

        # Half-open connections, and ones stuck in the middle of the preface; held to the end.
        for _ in range(40):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(PREFACE[:12])
            socks.append(s)
        check(True, "50 half-open / half-preface connections held open")

        # The Python client sends any size (the server decides) and takes large replies (the
        # validate_only reply echoes the spec).
        bad = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
        bad_stub = cgrpc.SweepServiceStub(bad)
        big = padded_submit((4 << 20) + 64 * 1024, validate_only=True)
        try:
            bad_stub.SubmitSweep(big, metadata=md, timeout=30)
            check(False, "a %d-byte SubmitSweep is refused" % big.ByteSize())
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "a %d-byte SubmitSweep (> 4 MiB): %s %s" % (big.ByteSize(), e.code().name, e.details()))
        under = padded_submit((4 << 20) - 64 * 1024, validate_only=True)
        try:
            bad_stub.SubmitSweep(under, metadata=md, timeout=30)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        check(code == grpc.StatusCode.OK,
              "a %d-byte SubmitSweep (< 4 MiB, validate_only) is served: %s" % (under.ByteSize(), code.name))
        sid = bad_stub.SubmitSweep(cpb.SubmitSweepRequest(request_id="bad-clients-ok", spec=spec("ok")),
                                   metadata=md, timeout=30).sweep.sweep_id
        got = bad_stub.GetSweep(cpb.GetSweepRequest(sweep_id=sid), metadata=md, timeout=30).sweep
        check(got.sweep_id == sid, "the same channel still serves SubmitSweep and GetSweep afterwards")

        raw = bad.unary_unary("/rdattn.v1.SweepService/GetSweep")  # bytes in, bytes out
        try:
            raw(b"\xff\xff\xff\xff\x0f\x0a\x80", metadata=md, timeout=30)
            check(False, "a GetSweep payload that is not a protobuf message is refused")
        except grpc.RpcError as e:
            check(e.code() != grpc.StatusCode.OK,
                  "a GetSweep payload that is not a protobuf message: %s %s" % (e.code().name, e.details()))
        got = bad_stub.GetSweep(cpb.GetSweepRequest(sweep_id=sid), metadata=md, timeout=30).sweep
        check(got.sweep_id == sid, "... and the channel still works")
        bad.close()

        for name, payload in (("64 KiB of random bytes", os.urandom(64 * 1024)),
                              ("an HTTP/1.1 request", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                              ("a truncated HTTP/2 preface", PREFACE[:16])):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            try:
                s.sendall(payload)
            except (ConnectionResetError, BrokenPipeError):
                pass
            if name.startswith("a truncated"):
                s.shutdown(socket.SHUT_WR)  # then nothing more: the server sees EOF mid-preface
            _, closed = read_until_closed(s, 10)
            s.close()
            check(closed, "%s: the coordinator closes the connection" % name)

        for name, frames in (("a HEADERS frame with an undecodable HPACK block",
                              frame(0x1, 0x5, 1, b"\xff" * 24)),
                             ("a DATA frame on a stream never opened", frame(0x0, 0x1, 7, b"\x00" * 16))):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(PREFACE + frame(0x4, 0x0, 0) + frames)
            data, closed = read_until_closed(s, 1)
            if not closed:  # the connection lives on: it must still answer a PING
                s.sendall(frame(0x6, 0x0, 0, b"rdattn!!"))
                more, closed = read_until_closed(s, 5, until=ping_acked)
                data += more
            s.close()
            got = frames_of(data)
            types = [t for t, _ in got]
            answered = ping_acked(data)
            # Refused (the stream reset, or the connection closed) or ignored; nothing served (no
            # DATA back). A connection left open still answers a PING.
            how = ("RST_STREAM; " if 0x3 in types else "") + ("GOAWAY; " if 0x7 in types else "") + (
                "connection closed" if closed else "connection still answers a PING")
            check((closed or answered) and 0x0 not in types,
                  "preface + SETTINGS + %s: %s (server frame types %s)" % (name, how, types))

        check(run_p.poll() is None, "the bad clients were done while the good client still ran")
        run = good_result(run_p, run_out, "under-bad-clients")
        for s in socks:
            s.close()
        p99 = run["rpcs"]["GetSweep"]["p99_ms"]
        bound = max(3 * base_p99, base_p99 + 25)
        check(p99 <= bound, "the good client's GetSweep p99 %.2f ms under the bad clients <= %.2f ms "
              "(baseline p99 %.2f ms; p50 %.2f vs %.2f ms)" %
              (p99, bound, base_p99, run["rpcs"]["GetSweep"]["p50_ms"], base["rpcs"]["GetSweep"]["p50_ms"]))

        check(coord.poll() is None, "the coordinator is still running")
        fresh = cgrpc.SweepServiceStub(grpc.insecure_channel(addr))
        ls = fresh.ListSweeps(cpb.ListSweepsRequest(page_size=5), metadata=md, timeout=30)
        check(len(ls.sweeps) > 0, "a fresh client is served (ListSweeps)")
        coord.send_signal(signal.SIGTERM)
        check(coord.wait(timeout=30) == 0, "the coordinator stops cleanly on SIGTERM")

        # The flag sets the limit.
        small, log2, port2 = start_coordinator(coordinator, tmp, "coordinator-64k", ["--max-message-bytes", "65536"])
        procs.append(small)
        logs.append(log2)
        stub2 = cgrpc.SweepServiceStub(grpc.insecure_channel("127.0.0.1:%d" % port2,
                                                             options=[("grpc.max_receive_message_length", 64 << 20)]))
        try:
            stub2.SubmitSweep(padded_submit(70000, True), metadata=md, timeout=30)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED, "--max-message-bytes 65536: a 70000-byte request is %s" % code.name)
        resp = stub2.SubmitSweep(padded_submit(60000, True), metadata=md, timeout=30)
        check(len(resp.planned_jobs) == 2, "--max-message-bytes 65536: a 60000-byte request is served")
        small.send_signal(signal.SIGTERM)
        check(small.wait(timeout=30) == 0, "that coordinator stops cleanly too")
    finally:
        for s in socks:
            s.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    subprocess.run(["rm", "-rf", tmp])
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
