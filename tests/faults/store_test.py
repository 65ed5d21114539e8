#!/usr/bin/python3
"""Faults of the coordinator's SQLite store, with real processes (docs/operations.md, "Stored
results and the store epoch" and "One coordinator per store").

  bitflip             after a clean stop, one bit of a job's stored val NLL is flipped in the
                      SQLite file (the jobs row, then the EVAL event's blob): the restarted
                      coordinator answers DATA_LOSS naming the job and the field in GetSweep and
                      GetReport, never the number, and its metrics leave the row out and count it
  wal_damage          kill -9 of the coordinator after acknowledged submissions, its WAL cut in
                      half, restart: a loud ERROR names the WAL and what was found, the store has
                      a new epoch, a watcher resuming with the old epoch is told
                      (FAILED_PRECONDITION), `rdattn watch` started before the kill restarts
                      from seq 0 by itself, and no (epoch, seq) names two different events
  second_coordinator  a second coordinator on the same file refuses to start, naming the holder
                      (pid, host, start time), while the first keeps serving

Run against /work/baseline-bin (before issue 24) each of them fails on the missing behaviour.
"""
import os
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from faults_test import run, sweep_yaml  # noqa: E402
from itest import check  # noqa: E402


def stop_coordinator(c, sig=signal.SIGTERM):
    c.coord.send_signal(sig)
    c.coord.wait(timeout=60)


def flip_double(v):
    (bits,) = struct.unpack("<Q", struct.pack("<d", v))
    return struct.unpack("<d", struct.pack("<Q", bits ^ 1))[0]


def rpc_error(fn):
    """The grpc.RpcError of fn(), or None when it succeeded (then also its result)."""
    try:
        return None, fn()
    except Exception as e:  # grpc.RpcError
        if hasattr(e, "code"):
            return e, None
        raise


def watch_events(c, sid, after_seq=0, epoch="", seconds=2.0):
    """Events of a WatchSweep until its deadline (the sweep runs on), or its error."""
    out = []
    req = c.cpb.WatchSweepRequest(sweep_id=sid, after_seq=after_seq)
    if epoch and hasattr(req, "store_epoch"):
        req.store_epoch = epoch
    try:
        for resp in c.svc.WatchSweep(req, timeout=seconds):
            out.append(resp.event)
    except c.grpc.RpcError as e:
        if e.code() != c.grpc.StatusCode.DEADLINE_EXCEEDED:
            return out, e
    return out, None


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def scenario_bitflip(c):
    c.start_coordinator()
    c.start_worker("w0")
    c.start_worker("w1")
    sid = c.submit(sweep_yaml(c.data))
    done = c.wait_terminal(sid)
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED")
    events = c.events(sid)
    c.check_results_equal_baseline(done, events)
    victim = done.jobs[0]
    jid, good = victim.job.job_id, victim.last_val_nll
    stop_coordinator(c)
    db = os.path.join(c.tmp, "c.db")
    bad = flip_double(good)
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET last_val_nll = ? WHERE id = ?", (bad, jid))
    con.commit()
    con.close()
    print("flipped one bit of %s's stored last_val_nll: %.17g -> %.17g" % (jid, good, bad))

    c.start_coordinator(extra_args=("--metrics-listen", "127.0.0.1:0"))
    err, resp = rpc_error(lambda: c.svc.GetSweep(
        c.cpb.GetSweepRequest(sweep_id=sid, view=c.cpb.SWEEP_VIEW_FULL if hasattr(c.cpb, "SWEEP_VIEW_FULL")
                              else 0), timeout=10))
    if err is None:
        served = [j.last_val_nll for j in resp.sweep.jobs if j.job.job_id == jid]
        check(False, "GetSweep answered OK after the flip and served %s's val NLL %.17g (the stored EVAL "
                     "event says %.17g): a damaged value served as a result" % (jid, served[0], good))
    msg = err.details() or ""
    print("GetSweep: %s: %s" % (err.code().name, msg))
    check(err.code() == c.grpc.StatusCode.DATA_LOSS, "GetSweep is DATA_LOSS (%s)" % err.code().name)
    check(jid in msg and "last_val_nll" in msg, "it names the job and the field: %s" % msg)
    check(repr(bad)[:6] not in msg and ("%.6f" % bad) not in msg, "it never gives the number")
    err, _ = rpc_error(lambda: c.svc.GetReport(c.cpb.GetReportRequest(sweep_id=sid), timeout=60))
    check(err is not None and err.code() == c.grpc.StatusCode.DATA_LOSS,
          "GetReport is DATA_LOSS (%s)" % (err.code().name if err else "OK"))
    print("GetReport: %s: %s" % (err.code().name, err.details()))
    check(jid in err.details() and "last_val_nll" in err.details(), "it names the job and the field")

    # The metrics: the damaged row is left out of rdattn_jobs and counted.
    log = open(os.path.join(c.tmp, "coordinator.log")).read()
    url = re.findall(r"metrics on (http://\S+/metrics)", log)[-1]
    text = scrape(url)
    jobs = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("rdattn_jobs{"))
    failures = [float(l.split()[-1]) for l in text.splitlines()
                if l.startswith("rdattn_store_checksum_failures_total")]
    print("metrics: rdattn_jobs total %g, rdattn_store_checksum_failures_total %s" % (jobs, failures))
    check(jobs == 1, "rdattn_jobs counts only the intact job (%g)" % jobs)
    check(failures and failures[0] >= 1, "the damaged row is counted in rdattn_store_checksum_failures_total")

    # The job row repaired by hand, one bit of its EVAL event's val NLL flipped instead.
    stop_coordinator(c)
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET last_val_nll = ? WHERE id = ?", (good, jid))
    seq, blob = con.execute("SELECT seq, blob FROM events WHERE job_id = ? AND metric_kind = 3 "
                            "ORDER BY seq DESC LIMIT 1", (jid,)).fetchone()
    at = bytes(blob).find(struct.pack("<d", good))
    check(at >= 0, "the final EVAL event's blob holds the val NLL")
    blob = bytearray(blob)
    blob[at] ^= 1
    con.execute("UPDATE events SET blob = ? WHERE seq = ?", (bytes(blob), seq))
    con.commit()
    con.close()
    c.start_coordinator()
    err, _ = rpc_error(lambda: c.svc.GetSweep(c.cpb.GetSweepRequest(sweep_id=sid), timeout=10))
    check(err is None, "GetSweep is served again with the job row intact")
    err, _ = rpc_error(lambda: c.svc.GetReport(c.cpb.GetReportRequest(sweep_id=sid), timeout=60))
    check(err is not None and err.code() == c.grpc.StatusCode.DATA_LOSS,
          "GetReport is DATA_LOSS when an EVAL event's val NLL is damaged (%s)" % (err.code().name if err else "OK"))
    print("GetReport: %s: %s" % (err.code().name, err.details()))
    check(jid in err.details() and "val_nll" in err.details(), "it names the job and the field")
    _, werr = watch_events(c, sid)
    check(werr is not None and werr.code() == c.grpc.StatusCode.DATA_LOSS,
          "WatchSweep from 0 is DATA_LOSS at the damaged event")


