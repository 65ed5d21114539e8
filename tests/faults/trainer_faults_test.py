#!/usr/bin/python3
"""Faults of one rdattn-train rank, with real processes (docs/operations.md "Fencing", "A full disk").

Each --scenario is one ctest test (faults_<scenario>):

  checkpoint_full  the checkpoint root is a tiny tmpfs that fills at the second checkpoint: the
                   rank exits 74 with a message naming the checkpoint and "No space left on
                   device", leaves no temporary file, says so in its KIND_FAILED event, and the
                   previous checkpoint loads; with room again the job resumes from it and its val
                   and test NLL are bitwise those of an uninterrupted run
  events_full      the events file cannot be written (/dev/full): exit 74, one clear stderr line
  checkpoint_readonly  the checkpoint root is read-only (EROFS): exit 74 at the first checkpoint
                   (standalone) or at the claim (attempt 1), naming the path
  checkpoint_full_worker  the full checkpoint root through a worker (coordinator, two workers)
  fence_window     attempt 1 paused between its fence check and the rename of its checkpoint;
                   attempt 2 claims the directory and writes the same step's checkpoint; attempt
                   1 resumes: attempt 2's files are byte for byte unchanged, attempt 1 left
                   nothing and stops, fenced
  fenced_event     attempt 1 paused, a newer claim, attempt 1 resumes: its events file gets no
                   new line (no KIND_FAILED "fenced"), its stderr says it is fenced

--pause picks how attempt 1 is paused: `failpoint` (RDATTN_FAILPOINT=checkpoint-before-rename:stop,
the default), `strace` (strace delays its rename by 30 s: the same window, for a binary without the
failpoint) or `sigstop` (the test stops the rank itself after a few steps; fenced_event only).
The tmpfs needs root (mount -t tmpfs); it is unmounted at the end, pass or fail.
"""
import argparse
import hashlib
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
sys.path.insert(0, HERE)
from trainer_cli_test import corpus, write_shard  # noqa: E402

STEPS = 40
CKPT_BYTES = 1_600_000  # a tiny-preset checkpoint is 1.53 MB (measured); the tmpfs holds one


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print("ok:", msg, flush=True)


def read_events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(d):
    return {n: digest(os.path.join(d, n)) for n in sorted(os.listdir(d))} if os.path.isdir(d) else {}


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


