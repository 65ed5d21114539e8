#!/usr/bin/python3
"""Retries that cannot burn a sweep (issue 24 item 1; docs/operations.md "Retries and preemption").

  full_disk   a worker whose workdir is a small tmpfs that is full while the sweep has queued
              jobs, next to a healthy worker: its attempts fail at the start (job.json: No space
              left on device) and are reported MACHINE_FAILED; the coordinator requeues them with
              backoff (not counted against max_attempts, not back to the same worker while the
              other one can take them); the full worker goes unhealthy after 3 start failures in a
              row, probes its disk and recovers once it is freed. Every job SUCCEEDS, none is
              FAILED, no retry comes before its backoff allows, and every stored val and test NLL
              is bitwise equal to an uninterrupted run.

Needs root (mount -t tmpfs); the tmpfs is unmounted in a finally. Uses the Cluster harness of
faults_test.py (real coordinator, workers and rdattn-train, lease 6 s, heartbeat 1 s).
"""
import errno
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from faults_test import run, sweep_yaml  # noqa: E402
from itest import check  # noqa: E402

BACKOFF_BASE_S = 2.0  # the coordinator's default --retry-backoff-base-seconds


def fill(path):
    """Writes `path` until the file system is full; returns the bytes written."""
    n = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            n += os.write(fd, b"\0" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return n


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def state_changes(c, sid):
    """[(job_id, from, to, time_s, reason)] of the sweep, in order."""
    out = []
    for resp in c.svc.WatchSweep(c.cpb.WatchSweepRequest(sweep_id=sid, after_seq=0), timeout=60):
        ev = resp.event
        t = ev.time.seconds + ev.time.nanos / 1e9
        if ev.HasField("job_state_change"):
            ch = ev.job_state_change
            out.append((ch.job_id, ch.from_state, ch.to_state, t, ch.reason))
        if ev.HasField("sweep_state_change") and ev.sweep_state_change.to_state in (
                c.spb.SWEEP_STATE_SUCCEEDED, c.spb.SWEEP_STATE_FAILED, c.spb.SWEEP_STATE_CANCELLED):
            break
    return out


def scenario_full_disk(c, mnt):
    c.start_coordinator()
    c.start_worker("w-ok")
    c.start_worker("w-full")  # its workdir is the tmpfs at `mnt`
    log_full = os.path.join(c.tmp, "w-full.log")
    deadline = time.time() + 60
    while "registered with" not in read(log_full) and time.time() < deadline:
        time.sleep(0.1)
    check("registered with" in read(log_full), "w-full registered")
    filler = os.path.join(mnt, "filler")
    n = fill(filler)
    t_full = time.time()
    print("w-full's workdir (tmpfs) is full: %d bytes of filler" % n)
    sid = c.submit(sweep_yaml(c.data, max_attempts=3, seeds=(1, 2)))

    # Keep the disk full until the worker says it is unhealthy (or a job FAILED, the old way, or
    # 60 s pass); then free it.
    def failed_jobs(st):
        return [j for j in st.jobs if j.state == c.spb.JOB_STATE_FAILED]
    deadline = time.time() + 60
    st = c.status(sid)
    while time.time() < deadline:
        st = c.status(sid)
        if "unhealthy:" in read(log_full) or failed_jobs(st):
            break
        time.sleep(0.1)
    time.sleep(1.0)
    os.remove(filler)
    t_free = time.time()
    print("disk full for %.1f s" % (t_free - t_full))
    for j in failed_jobs(c.status(sid)):
        check(False, "no job is FAILED for the full disk: %s ended FAILED after %d attempts: %s" % (
            j.job.job_id, j.attempts, j.failure_reason[:200].replace("\n", " | ")))

    done = c.wait_terminal(sid)
    for j in done.jobs:
        print("%s: %s, attempts %d, machine failures %d, worker %s, reason %r" % (
            j.job.job_id, c.spb.JobState.Name(j.state), j.attempts, j.machine_failures, j.worker_id,
            j.failure_reason[:160]))
    check(all(j.state == c.spb.JOB_STATE_SUCCEEDED for j in done.jobs),
          "every job SUCCEEDED (%s)" % [c.spb.JobState.Name(j.state) for j in done.jobs])
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED")
    hit = [j for j in done.jobs if j.machine_failures > 0]
    check(hit, "some job met the full disk (machine_failures > 0)")
    for j in hit:
        check("machine failure on w-full" in j.failure_reason and "No space left on device" in j.failure_reason,
              "%s: its reason says it was a machine failure and why: %s" % (j.job.job_id, j.failure_reason[:200]))
        check(j.attempts - j.machine_failures <= 3,
              "%s: machine failures did not use up max_attempts (%d attempts, %d machine failures)" % (
                  j.job.job_id, j.attempts, j.machine_failures))
    log = read(log_full)
    check("unhealthy: 3 start failures in a row" in log, "w-full said it is unhealthy after 3 start failures")
    check("healthy again" in log, "w-full recovered by itself once its disk was freed (log line)")
    check(log.index("unhealthy:") < log.index("healthy again"), "in that order")

    # No retry before its backoff: the n-th failure of a job waits at least base/2 * 2^(n-1).
    changes = state_changes(c, sid)
    for jid in {ch[0] for ch in changes}:
        mine = [ch for ch in changes if ch[0] == jid]
        failures = 0
        last_fail = None
        for _, frm, to, t, reason in mine:
            if to == c.spb.JOB_STATE_PENDING and frm in (c.spb.JOB_STATE_LEASED, c.spb.JOB_STATE_RUNNING) \
                    and "preempted" not in reason:
                failures += 1
                last_fail = t
            elif to == c.spb.JOB_STATE_LEASED and last_fail is not None:
                least = BACKOFF_BASE_S / 2 * 2 ** (failures - 1)
                check(t - last_fail >= least - 0.01,
                      "%s: attempt after failure %d came %.3f s later (backoff allows >= %.3f s)" % (
                          jid, failures, t - last_fail, least))
                print("%s: retry %d after %.2f s (>= %.2f s)" % (jid, failures, t - last_fail, least))
                last_fail = None
    c.check_results_equal_baseline(done, c.events(sid))


def with_full_tmpfs(scenario):
    """scenario(c, mnt) with a 4 MiB tmpfs mounted at <tmp>/w-full, unmounted after every
    process stopped."""
    def go(c):
        check(os.geteuid() == 0, "this test mounts a tmpfs: it needs root")
        mnt = os.path.join(c.tmp, "w-full")
        os.makedirs(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
        c.cleanups.append(lambda: subprocess.run(["umount", mnt], check=False))
        scenario(c, mnt)
    return go


if __name__ == "__main__":
    run({"full_disk": with_full_tmpfs(scenario_full_disk)})
