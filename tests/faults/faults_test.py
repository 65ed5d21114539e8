#!/usr/bin/python3
"""Fault tests of the sweep service with real processes on loopback (docs/operations.md).

Each --scenario is one ctest test. A coordinator (real gRPC server, SQLite file, lease 6 s,
heartbeat 1 s) and workers (each launching real rdattn-train processes) run a block-vs-rd sweep of
a tiny byte-level model (120 steps, a checkpoint every 5, milestones at steps 40/80/120, test
shards), and a fault is injected mid-job:

  worker_kill       kill -9 of a worker: its ranks stop within seconds, write nothing more, and
                    the job resumes on another worker from its checkpoint
  coordinator_kill  kill -9 of the coordinator, restarted on the same file and port 2 s later:
                    no lease expires, no event is lost, no attempt is wasted
  preempt           SIGTERM to a worker: its ranks checkpoint, the job requeues without counting
                    as a failure and resumes elsewhere
  unshared_root     kill -9 of a worker whose checkpoint root is gone with it: the next worker
                    cannot read the lease's checkpoint, says so (log line and KIND_WARNING event
                    naming the path) and trains from step 0
  crash_loop        a corrupt shard appears after one job started: the other job's ranks crash
                    on every attempt, the job ends FAILED after max_attempts with the stderr
                    reason, and the first job still SUCCEEDS with all of its results

Every scenario that can finish checks that each job's val NLL at every milestone and its test NLL
are BITWISE equal to an uninterrupted standalone rdattn-train run of the same RunSpec (CPU, one
thread), and that the sweep's events hold every result. Ports are chosen by the OS; every
process is stopped at the end, pass or fail.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from trainer_cli_test import corpus, write_shard  # noqa: E402
from itest import check  # noqa: E402

# 120 steps: at 60 a tiny job ran ~2.5 s, and both jobs were once past step 15 and finished
# between two 1 s heartbeats, so wait_both_running never saw them running together.
STEPS = 120
MILESTONES = [40 * 512, 80 * 512, 120 * 512]


def sweep_yaml(data, max_attempts=3, seeds=(1,)):
    return """name: faults
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [%(seeds)s]
data:
  train_shards: ["%(d)s/f_train_*.bin"]
  val_shards: ["%(d)s/f_val_000000.bin"]
  test_shards: ["%(d)s/f_test_000000.bin"]
  tokenizer: byte
  val_windows: 16
  test_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 4}
schedule:
  total_tokens: %(total)d
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [%(ms)s]
parallel: {world_size: 1, threads_per_rank: 1, precision: fp32}
checkpoint: {every_steps: 5, keep_last: 2}
max_attempts: %(att)d
""" % {"d": data, "total": STEPS * 512, "ms": ", ".join(str(m) for m in MILESTONES), "att": max_attempts,
       "seeds": ", ".join(str(s) for s in seeds)}


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def ranks_under(workdir):
    """pids of rdattn-train processes whose job.json lies under `workdir`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"rdattn-train") and any(a.startswith(workdir.encode() + b"/") for a in argv):
            if alive(int(d)):
                out.append(int(d))
    return out