class Env:
    def __init__(self, args):
        self.train = os.path.join(args.bin, "worker", "trainer", "rdattn-train")
        self.pause = args.pause
        self.tmp = tempfile.mkdtemp(prefix="rdattn-trainer-faults-")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        write_shard(os.path.join(self.data, "t_train_000000.bin"), corpus(1, 300, 60))
        write_shard(os.path.join(self.data, "t_val_000000.bin"), corpus(2, 20, 60))
        write_shard(os.path.join(self.data, "t_test_000000.bin"), corpus(3, 20, 60))
        self.mounts = []
        self.procs = []

    def job(self, name, ckpt_dir, every=10, keep_last=1, world=1):
        spec = {
            "run_id": name, "job_id": name, "init_seed": 5,
            "model": {"preset": "tiny", "arm": "rd"},
            "data": {"train_shards": [os.path.join(self.data, "t_train_*.bin")],
                     "val_shards": [os.path.join(self.data, "t_val_000000.bin")],
                     "test_shards": [os.path.join(self.data, "t_test_000000.bin")],
                     "tokenizer": "byte", "data_seed": 11, "val_windows": 16, "test_windows": 16},
            "optim": {"peak_lr": 3e-3, "warmup_steps": 4},
            "schedule": {"total_tokens": STEPS * 512, "global_batch_tokens": 512,
                         "micro_batch_sequences": 2, "milestones_tokens": [20 * 512, 40 * 512]},
            "parallel": {"world_size": world, "threads_per_rank": 1, "precision": "fp32"},
            "checkpoint": {"dir": ckpt_dir, "keep_last": keep_last, "every_steps": every},
        }
        os.makedirs(os.path.join(self.tmp, name), exist_ok=True)
        path = os.path.join(self.tmp, name, "job.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def cmd(self, job, events, attempt=0, extra=()):
        c = [self.train, "train", "--job", job, "--events", events] + list(extra)
        return c + (["--attempt", str(attempt)] if attempt else [])

    def run(self, job, events, attempt=0, extra=(), env=None):
        return subprocess.run(self.cmd(job, events, attempt, extra), capture_output=True, text=True,
                              timeout=600, env=env)

    def start(self, argv, env=None):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.procs.append(p)
        return p

    def mount_tmpfs(self, path, size):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", path], check=True)
        self.mounts.append(path)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait(timeout=30)
                except Exception:  # noqa: BLE001 - best effort
                    pass
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def results(events):
    ev = read_events(events)
    vals = {e["milestone_tokens"]: e["val_nll"] for e in ev if e["kind"] == "KIND_EVAL"}
    test = [e["test_nll"] for e in ev if e["kind"] == "KIND_FINISHED"]
    return vals, test


def scenario_checkpoint_full(env):
    # The uninterrupted run, on an ordinary disk.
    straight_ev = os.path.join(env.tmp, "straight.jsonl")
    p = env.run(env.job("straight", os.path.join(env.tmp, "straight", "ckpt")), straight_ev)
    check(p.returncode == 0, "the uninterrupted run finishes (exit %d)" % p.returncode)
    # The checkpoint root: a tmpfs with room for one checkpoint and a half. Step 10's checkpoint
    # fits; step 20's temporary file fills it.
    root = os.path.join(env.tmp, "root")
    env.mount_tmpfs(root, int(CKPT_BYTES * 1.5))
    ckpt = os.path.join(root, "full")
    job = env.job("full", ckpt)
    events = os.path.join(env.tmp, "full.jsonl")
    t0 = time.time()
    p = env.run(job, events, attempt=1)
    err = p.stderr
    print("exit %d after %.1f s; stderr tail:\n%s" % (p.returncode, time.time() - t0, err[-1500:]))
    check(p.returncode == 74,
          "a checkpoint that cannot be written: exit 74, the machine's failure (got %d%s)" %
          (p.returncode, ", SIGABRT" if p.returncode == -signal.SIGABRT else ""))
    check("Aborted" not in err and "terminate called" not in err and "Exception raised from" not in err,
          "no abort and no backtrace on stderr")
    line = [ln for ln in err.splitlines() if "No space left on device" in ln]
    want = os.path.join(ckpt, "ckpt_step_00000020.attempt-1.pt")
    check(line and want in line[0], "stderr names the checkpoint %s and 'No space left on device': %s" %
          (want, line[:1]))
    left = sorted(os.listdir(ckpt))
    check(not [n for n in left if ".tmp." in n], "no temporary file is left (%s)" % left)
    prev = os.path.join(ckpt, "ckpt_step_00000010.attempt-1.pt")
    check(os.path.exists(prev), "the previous checkpoint (step 10) is still there: %s" % left)
    failed = [e for e in read_events(events) if e["kind"] == "KIND_FAILED"]
    check(failed and "No space left on device" in failed[-1]["error"] and prev in failed[-1]["error"],
          "the KIND_FAILED event says why and names the checkpoint to resume from: %s" %
          (failed[-1]["error"] if failed else None))
    p = subprocess.run([env.train, "eval", "--checkpoint", prev, "--shard",
                        os.path.join(env.data, "t_val_000000.bin"), "--windows", "4"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and '"nll"' in p.stdout, "the previous checkpoint loads (eval: %s)" %
          (p.stdout.strip() or p.stderr.strip()[-300:]))
    # Two ranks under mpirun: every rank learns that rank 0's checkpoint failed for the machine, and
    # mpirun passes 74 on.
    mpirun = shutil.which("mpirun")
    check(mpirun is not None, "mpirun is on PATH (%s)" % mpirun)
    job2 = env.job("full2", os.path.join(root, "full2"), world=2)
    mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_plm="isolated")
    subprocess.run(["rm", "-rf", os.path.join(root, "full2")], check=True)
    p = subprocess.run([mpirun, "-np", "2", "--oversubscribe"] +
                       env.cmd(job2, os.path.join(env.tmp, "full2.jsonl"), 1),
                       capture_output=True, text=True, timeout=600, env=mpi_env)
    check(p.returncode == 74 and "No space left on device" in p.stderr,
          "2 ranks under mpirun: exit 74 and the reason (got %d)" % p.returncode)
    subprocess.run(["rm", "-rf", os.path.join(root, "full2")], check=True)
    # Room again (the operator freed space): the next attempt resumes from step 10 and its results
    # are bitwise the uninterrupted run's.
    subprocess.run(["mount", "-o", "remount,size=%d" % (CKPT_BYTES * 8), root], check=True)
    p = env.run(job, events, attempt=2)
    check(p.returncode == 0, "with room again the job resumes and finishes (exit %d: %s)" %
          (p.returncode, p.stderr[-300:]))
    inits = [e for e in read_events(events) if e["kind"] == "KIND_INIT"]
    check(inits[-1]["step"] == 10, "attempt 2 resumed from step 10 (INIT step %s)" % inits[-1]["step"])
    sv, st = results(straight_ev)
    rv, rt = results(events)
    check(sorted(sv) == [20 * 512, 40 * 512] and sv == rv and st == rt and len(st) == 1,
          "val NLL at both milestones and the test NLL are bitwise equal to the uninterrupted run "
          "(%r %r vs %r %r)" % (sv, st, rv, rt))
    # keep_last 1 across attempts: attempt 2 pruned attempt 1's step 10; the milestones stay.
    left = sorted(n for n in os.listdir(ckpt) if n.startswith("ckpt_step_"))
    check(left == ["ckpt_step_000000%d0.attempt-2.pt" % s for s in (2, 3, 4)],
          "keep_last 1 holds across attempts: the milestones (20, 40) and the newest (30) stay, "
          "attempt 1's step 10 is pruned (%s)" % left)


def scenario_events_full(env):
    job = env.job("evfull", os.path.join(env.tmp, "evfull", "ckpt"))
    p = env.run(job, "/dev/full")
    print("exit %d; stderr tail:\n%s" % (p.returncode, p.stderr[-800:]))
    check(p.returncode == 74, "an events file that cannot be written: exit 74 (got %d)" % p.returncode)
    check(re.search(r"--events /dev/full: .*No space left on device", p.stderr),
          "stderr names the events file and 'No space left on device'")
    ck = os.path.join(env.tmp, "evfull", "ckpt")
    steps = sorted(n for n in os.listdir(ck) if n.startswith("ckpt_step_")) if os.path.isdir(ck) else []
    check(steps == ["ckpt_step_00000001.pt"],
          "it stopped at the end of the step whose event it could not write, after a checkpoint, as "
          "on SIGTERM (%s)" % steps)
    # Two ranks: rank 0 votes to stop, every rank stops and exits 74 (rank 0 alone leaving would
    # leave the others waiting in a collective and itself in MPI_Finalize).
    mpirun = shutil.which("mpirun")
    check(mpirun is not None, "mpirun is on PATH (%s)" % mpirun)
    job2 = env.job("evfull2", os.path.join(env.tmp, "evfull2", "ckpt"), world=2)
    mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_plm="isolated")
    t0 = time.time()
    try:
        p = subprocess.run([mpirun, "-np", "2", "--oversubscribe"] + env.cmd(job2, "/dev/full"),
                           capture_output=True, text=True, timeout=120, env=mpi_env)
        code, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        code, err = "a hang (killed after 120 s)", (e.stderr or b"").decode(errors="replace")
    check(code == 74 and "No space left on device" in err,
          "2 ranks under mpirun: exit 74 in %.1f s (got %s)" % (time.time() - t0, code))