def scenario_wal_damage(c):
    c.start_coordinator()
    first = c.submit(sweep_yaml(c.data), "first.yaml")
    # A clean stop checkpoints the WAL: `first` is in the database file itself from now on.
    stop_coordinator(c)
    addr = c.start_coordinator()
    wal = os.path.join(c.tmp, "c.db-wal")
    log_client = os.path.join(c.tmp, "watch.log")
    watcher = subprocess.Popen([c.client, "--coordinator", addr, "watch", first, "--format", "json"],
                               stdout=subprocess.PIPE, stderr=open(log_client, "w"), text=True, env=c.env)
    c.procs.append(watcher)
    before, err = watch_events(c, first)
    check(err is None and before, "a watch of %s reads its events (%s)" % (first, err))
    old_epoch = getattr(before[-1], "store_epoch", "")
    last_seq = before[-1].seq
    acked = [c.submit(sweep_yaml(c.data, seeds=(i + 2,)), "s%d.yaml" % i) for i in range(5)]
    seen = {}  # (epoch, seq) -> (sweep, event bytes) before the kill
    for sid in [first] + acked:
        evs, err = watch_events(c, sid, seconds=1.0)
        check(err is None, "watch of %s" % sid)
        for e in evs:
            seen[(getattr(e, "store_epoch", ""), e.seq)] = (sid, e.SerializeToString())
    print("before the kill: epoch %r, %d events, the first sweep's last seq %d" % (old_epoch, len(seen), last_seq))
    time.sleep(1.0)  # the watcher has printed the events so far
    c.coord.kill()
    c.coord.wait()
    size = os.path.getsize(wal)
    check(size > 32, "the WAL holds the acknowledged writes (%d bytes)" % size)
    with open(wal, "r+b") as f:
        f.truncate(size // 2)
    print("WAL cut from %d to %d bytes" % (size, size // 2))
    c.start_coordinator(listen=addr)
    log = open(os.path.join(c.tmp, "coordinator.log")).read().split("listening on")[-1]
    lost = []
    for sid in acked:
        err, _ = rpc_error(lambda: c.svc.GetSweep(c.cpb.GetSweepRequest(sweep_id=sid), timeout=10))
        if err is not None:
            lost.append(sid)
    print("acknowledged submissions lost with the WAL's tail: %d of %d" % (len(lost), len(acked)))
    # New events after the restart: no (epoch, seq) names two different events.
    fresh = [c.submit(sweep_yaml(c.data, seeds=(i + 20,)), "n%d.yaml" % i) for i in range(5)]
    reused = []
    for sid in [first] + fresh:
        evs, _ = watch_events(c, sid, seconds=1.0)
        for e in evs:
            key = (getattr(e, "store_epoch", ""), e.seq)
            if key in seen and seen[key] != (sid, e.SerializeToString()):
                reused.append((key, seen[key][0], sid))
    check(not reused, "no (epoch, seq) was handed out twice (%d reused, e.g. %s)" % (len(reused), reused[:3]))

    loud = [l for l in log.splitlines() if "DAMAGED WAL" in l]
    check(loud, "a loud ERROR line names the damaged WAL (coordinator log after restart:\n%s)" %
          "\n".join(log.splitlines()[-8:]))
    print("log: %s" % loud[0])
    check(wal in loud[0] and "mid-frame" in loud[0], "it names the file and what was found")

    after, err = watch_events(c, first)
    check(err is None and after, "a watch of %s from 0 works after the restart" % first)
    new_epoch = getattr(after[-1], "store_epoch", "")
    check(new_epoch and new_epoch != old_epoch, "a new store epoch (%r, was %r)" % (new_epoch, old_epoch))
    resumed, err = watch_events(c, first, after_seq=last_seq, epoch=old_epoch)
    check(err is not None and err.code() == c.grpc.StatusCode.FAILED_PRECONDITION,
          "a watcher resuming after seq %d with the old epoch is told (FAILED_PRECONDITION), not silently "
          "given %d events after a reused number" % (last_seq, len(resumed)))
    print("resume with the old epoch: %s: %s" % (err.code().name, err.details()))

    # `rdattn watch`, started before the kill, was told and restarted from seq 0 by itself.
    c.svc.CancelSweep(c.cpb.CancelSweepRequest(sweep_id=first, reason="test over"), timeout=10)
    try:
        out, _ = watcher.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        watcher.kill()
        out, _ = watcher.communicate()
    wlog = open(log_client).read()
    print("rdattn watch stderr: %s" % wlog.strip()[-400:])
    check("epoch" in wlog and "from seq 0" in wlog, "rdattn watch says the store changed epoch and restarts from 0")
    seqs = [int(m) for m in re.findall(r'"seq":\s*"?(\d+)', out)]
    check(seqs and seqs.count(seqs[0]) >= 2,
          "it printed the sweep's events again from the start (seqs %s)" % seqs[:40])
    check(watcher.returncode in (0, 3), "rdattn watch ended with the sweep (exit %s)" % watcher.returncode)


def scenario_second_coordinator(c):
    addr = c.start_coordinator()
    sid = c.submit(sweep_yaml(c.data))
    first_pid = c.coord.pid
    db = os.path.join(c.tmp, "c.db")
    second = subprocess.Popen([c.coordinator_bin, "--listen", "127.0.0.1:0", "--db", db, "--lease-seconds", "6",
                               "--heartbeat-seconds", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=c.env)
    c.procs.append(second)
    try:
        out, err = second.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        second.kill()
        out, err = second.communicate()
        check(False, "a second coordinator on the same file started serving (%s) instead of refusing" %
              out.strip())
    print("second coordinator: exit %d: %s" % (second.returncode, err.strip().splitlines()[-1] if err.strip() else ""))
    check(second.returncode != 0, "the second coordinator exits non-zero")
    check("listening on" not in out, "it never served")
    check("another coordinator" in err and ("pid %d" % first_pid) in err and "host" in err and "started" in err,
          "its error names the holder (pid %d, host, start time): %s" % (first_pid, err.strip()[-300:]))
    # The first keeps serving.
    st = c.status(sid)
    check(st.sweep_id == sid, "the first coordinator still answers GetSweep")
    again = c.submit(sweep_yaml(c.data, seeds=(2,)), "again.yaml")
    check(again != sid and c.status(again).sweep_id == again, "and takes new submissions")
    check(c.coord.poll() is None and c.addr == addr, "the first coordinator is still running")


SCENARIOS = {"bitflip": scenario_bitflip, "wal_damage": scenario_wal_damage,
             "second_coordinator": scenario_second_coordinator}


if __name__ == "__main__":
    run(SCENARIOS)