def tree_state(root):
    """{path: (size, mtime_ns)} of every file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            p = os.path.join(dirpath, n)
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


class Cluster:
    def __init__(self, args, name):
        sys.path.insert(0, args.pystubs)
        import grpc
        from rdattn.v1 import coordinator_pb2, coordinator_pb2_grpc, sweep_pb2, run_spec_pb2
        from google.protobuf import json_format
        self.grpc, self.cpb, self.cgrpc, self.spb, self.rpb = (grpc, coordinator_pb2, coordinator_pb2_grpc,
                                                              sweep_pb2, run_spec_pb2)
        self.json_format = json_format
        b = args.bin
        self.coordinator_bin = os.path.join(b, "coordinator", "rdattn-coordinator")
        self.worker_bin = os.path.join(b, "worker", "daemon", "rdattn-worker")
        self.train = os.path.join(b, "worker", "trainer", "rdattn-train")
        self.client = os.path.join(b, "client", "rdattn")
        self.tmp = tempfile.mkdtemp(prefix="rdattn-faults-%s-" % name)
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        write_shard(os.path.join(self.data, "f_train_000000.bin"), corpus(1, 300, 60))
        write_shard(os.path.join(self.data, "f_val_000000.bin"), corpus(2, 20, 60))
        write_shard(os.path.join(self.data, "f_test_000000.bin"), corpus(3, 20, 60))
        self.env = dict(os.environ, OMP_NUM_THREADS="1")
        self.procs = []
        self.coord = None
        self.addr = None
        self.workers = {}
        self.logs = []
        self.cleanups = []  # run by run() after every process stopped (e.g. umount)

    def _start(self, cmd, log_name, capture_stdout=False):
        log_path = os.path.join(self.tmp, log_name)
        log = open(log_path, "a")
        self.logs.append(log_path)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture_stdout else log, stderr=log, text=True,
                             env=self.env)
        self.procs.append(p)
        return p

    def start_coordinator(self, listen="127.0.0.1:0", extra_args=()):
        self.coord = self._start([self.coordinator_bin, "--listen", listen, "--db", os.path.join(self.tmp, "c.db"),
                                  "--lease-seconds", "6", "--heartbeat-seconds", "1"] + list(extra_args),
                                 "coordinator.log", True)
        line = self.coord.stdout.readline()
        m = re.search(r"listening on (\S+:\d+)", line)
        check(m is not None, "the coordinator prints its address: %r" % line.strip())
        self.addr = m.group(1)
        channel = self.grpc.insecure_channel(self.addr)
        self.svc = self.cgrpc.SweepServiceStub(channel)
        return self.addr

    def start_worker(self, name, ckpt_root=None, extra_args=()):
        workdir = os.path.join(self.tmp, name)
        root = ckpt_root or os.path.join(self.tmp, "ckpt")
        p = self._start([self.worker_bin, "--coordinator", self.addr, "--slots", "1", "--kind", "cpu",
                         "--workdir", workdir, "--checkpoint-root", root, "--train-binary", self.train,
                         "--threads-per-rank", "1", "--hostname", name, "--worker-id", name, "--verbose"]
                        + list(extra_args), name + ".log")
        self.workers[name] = (p, workdir)
        return p

    def submit(self, text, name="sweep.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        sub = subprocess.run([self.client, "--coordinator", self.addr, "submit", path], capture_output=True,
                             text=True, timeout=60)
        check(sub.returncode == 0, "rdattn submit: %s %s" % (sub.stdout.strip(), sub.stderr.strip()))
        return re.search(r"(sw-[0-9a-zA-Z-]+)", sub.stdout).group(1)

    def status(self, sid):
        for _ in range(100):
            try:
                return self.svc.GetSweep(self.cpb.GetSweepRequest(sweep_id=sid), timeout=10).sweep
            except self.grpc.RpcError:
                time.sleep(0.2)  # the coordinator is restarting
        raise AssertionError("GetSweep kept failing")

    def wait(self, sid, pred, what, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.status(sid)
            if pred(st):
                return st
            time.sleep(0.1)
        raise AssertionError("timed out waiting for: %s" % what)

    def wait_terminal(self, sid, timeout=900):
        terminal = (self.spb.SWEEP_STATE_SUCCEEDED, self.spb.SWEEP_STATE_FAILED, self.spb.SWEEP_STATE_CANCELLED)
        return self.wait(sid, lambda st: st.state in terminal, "the sweep to end", timeout)

    def events(self, sid):
        """{job_id: [MetricEvent]} in stream order, the whole history of the sweep."""
        out = {}
        for resp in self.svc.WatchSweep(self.cpb.WatchSweepRequest(sweep_id=sid, after_seq=0), timeout=60):
            ev = resp.event
            if ev.HasField("metric_event"):
                out.setdefault(ev.metric_event.job_id, []).append(ev.metric_event)
            if ev.HasField("sweep_state_change") and ev.sweep_state_change.to_state in (
                    self.spb.SWEEP_STATE_SUCCEEDED, self.spb.SWEEP_STATE_FAILED, self.spb.SWEEP_STATE_CANCELLED):
                break
        return out

    def baseline(self, run_spec, name):
        """val NLL per milestone and the test NLL of an uninterrupted standalone run of run_spec."""
        spec = self.rpb.RunSpec()
        spec.CopyFrom(run_spec)
        spec.checkpoint.dir = os.path.join(self.tmp, "baseline", name, "ckpt")
        spec.parallel.threads_per_rank = 1
        os.makedirs(os.path.dirname(spec.checkpoint.dir), exist_ok=True)
        job = os.path.join(self.tmp, "baseline", name, "job.json")
        with open(job, "w") as f:
            f.write(self.json_format.MessageToJson(spec, preserving_proto_field_name=True))
        events = os.path.join(self.tmp, "baseline", name, "events.jsonl")
        p = subprocess.run([self.train, "train", "--job", job, "--events", events], capture_output=True, text=True,
                           timeout=600, env=self.env)
        check(p.returncode == 0, "baseline run of %s: %s" % (name, p.stderr.strip()[-300:]))
        with open(events) as f:
            evs = [json.loads(line) for line in f if line.strip()]
        vals = {e["milestone_tokens"]: e["val_nll"] for e in evs if e["kind"] == "KIND_EVAL"}
        test = [e["test_nll"] for e in evs if e["kind"] == "KIND_FINISHED"][0]
        return vals, test

    def results(self, metric_events):
        """The results the coordinator stored: (val NLL per milestone (latest), test NLL)."""
        K = self.rpb.MetricEvent
        vals, test = {}, None
        for e in metric_events:
            if e.kind == K.KIND_EVAL:
                vals[e.milestone_tokens or e.tokens] = e.val_nll
            if e.kind == K.KIND_FINISHED and e.eval_tokens > 0:
                test = e.test_nll
        return vals, test

    def check_results_equal_baseline(self, st, events, jobs=None):
        for j in st.jobs:
            if jobs is not None and j.job.job_id not in jobs:
                continue
            jid = j.job.job_id
            vals, test = self.results(events.get(jid, []))
            check(sorted(vals) == MILESTONES, "%s: a val NLL stored for every milestone %s" % (jid, sorted(vals)))
            check(test is not None, "%s: its test NLL is stored" % jid)
            want_vals, want_test = self.baseline(j.job.run, jid.replace("/", "_"))
            diffs = {m: vals[m] - want_vals[m] for m in MILESTONES}
            check(all(vals[m] == want_vals[m] for m in MILESTONES) and test == want_test,
                  "%s: every val NLL and the test NLL are bitwise equal to the uninterrupted run (final val NLL "
                  "%.17g vs %.17g, test %.17g vs %.17g, diffs %s)" % (jid, vals[MILESTONES[-1]],
                                                                      want_vals[MILESTONES[-1]], test, want_test,
                                                                      diffs))
            check(j.last_val_nll == want_vals[MILESTONES[-1]], "%s: the job's last_val_nll is the final one" % jid)

    def kill_worker(self, name):
        """kill -9 of a worker; returns (its ranks' pids, the kill time)."""
        p, workdir = self.workers[name]
        ranks = ranks_under(workdir)
        p.kill()
        t0 = time.time()
        p.wait()
        return ranks, t0

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 30
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
        for _, workdir in self.workers.values():
            for pid in ranks_under(workdir):
                os.kill(pid, signal.SIGKILL)

    def dump_logs(self):
        for path in self.logs:
            try:
                with open(path) as f:
                    text = f.read()
            except OSError:
                continue
            print("----- %s (last 60 lines)" % os.path.basename(path))
            print("\n".join(text.splitlines()[-60:]))


def job_of_worker(st, worker):
    for j in st.jobs:
        if j.worker_id == worker and j.lease_id:
            return j
    return None


def wait_both_running(c, sid, min_step=15):
    def ok(st):
        return len(st.jobs) == 2 and all(j.state == c.spb.JOB_STATE_RUNNING and j.step >= min_step for j in st.jobs)
    return c.wait(sid, ok, "both jobs running past step %d" % min_step, 300)


def wait_ranks_gone(ranks, t0, limit=30):
    while time.time() - t0 < limit and any(alive(r) for r in ranks):
        time.sleep(0.02)
    return time.time() - t0


def two_workers_running(c, roots=(None, None)):
    """A coordinator, workers w0 and w1 (checkpoint roots `roots`) and the sweep, both jobs past
    step 15. Returns (sweep id, the status then, w0's job)."""
    c.start_coordinator()
    c.start_worker("w0", ckpt_root=roots[0])
    c.start_worker("w1", ckpt_root=roots[1])
    sid = c.submit(sweep_yaml(c.data))
    st = wait_both_running(c, sid)
    victim = job_of_worker(st, "w0")
    check(victim is not None, "w0 runs a job (%s)" % (victim.job.job_id if victim else None))
    return sid, st, victim


def scenario_worker_kill(c):
    sid, st, victim = two_workers_running(c)
    step_at_kill = victim.step
    ranks, t0 = c.kill_worker("w0")
    check(len(ranks) == 1, "w0 had one rank running (%s)" % ranks)
    detect = wait_ranks_gone(ranks, t0)
    print("detection: the killed worker's rank stopped %.2f s after kill -9 of the worker" % detect)
    check(not any(alive(r) for r in ranks), "the rank died with its worker within %.2f s (goal < 60 s)" % detect)
    check(detect < 10, "it stopped within 10 s")
    ckpt = os.path.join(c.tmp, "ckpt")
    frozen = {p: v for p, v in tree_state(ckpt).items() if victim.job.job_id.replace("/", "_") in p}
    # A second worker takes the job once its lease expires (6 s).
    c.start_worker("w2")
    done = c.wait_terminal(sid)
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" % c.spb.SweepState.Name(done.state))
    j = [x for x in done.jobs if x.job.job_id == victim.job.job_id][0]
    check(j.state == c.spb.JOB_STATE_SUCCEEDED and j.attempts == 2 and j.worker_id != "w0",
          "the killed job SUCCEEDED on another worker in attempt 2 (attempts %d, worker %s)" % (j.attempts,
                                                                                                j.worker_id))
    check("lease expired" in j.failure_reason, "its first attempt is recorded as an expired lease: %s" %
          j.failure_reason[:120])
    events = c.events(sid)
    K = c.rpb.MetricEvent
    inits = [e for e in events[j.job.job_id] if e.kind == K.KIND_INIT]
    # The rank trained on a little between the status read and the kill; its last checkpoints
    # may not have reached the coordinator, but every one it wrote is on the shared root.
    stored = [e.step for e in events[j.job.job_id] if e.kind == K.KIND_CHECKPOINT and e.attempt == 1]
    check(len(inits) == 2 and inits[1].attempt == 2 and stored and max(stored) <= inits[1].step < STEPS,
          "attempt 2 resumed from attempt 1's newest checkpoint (step %d; the job was at step %d shortly "
          "before the kill, its last stored checkpoint event at step %d)" %
          (inits[1].step, step_at_kill, max(stored) if stored else -1))
    # Nothing of attempt 1 was written after its worker died: every file it had is unchanged
    # or replaced by attempt 2 only after attempt 2 claimed the directory.
    fence2 = [p for p in tree_state(ckpt) if p.endswith("attempt-2.fence")]
    check(len(fence2) == 1, "attempt 2 claimed the checkpoint directory (%s)" % fence2)
    claim = os.stat(fence2[0]).st_mtime_ns
    final = {p: v for p, v in tree_state(ckpt).items() if victim.job.job_id.replace("/", "_") in p}
    late = [p for p, (_, mt) in final.items() if mt < claim and (p not in frozen or frozen[p][1] != mt)]
    check(not late, "no file was written between the rank's death and attempt 2's claim (%s)" % late)
    c.check_results_equal_baseline(done, events)


def scenario_coordinator_kill(c):
    sid, _, _ = two_workers_running(c)
    addr = c.addr
    c.coord.kill()
    c.coord.wait()
    time.sleep(2)
    c.start_coordinator(listen=addr)
    check(c.addr == addr, "the coordinator restarted on the same file and port %s" % addr)
    t_restart = time.time()
    done = c.wait_terminal(sid)
    print("the sweep ended %.1f s after the coordinator restart" % (time.time() - t_restart))
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" % c.spb.SweepState.Name(done.state))
    for j in done.jobs:
        check(j.attempts == 1 and not j.failure_reason,
              "%s: no lease expired, one attempt (attempts %d, reason %r)" % (j.job.job_id, j.attempts,
                                                                             j.failure_reason[:100]))
    events = c.events(sid)
    K = c.rpb.MetricEvent
    for j in done.jobs:
        evs = events[j.job.job_id]
        seqs = [e.seq for e in evs]
        check(seqs == list(range(1, len(seqs) + 1)), "%s: every event of the attempt is stored once, in order "
              "(seq 1..%d)" % (j.job.job_id, len(seqs)))
        steps = [e.step for e in evs if e.kind == K.KIND_TRAIN_STEP]
        check(steps == list(range(1, STEPS + 1)), "%s: train steps 1..%d, none lost" % (j.job.job_id, STEPS))
    c.check_results_equal_baseline(done, events)
    import datetime
    for w in ("w0", "w1"):
        log = open(os.path.join(c.tmp, w + ".log")).read()
        back = [l for l in log.splitlines() if "the coordinator answers again" in l]
        check("cannot be reached" in log and back, "%s noticed the coordinator was gone and back (its log says so)" % w)
        at = datetime.datetime.strptime(back[0].split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        print("reconnect: %s reached the restarted coordinator %.2f s after its restart" % (w, at - t_restart))
        check(at - t_restart < 6, "%s reconnected within the restart grace (one lease period, 6 s)" % w)


def scenario_preempt(c):
    sid, st, victim = two_workers_running(c)
    p, workdir = c.workers["w0"]
    ranks = ranks_under(workdir)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    check(rc == 0, "the worker exits 0 after SIGTERM (got %d)" % rc)
    check(not any(alive(r) for r in ranks), "its rank stopped")
    mid = c.status(sid)
    j = [x for x in mid.jobs if x.job.job_id == victim.job.job_id][0]
    check(j.state == c.spb.JOB_STATE_PENDING, "the preempted job is PENDING again at once (%s)" %
          c.spb.JobState.Name(j.state))
    c.start_worker("w2")
    done = c.wait_terminal(sid)
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED")
    j = [x for x in done.jobs if x.job.job_id == victim.job.job_id][0]
    check(j.attempts == 2 and not j.failure_reason, "the preemption is no failure (attempts %d, reason %r)" %
          (j.attempts, j.failure_reason[:100]))
    events = c.events(sid)
    K = c.rpb.MetricEvent
    ck = [e for e in events[j.job.job_id] if e.kind == K.KIND_CHECKPOINT and e.attempt == 1]
    inits = [e for e in events[j.job.job_id] if e.kind == K.KIND_INIT]
    check(ck and inits[-1].step == ck[-1].step, "attempt 2 resumed at the step attempt 1 checkpointed on SIGTERM "
          "(%d)" % inits[-1].step)
    c.check_results_equal_baseline(done, events)


def scenario_unshared_root(c):
    root0 = os.path.join(c.tmp, "node0-ckpt")
    sid, st, victim = two_workers_running(c, (root0, os.path.join(c.tmp, "node1-ckpt")))
    ranks, t0 = c.kill_worker("w0")
    wait_ranks_gone(ranks, t0)
    check(victim.last_checkpoint_path.startswith(root0), "the job's checkpoint lies on node 0 (%s)" %
          victim.last_checkpoint_path)
    shutil.move(root0, root0 + ".gone")  # the node's disk is gone with it
    c.start_worker("w2", ckpt_root=os.path.join(c.tmp, "node2-ckpt"))
    done = c.wait_terminal(sid)
    check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED")
    events = c.events(sid)
    K = c.rpb.MetricEvent
    j = [x for x in done.jobs if x.job.job_id == victim.job.job_id][0]
    warn = [e for e in events[j.job.job_id] if e.kind == K.KIND_WARNING]
    path = [e for e in events[j.job.job_id] if e.kind == K.KIND_CHECKPOINT and e.attempt == 1][-1].checkpoint_path
    check(warn and path in warn[0].warning and warn[0].attempt == 2,
          "a KIND_WARNING event of attempt 2 names the unreadable checkpoint: %s" %
          (warn[0].warning if warn else None))
    check(j.worker_id != "w0", "attempt 2 ran on another worker (%s)" % j.worker_id)
    log = open(os.path.join(c.tmp, j.worker_id + ".log")).read()
    check(path in log and "not readable" in log, "%s's log names the path it cannot read" % j.worker_id)
    inits = [e for e in events[j.job.job_id] if e.kind == K.KIND_INIT]
    check(inits[-1].step == 0, "attempt 2 trained from step 0")
    c.check_results_equal_baseline(done, events)


def scenario_crash_loop(c):
    c.start_coordinator()
    c.start_worker("w0")
    sid = c.submit(sweep_yaml(c.data, max_attempts=2))
    events_seen = c.wait(sid, lambda st: any(j.state == c.spb.JOB_STATE_RUNNING and j.step >= 1 for j in st.jobs),
                         "the first job to run", 300)
    first = [j for j in events_seen.jobs if j.state == c.spb.JOB_STATE_RUNNING][0].job.job_id
    # Bad data: a shard that matches the sweep's glob, with a wrong magic number.
    bad = os.path.join(c.data, "f_train_999999.bin")
    with open(bad, "wb") as f:
        f.write(b"\x00" * 2048)
    done = c.wait_terminal(sid)
    by_id = {j.job.job_id: j for j in done.jobs}
    other = [k for k in by_id if k != first][0]
    print("first job %s: %s; other %s: %s after %d attempts" % (
        first, c.spb.JobState.Name(by_id[first].state), other, c.spb.JobState.Name(by_id[other].state),
        by_id[other].attempts))
    check(by_id[first].state == c.spb.JOB_STATE_SUCCEEDED, "the job that had started SUCCEEDED")
    check(by_id[other].state == c.spb.JOB_STATE_FAILED and by_id[other].attempts == 2,
          "the job that kept crashing is FAILED after max_attempts = 2 (attempts %d)" % by_id[other].attempts)
    reason = by_id[other].failure_reason
    check("f_train_999999.bin" in reason and "stderr" in reason,
          "its failure reason quotes the stderr naming the bad shard: %s" % reason[:300].replace("\n", " | "))
    check(done.state == c.spb.SWEEP_STATE_FAILED, "the sweep is FAILED (one job failed)")
    events = c.events(sid)
    os.remove(bad)  # for the baseline run
    c.check_results_equal_baseline(done, events, jobs={first})


def run(scenarios):
    """The main of every faults script: --bin, --pystubs and --scenario (a key of `scenarios`),
    then scenarios[name](cluster) on a fresh Cluster; every process is stopped and the
    cluster's cleanups run (in reverse order) whatever happens, the logs are dumped on failure
    and the temporary folder is removed on success."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", required=True, help="folder with the generated Python gRPC stubs")
    ap.add_argument("--scenario", required=True, choices=sorted(scenarios))
    args = ap.parse_args()
    c = Cluster(args, args.scenario)
    t0 = time.time()
    ok = False
    try:
        scenarios[args.scenario](c)
        ok = True
    finally:
        c.stop_all()
        if not ok:
            c.dump_logs()
        for fn in reversed(c.cleanups):
            fn()
    print("scenario %s passed in %.1f s" % (args.scenario, time.time() - t0))
    shutil.rmtree(c.tmp, ignore_errors=True)


if __name__ == "__main__":
    run({name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")})