def scenario_checkpoint_readonly(env):
    """A checkpoint root that went read-only (EROFS, as a file system does after disk errors): exit
    74 naming the path, whether the first write is a checkpoint (standalone) or the claim."""
    root = os.path.join(env.tmp, "ro")
    env.mount_tmpfs(root, CKPT_BYTES * 4)
    for sub in ("standalone", "claimed"):
        os.makedirs(os.path.join(root, sub))
    subprocess.run(["mount", "-o", "remount,ro", root], check=True)
    p = env.run(env.job("ro0", os.path.join(root, "standalone")), os.path.join(env.tmp, "ro0.jsonl"))
    print("standalone: exit %d; %s" % (p.returncode, p.stderr.strip()[-400:]))
    check(p.returncode == 74 and "Read-only file system" in p.stderr and
          os.path.join(root, "standalone", "ckpt_step_00000010.pt") in p.stderr,
          "a checkpoint on a read-only root: exit 74 naming it and 'Read-only file system' (got %d)" %
          p.returncode)
    p = env.run(env.job("ro1", os.path.join(root, "claimed")), os.path.join(env.tmp, "ro1.jsonl"),
                attempt=1)
    print("attempt 1: exit %d; %s" % (p.returncode, p.stderr.strip()[-400:]))
    check(p.returncode == 74 and "Read-only file system" in p.stderr and
          os.path.join(root, "claimed", "attempt-1.fence") in p.stderr,
          "the claim on a read-only root: exit 74 naming the marker (got %d)" % p.returncode)


