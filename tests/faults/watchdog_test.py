#!/usr/bin/python3
"""The progress watchdog (docs/operations.md, "Progress watchdog") with real processes on loopback.

  stalled   two workers run the tiny block-vs-rd sweep of faults_test.py (lease 6 s, heartbeat
            1 s); once w0's job is past step 22, w0's rdattn-train rank is frozen with SIGSTOP
            while w0 itself stays healthy and keeps renewing the lease. The watchdog (floor 8 s,
            factor 10, startup 30 s) must notice within its bound plus one check interval, kill
            the rank (SIGKILL reaches a stopped process), and report the attempt FAILED with a
            reason starting "stalled: no progress for"; the job then resumes in attempt 2 from
            its checkpoint and SUCCEEDS, the other job is never stopped, and every stored val
            and test NLL is bitwise equal to an uninterrupted standalone run.

Against binaries without the watchdog (no --stall-* flags), the workers start without those
flags and the frozen rank is still alive, its lease renewed, after the whole wait: the test fails.
Prints the measured detection time.
"""
import datetime
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from faults_test import STEPS, alive, check, job_of_worker, ranks_under, run, sweep_yaml  # noqa: E402

FLOOR_S = 8.0
FACTOR = 10
STARTUP_S = 30.0
# The bound is max(8 s, 10 x the slowest recent step interval, 10 x the slowest evaluation or
# checkpoint): about 8 s here, unless the machine is so loaded that one step took over 0.8 s; or
# the startup allowance (30 s) when the rank froze just before a phase its attempt has not timed
# yet (the evaluation at step 40, the test evaluation). Wait 20 s past the longer one before
# calling the rank unnoticed.
WAIT_S = STARTUP_S + 20.0
# Detection may come later than the bound by one relay read (200 ms) and one supervisor check
# (50 ms); the rest is slack for a loaded machine.
DETECT_SLACK_S = 1.0
KILL_GRACE_S = 2.0  # the worker's SIGTERM -> SIGKILL grace for a stalled job


def watchdog_flags(c):
    """The worker's watchdog flags, or none when this rdattn-worker has no watchdog."""
    h = subprocess.run([c.worker_bin, "--help"], capture_output=True, text=True, timeout=30)
    if "--stall-floor-seconds" not in h.stdout + h.stderr:
        print("NOTE: %s has no --stall-* flags (no progress watchdog); its workers start without them" %
              c.worker_bin)
        return []
    return ["--stall-floor-seconds", str(FLOOR_S), "--stall-factor", str(FACTOR),
            "--stall-startup-seconds", str(STARTUP_S)]


def log_time(line):
    return datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def scrape(log_path, metric):
    """The value of an unlabelled metric from the worker's /metrics (port from its log)."""
    m = re.search(r"metrics on (http://\S+/metrics)", open(log_path).read())
    check(m is not None, "the worker logs its metrics address")
    text = urllib.request.urlopen(m.group(1), timeout=10).read().decode()
    v = re.search(r"^%s (\S+)$" % re.escape(metric), text, re.M)
    check(v is not None, "%s is served" % metric)
    return float(v.group(1))