def paused_attempt(env, job, events, attempt):
    """Starts `attempt` and returns it paused between its fence check and its checkpoint's rename."""
    ckpt = json.load(open(job))["checkpoint"]["dir"]
    argv = env.cmd(job, events, attempt)
    e = dict(os.environ)
    if env.pause == "failpoint":
        e["RDATTN_FAILPOINT"] = "checkpoint-before-rename:stop"
        p = env.start(argv, env=e)
        deadline = time.time() + 180
        while time.time() < deadline and proc_state(p.pid) not in ("T", "gone"):
            time.sleep(0.05)
        check(proc_state(p.pid) == "T", "attempt %d stopped itself at checkpoint-before-rename (state %s)" %
              (attempt, proc_state(p.pid)))
    elif env.pause == "strace":
        sc = ["rename", "renameat", "renameat2"]
        argv = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + ",".join(sc),
                "-e", "inject=%s:delay_enter=30000000" % ",".join(sc)] + argv
        p = env.start(argv, env=e)
        deadline = time.time() + 180
        while time.time() < deadline and p.poll() is None and not (
                os.path.isdir(ckpt) and [n for n in os.listdir(ckpt) if ".tmp." in n]):
            time.sleep(0.02)
        time.sleep(0.5)  # its fsync done, into the delayed rename
        check(p.poll() is None, "attempt %d is held in its first rename for 30 s" % attempt)
    else:  # sigstop: after a few steps, wherever it is
        p = env.start(argv, env=e)
        deadline = time.time() + 180
        while time.time() < deadline and len([x for x in read_events(events)
                                               if x["kind"] == "KIND_TRAIN_STEP"]) < 5:
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGSTOP)
        while proc_state(p.pid) != "T":
            time.sleep(0.01)
        check(True, "attempt %d stopped by the test after 5 steps" % attempt)
    return p


def resume_paused(env, p):
    if env.pause != "strace":
        os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=300)
    return p.returncode, err


def scenario_fence_window(env):
    ckpt = os.path.join(env.tmp, "window", "ckpt")
    job = env.job("window", ckpt)
    ev1 = os.path.join(env.tmp, "window", "a1.jsonl")
    ev2 = os.path.join(env.tmp, "window", "a2.jsonl")
    a1 = paused_attempt(env, job, ev1, 1)
    before = snapshot(ckpt)
    print("attempt 1 paused; checkpoint dir: %s" % sorted(before))
    # Attempt 2 claims the directory and writes the same step's checkpoint (step 10), then stops.
    p = env.run(job, ev2, attempt=2, extra=["--stop-after-steps", "10"])
    check(p.returncode == 75, "attempt 2 claims, trains 10 steps, checkpoints and stops (exit %d: %s)" %
          (p.returncode, p.stderr[-300:]))
    mine = snapshot(ckpt)
    ours = [n for n in mine if n.startswith("ckpt_step_00000010")]
    check(ours, "attempt 2 wrote step 10's checkpoint: %s" % sorted(mine))
    n1 = len(read_events(ev1))
    code, err = resume_paused(env, a1)
    after = snapshot(ckpt)
    print("attempt 1 exit %d; stderr tail:\n%s" % (code, err[-600:]))
    theirs = {n: d for n, d in mine.items() if n not in before}  # attempt 2's files
    changed = [n for n in theirs if after.get(n) != theirs[n]]
    check(not changed, "attempt 2's files are byte for byte unchanged after attempt 1 went on (changed: %s)" %
          changed)
    left = sorted(set(after) - set(theirs))
    check(left == ["attempt-1.fence"], "attempt 1 left nothing but its claim (%s)" % left)
    check(code != 0 and "fenced" in err and "AddressSanitizer" not in err,
          "attempt 1 stops, saying it is fenced (exit %d)" % code)
    check(len(read_events(ev1)) == n1, "attempt 1 wrote no event after attempt 2's claim (%d -> %d)" %
          (n1, len(read_events(ev1))))