def scenario_stalled(c):
    flags = watchdog_flags(c)
    c.start_coordinator()
    c.start_worker("w0", extra_args=flags + ["--metrics-listen", "127.0.0.1:0"])
    c.start_worker("w1", extra_args=flags)
    sid = c.submit(sweep_yaml(c.data))
    # Frozen mid-run: as soon as w0's job is past step 22 (after its first evaluation, at step 20;
    # a tiny run takes seconds).
    st = c.wait(sid, lambda st: any(j.worker_id == "w0" and j.state == c.spb.JOB_STATE_RUNNING and j.step >= 22
                                    for j in st.jobs), "w0's job running past step 22", 300)
    victim = job_of_worker(st, "w0")
    check(victim is not None, "w0 runs a job")
    other = [j for j in st.jobs if j.job.job_id != victim.job.job_id][0].job.job_id
    _, workdir = c.workers["w0"]
    ranks = ranks_under(workdir)
    check(len(ranks) == 1, "w0 runs one rank (%s)" % ranks)
    rank = ranks[0]
    os.kill(rank, signal.SIGSTOP)
    t0 = time.time()
    frozen_at = [j for j in c.status(sid).jobs if j.job.job_id == victim.job.job_id][0]
    print("froze rank %d of %s (attempt %d, lease %s) at step ~%d" % (
        rank, victim.job.job_id, frozen_at.attempts, frozen_at.lease_id, frozen_at.step))
    while time.time() - t0 < WAIT_S and alive(rank):
        time.sleep(0.05)
    t_dead = time.time() - t0
    if alive(rank):
        now = [j for j in c.status(sid).jobs if j.job.job_id == victim.job.job_id][0]
        check(False, "the frozen rank was stopped by the watchdog: it is still alive %.0f s after SIGSTOP, and "
              "its worker keeps the job (state %s, attempts %d, lease %s %s, step %d)" % (
                  WAIT_S, c.spb.JobState.Name(now.state), now.attempts, now.lease_id,
                  "still renewed" if now.lease_id == frozen_at.lease_id else "changed", now.step))
    log = open(os.path.join(c.tmp, "w0.log")).read()
    lines = [l for l in log.splitlines() if "stalled: no progress for" in l]
    check(lines, "w0's log says the job stalled")
    detect = log_time(lines[0]) - t0
    m = re.search(r"stalled: no progress for ([\d.]+) s \(last event: (\w+) at step (\d+); bound ([\d.]+) s", lines[0])
    check(m is not None, "the log line gives the silence, the last event and the bound: %s" % lines[0])
    silent, last_kind, last_step, bound = float(m.group(1)), m.group(2), int(m.group(3)), float(m.group(4))
    print("detection: the watchdog stopped the job %.2f s after SIGSTOP (bound %.1f s, silence %.1f s, last "
          "event %s at step %d); the rank died %.2f s after SIGSTOP" % (detect, bound, silent, last_kind,
                                                                       last_step, t_dead))
    print("log: %s" % lines[0].split("rdattn-worker: ", 1)[-1])
    check(bound >= FLOOR_S, "the bound is at least the floor (%.1f s)" % bound)
    check(detect <= bound + DETECT_SLACK_S,
          "detected within the bound + one check interval: %.2f s <= %.1f + %.1f s" % (detect, bound, DETECT_SLACK_S))
    check(t_dead <= detect + KILL_GRACE_S + DETECT_SLACK_S,
          "the stopped rank was killed within the %.0f s grace after detection (dead at %.2f s)" % (KILL_GRACE_S,
                                                                                                  t_dead))
    check(scrape(os.path.join(c.tmp, "w0.log"), "rdattn_worker_jobs_stalled_total") == 1,
          "w0's rdattn_worker_jobs_stalled_total is 1")

    done = c.wait_terminal(sid)
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" % c.spb.SweepState.Name(done.state))
    by_id = {j.job.job_id: j for j in done.jobs}
    j = by_id[victim.job.job_id]
    check(j.state == c.spb.JOB_STATE_SUCCEEDED and j.attempts == 2,
          "the stalled job SUCCEEDED in attempt 2 (attempts %d, on %s)" % (j.attempts, j.worker_id))
    check("stalled: no progress for" in j.failure_reason,
          "its first attempt's reason says it stalled: %s" % j.failure_reason[:200].replace("\n", " | "))
    check(by_id[other].attempts == 1 and not by_id[other].failure_reason,
          "the other job was never stopped (attempts %d, reason %r)" % (by_id[other].attempts,
                                                                        by_id[other].failure_reason[:100]))
    events = c.events(sid)
    K = c.rpb.MetricEvent
    evs = events[j.job.job_id]
    inits = [e for e in evs if e.kind == K.KIND_INIT]
    ckpts = [e.step for e in evs if e.kind == K.KIND_CHECKPOINT and e.attempt == 1]
    # (A rank frozen between writing a checkpoint and its event resumes from that checkpoint.)
    check(len(inits) == 2 and inits[1].attempt == 2 and ckpts and 0 < max(ckpts) <= inits[1].step <= last_step <
          STEPS,
          "attempt 2 resumed from attempt 1's last checkpoint (INIT at step %d; attempt 1's checkpoints %s, its last "
          "event at step %d)" % (inits[1].step if len(inits) > 1 else -1, ckpts, last_step))
    c.check_results_equal_baseline(done, events)


if __name__ == "__main__":
    run({"stalled": scenario_stalled})