def scenario_fenced_event(env):
    ckpt = os.path.join(env.tmp, "fevent", "ckpt")
    job = env.job("fevent", ckpt)
    events = os.path.join(env.tmp, "fevent", "events.jsonl")
    a1 = paused_attempt(env, job, events, 1)
    n0 = len(read_events(events))
    with open(os.path.join(ckpt, "attempt-2.fence"), "w") as f:  # the newer attempt's claim
        f.write("newer\n")
    code, err = resume_paused(env, a1)
    lines = read_events(events)
    print("attempt 1 exit %d; events %d -> %d; stderr tail:\n%s" % (code, n0, len(lines), err[-800:]))
    check(code != 0 and "fenced" in err, "the fenced rank stops and says so on stderr (exit %d)" % code)
    report = [ln for ln in err.splitlines()
              if re.search(r"ERROR: AddressSanitizer|SUMMARY:|^\s+#[0-7] |is located in|READ of", ln)]
    check(not report, "no sanitizer report" + "".join("\n" + ln for ln in report[:24]))
    check(len(lines) == n0, "its events file gets no line after the newer claim (%d -> %d: %s)" %
          (n0, len(lines), [e["kind"] + ":" + e.get("error", "")[:60] for e in lines[n0:]]))


def scenario_checkpoint_full_worker(env, args):
    """Through a worker: w0's checkpoint root is a tmpfs that holds one checkpoint and a half. Its
    rank exits 74 at its second checkpoint; the worker reports the machine's failure (not the
    job's); a healthy worker w1 takes the job, resumes from w0's last checkpoint and the sweep
    SUCCEEDS with results bitwise equal to an uninterrupted run."""
    from faults_test import Cluster, sweep_yaml  # noqa: E402  (needs the gRPC stubs)
    c = Cluster(args, "ckfull")
    ok = False
    try:
        root0 = os.path.join(c.tmp, "node0-ckpt")
        env.mount_tmpfs(root0, int(CKPT_BYTES * 1.5))
        c.start_coordinator()
        c.start_worker("w0", ckpt_root=root0)
        sid = c.submit(sweep_yaml(c.data))
        log0 = os.path.join(c.tmp, "w0.log")
        deadline = time.time() + 300
        while time.time() < deadline:
            st = c.status(sid)
            if any(getattr(j, "machine_failures", 0) > 0 or j.attempts > 1 or j.state == c.spb.JOB_STATE_FAILED
                   for j in st.jobs):
                break
            time.sleep(0.2)
        for j in st.jobs:
            print("%s: %s attempts %d machine_failures %d reason %r" % (
                j.job.job_id, c.spb.JobState.Name(j.state), j.attempts, getattr(j, "machine_failures", 0),
                j.failure_reason[:300]))
        hit = [j for j in st.jobs if getattr(j, "machine_failures", 0) > 0]
        check(hit, "a job's attempt on w0 ended as the machine's failure (machine_failures > 0)")
        text = hit[0].failure_reason + open(log0).read()
        check("No space left on device" in text and root0 in text,
              "the reason names the checkpoint on w0's root and 'No space left on device'")
        c.start_worker("w1", ckpt_root=os.path.join(c.tmp, "node1-ckpt"))
        done = c.wait_terminal(sid)
        check(done.state == c.spb.SWEEP_STATE_SUCCEEDED, "the sweep SUCCEEDED (%s)" %
              c.spb.SweepState.Name(done.state))
        for j in done.jobs:
            check(j.attempts - getattr(j, "machine_failures", 0) <= 1,
                  "%s: the full disk used up no attempt (attempts %d, machine failures %d)" %
                  (j.job.job_id, j.attempts, getattr(j, "machine_failures", 0)))
        tmp_left = [n for _, _, fs in os.walk(root0) for n in fs if ".tmp." in n]
        check(not tmp_left, "no temporary checkpoint file is left on w0's root (%s)" % tmp_left)
        c.check_results_equal_baseline(done, c.events(sid))
        ok = True
    finally:
        c.stop_all()
        if not ok:
            c.dump_logs()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", default="", help="unused (the harness's flag)")
    ap.add_argument("--scenario", required=True,
                    choices=["checkpoint_full", "events_full", "fence_window", "fenced_event",
                             "checkpoint_full_worker", "checkpoint_readonly"])
    ap.add_argument("--pause", default="failpoint", choices=["failpoint", "strace", "sigstop"])
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Under an ASan build (build-asan), a use of a dead frame is reported, not read silently.
    asan = os.environ.get("ASAN_OPTIONS", "")
    os.environ["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_stack_use_after_return=1"
    env = Env(args)
    try:
        if args.scenario == "checkpoint_full_worker":
            scenario_checkpoint_full_worker(env, args)
        else:
            globals()["scenario_" + args.scenario](env)
    finally:
        env.cleanup()
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
