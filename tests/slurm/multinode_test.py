#!/usr/bin/python3
"""deploy/slurm/ on a real two-node Slurm: node1 and node2, each in its own network, UTS and mount
namespace on a veth bridge, slurmctld on a third (tests/slurm/cluster.py describes the layout).

Each --case is one ctest test, on a cluster of its own that is torn down at the end, pass or fail:

  train         deploy/slurm/train.sbatch with `sbatch -N 2 --ntasks-per-node 1`: one rdattn-train
                rank per node, first direct-launched by `srun --mpi=pmix` (RDATTN_LAUNCHER=srun),
                then by the fallback, OpenMPI's mpirun inside the allocation (the default): each
                run's ranks were on node1 and node2, world size 2, and every step's training loss
                equals the single-process run of the same job to 1e-4 relative (fp32), as
                tests/trainer's mpi_agreement compares them.
  sweep         submit-sweep.sh with RDATTN_WORKER_NODES=node1,node2: the coordinator job on
                node1, one worker job per node, a sweep of 6 jobs ends SUCCEEDED with jobs on both
                nodes' workers (worker ids read from each node's own node-local workdir),
                checkpoints in the shared root.
  node-failure  the same service, a sweep of two longer jobs, one per node; when node2's job has
                written a checkpoint, every process of node2 is SIGKILLed (munged, slurmd,
                slurmstepd, the worker job's processes, the ranks). Slurm marks node2 DOWN; the
                coordinator expires node2's lease (--lease-seconds 6) and requeues the job, which
                resumes on node1's worker from its last checkpoint (attempt 2's first step is the
                step after attempt 1's last checkpoint); the sweep ends SUCCEEDED with every val
                NLL and test NLL stored, the resumed job's bitwise equal to an uninterrupted run of
                its RunSpec. The times from the kill to the requeue (PENDING, from the
                coordinator's event times), to attempt 2 RUNNING, to its first step, to node2 DOWN
                in Slurm and to the sweep's end are printed.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
import cluster as clusterlib  # noqa: E402
from itest import check  # noqa: E402
from trainer_cli_test import corpus, write_shard  # noqa: E402

SKIP = 77  # ctest SKIP_RETURN_CODE: only when the machine cannot make namespaces at all


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def losses(events):
    return {e["step"]: e["train_loss"] for e in events if e.get("kind") == "KIND_TRAIN_STEP"}


def write_data(folder):
    os.makedirs(folder, exist_ok=True)
    write_shard(os.path.join(folder, "c_train_000000.bin"), corpus(1, 300, 60))
    write_shard(os.path.join(folder, "c_val_000000.bin"), corpus(2, 20, 60))
    write_shard(os.path.join(folder, "c_test_000000.bin"), corpus(3, 20, 60))
    return folder


class Test:
    def __init__(self, args, tmp, cl):
        self.args = args
        self.tmp = tmp
        self.cl = cl
        b = args.bin
        self.bin = {"coordinator": b + "/coordinator/rdattn-coordinator", "worker": b + "/worker/daemon/rdattn-worker",
                    "train": b + "/worker/trainer/rdattn-train", "client": b + "/client/rdattn"}
        self.shared = os.path.join(tmp, "shared")
        self.jobs_dir = os.path.join(self.shared, "jobs")  # where sbatch runs: job output files
        os.makedirs(self.jobs_dir, exist_ok=True)
        self.data = write_data(os.path.join(self.shared, "data"))

    def run_spec(self, name, world, steps, milestones=(), ckpt=None, every=0):
        spec = {
            "run_id": name, "init_seed": 5,
            "model": {"preset": "tiny", "arm": "rd"},
            "data": {"train_shards": [self.data + "/c_train_*.bin"], "val_shards": [self.data + "/c_val_000000.bin"],
                     "test_shards": [self.data + "/c_test_000000.bin"], "tokenizer": "byte", "data_seed": 11,
                     "val_windows": 8, "test_windows": 8},
            "optim": {"peak_lr": 3e-3, "warmup_steps": 4},
            "schedule": {"total_tokens": steps * 512, "global_batch_tokens": 512, "micro_batch_sequences": 2,
                         "milestones_tokens": list(milestones)},
            "parallel": {"world_size": world, "threads_per_rank": 1, "precision": "fp32"},
            "checkpoint": {"dir": ckpt or "", "keep_last": 2},
        }
        if every:
            spec["checkpoint"]["every_steps"] = every
        path = os.path.join(self.shared, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def job_env(self, **extra):
        env = dict(self.cl.env, RDATTN_BIN_DIR=self.args.bin, OMP_NUM_THREADS="1")
        env.update(extra)
        return env

    def sbatch(self, argv, env):
        p = self.cl.run(["sbatch", "--parsable"] + argv, env=env, cwd=self.jobs_dir)
        job = p.stdout.strip().split(";")[0]
        check(job.isdigit(), "sbatch %s: job %s" % (" ".join(argv), job))
        return job

    def wait_job_end(self, job, timeout):
        seen = set()

        def gone():
            st = self.cl.squeue().get(job)
            if st:
                seen.add(st)
            return st is None
        self.cl.wait("Slurm job %s to end" % job, gone, timeout)
        return seen

    # ---- train.sbatch on two nodes against one process
    def case_train(self):
        steps = 20
        ref_job = self.run_spec("ref", 1, steps)
        ref_events = os.path.join(self.shared, "ref-events.jsonl")
        t0 = time.time()
        p = subprocess.run([self.bin["train"], "train", "--job", ref_job, "--events", ref_events],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        check(p.returncode == 0, "single-process run of the job: exit 0 (%.1f s)%s"
              % (time.time() - t0, "" if p.returncode == 0 else p.stderr[-2000:]))
        ref = losses(read_events(ref_events))
        check(sorted(ref) == list(range(1, steps + 1)), "the single-process run logged steps 1..%d" % steps)
        job2 = self.run_spec("two", 2, steps)
        results = {}
        for launcher, extra in (("srun", {"RDATTN_LAUNCHER": "srun", "RDATTN_SRUN_MPI": "pmix"}),
                                ("mpirun", {})):
            out = os.path.join(self.shared, "train-" + launcher)
            env = self.job_env(RDATTN_TRAIN_JOB=job2, RDATTN_TRAIN_OUT=out, **extra)
            t0 = time.time()
            job = self.sbatch(["-N", "2", "--ntasks-per-node", "1", os.path.join(self.args.deploy, "train.sbatch")],
                              env)
            seen = self.wait_job_end(job, 180)
            took = time.time() - t0
            code_file = os.path.join(out, "exit_code")
            code = open(code_file).read().strip() if os.path.exists(code_file) else "missing"
            tlog = open(os.path.join(self.jobs_dir, "rdattn-train-%s.out" % job)).read()
            check(code == "0", "%s: train.sbatch job %s wrote exit_code 0 (%s; %.1f s)" % (launcher, job, code, took))
            check(any(s == "RUNNING" and n in ("node[1-2]", "node1,node2") for s, n in seen),
                  "%s: squeue showed job %s RUNNING on node1 and node2: %s" % (launcher, job, sorted(seen)))
            hosts = {}
            for r in (0, 1):
                with open(os.path.join(out, "rank%d.err" % r)) as f:
                    first = f.readline().strip()
                hosts[r] = first.rsplit(" ", 1)[-1] if first.startswith("train.sbatch: rank %d on " % r) else first
            check(sorted(hosts.values()) == ["node1", "node2"], "%s: one rank per node: %s" % (launcher, hosts))
            evs = read_events(os.path.join(out, "events.jsonl"))
            init = [e for e in evs if e.get("kind") == "KIND_INIT"]
            check(len(init) == 1 and init[0].get("world_size") == 2, "%s: KIND_INIT says world size 2" % launcher)
            check(evs[-1].get("kind") == "KIND_FINISHED", "%s: the run ended with KIND_FINISHED" % launcher)
            check("2 rank(s) on 2 node(s)" in tlog and "launcher %s" % launcher in tlog,
                  "%s: the job's output says 2 ranks on 2 nodes, launcher %s" % (launcher, launcher))
            two = losses(evs)
            check(sorted(two) == sorted(ref), "%s: both runs logged steps 1..%d" % (launcher, steps))
            worst = max(abs(ref[s] - two[s]) / abs(ref[s]) for s in ref)
            print("%s: worst relative loss difference, 1 process vs 2 ranks on 2 nodes: %.3g (step 1 %.6f vs %.6f, "
                  "step %d %.6f vs %.6f)" % (launcher, worst, ref[1], two[1], steps, ref[steps], two[steps]),
                  flush=True)
            check(worst <= 1e-4, "%s: every step's loss equals the single-process run to 1e-4 relative (worst %.3g)"
                  % (launcher, worst))
            results[launcher] = (worst, took)
        # A one-host OpenMPI setting in the user's environment is refused, not run on one node.
        out = os.path.join(self.shared, "train-isolated")
        env = self.job_env(RDATTN_TRAIN_JOB=job2, RDATTN_TRAIN_OUT=out, OMPI_MCA_plm="isolated")
        job = self.sbatch(["-N", "2", "--ntasks-per-node", "1", os.path.join(self.args.deploy, "train.sbatch")], env)
        self.wait_job_end(job, 120)
        tlog = open(os.path.join(self.jobs_dir, "rdattn-train-%s.out" % job)).read()
        check(not os.path.exists(os.path.join(out, "rank0.err")) and "OMPI_MCA_plm=isolated cannot start ranks" in tlog,
              "mpirun with OMPI_MCA_plm=isolated on 2 nodes: refused before any rank starts (%s)"
              % tlog.strip().splitlines()[-1:])
        check(ref[steps] < ref[1], "the loss decreases (%.4f -> %.4f)" % (ref[1], ref[steps]))
        print("train: " + ", ".join("%s worst %.3g in %.1f s" % (k, v[0], v[1]) for k, v in results.items()))


    # ---- the service: coordinator job on node1, one worker job per node
    def sweep_text(self, name, arms, seeds, steps, milestones, every=0):
        return """name: %(name)s
scales:
  - {name: tiny, preset: tiny}
arms: [%(arms)s]
seeds: [%(seeds)s]
data:
  train_shards: ["%(d)s/c_train_*.bin"]
  val_shards: ["%(d)s/c_val_000000.bin"]
  test_shards: ["%(d)s/c_test_000000.bin"]
  tokenizer: byte
  val_windows: 8
  test_windows: 8
optim: {peak_lr: 0.003, warmup_steps: 4}
schedule:
  total_tokens: %(total)d
  global_batch_tokens: 512
  micro_batch_sequences: 2
  milestones_tokens: [%(ms)s]
parallel: {world_size: 1, threads_per_rank: 1, precision: fp32}
checkpoint: {every_steps: %(every)d, keep_last: 2}
max_attempts: 3
""" % {"name": name, "arms": ", ".join(arms), "seeds": ", ".join(str(x) for x in seeds), "d": self.data,
           "total": steps * 512, "ms": ", ".join(str(m * 512) for m in milestones), "every": every}

    def start_service(self, sweep_text):
        self.state = os.path.join(self.shared, "state")
        env = self.job_env(RDATTN_STATE_DIR=self.state, RDATTN_COORDINATOR_WAIT="120",
                           RDATTN_COORDINATOR_ARGS="--lease-seconds 6 --heartbeat-seconds 1",
                           RDATTN_COORDINATOR_SBATCH_ARGS="--nodelist=node1",
                           RDATTN_WORKER_NODES="node1,node2", RDATTN_WORKER_SLOTS="1", RDATTN_THREADS_PER_RANK="1",
                           RDATTN_WORKER_STOP_GRACE="5")
        for k in ("RDATTN_METRICS_LISTEN", "RDATTN_COORDINATOR", "RDATTN_COORDINATOR_LISTEN"):
            env.pop(k, None)
        sweep = os.path.join(self.shared, "sweep.yaml")
        with open(sweep, "w") as f:
            f.write(sweep_text)
        t0 = time.time()
        sub = self.cl.run(["bash", os.path.join(self.args.deploy, "submit-sweep.sh"), sweep], env=env,
                          cwd=self.jobs_dir, timeout=180)
        ids = dict(line.split("=", 1) for line in sub.stdout.splitlines() if "=" in line)
        self.cjob = ids.get("RDATTN_COORDINATOR_JOB", "")
        self.wjobs = ids.get("RDATTN_WORKER_JOB", "").split(",")
        self.addr = ids.get("RDATTN_COORDINATOR", "")
        self.sid = ids.get("RDATTN_SWEEP", "")
        check(self.cjob.isdigit() and len(self.wjobs) == 2 and all(j.isdigit() for j in self.wjobs),
              "submit-sweep.sh (RDATTN_WORKER_NODES=node1,node2): coordinator job %s, worker jobs %s"
              % (self.cjob, self.wjobs))
        check(self.addr.startswith("node1:") and self.sid.startswith("sw-"),
              "the coordinator published %s (node1's hostname, resolved on every node); sweep %s (%.1f s)"
              % (self.addr, self.sid, time.time() - t0))
        self.client = [self.bin["client"], "--coordinator", self.addr]

        def placed():
            q = self.cl.squeue()
            want = {self.cjob: "node1", self.wjobs[0]: "node1", self.wjobs[1]: "node2"}
            return q if all(q.get(j, ("", ""))[0] == "RUNNING" and q[j][1] == n for j, n in want.items()) else None
        q = self.cl.wait("the coordinator job on node1 and a worker job on each node RUNNING", placed, 90)
        check(True, "squeue: %s" % q)
        # Each worker keeps its id in its node-local workdir: node1's and node2's own /tmp.
        self.wids = {}
        for node, wjob in (("node1", self.wjobs[0]), ("node2", self.wjobs[1])):
            path = os.path.join(self.tmp, node, "tmp", "rdattn-worker-%s" % wjob, "worker_id")
            self.wids[node] = self.cl.wait("%s's worker id in its node-local %s" % (node, path),
                                           lambda: os.path.exists(path) and open(path).read().strip(), 60)
        check(len(set(self.wids.values())) == 2, "two workers registered, one per node: %s" % self.wids)

    def get(self):
        g = self.cl.run(self.client + ["get", self.sid, "--format", "json"], check=False, timeout=30)
        return json.loads(g.stdout) if g.returncode == 0 else None

    def wait_sweep_end(self, timeout):
        def ended():
            doc = self.get()
            s = (doc or {}).get("state", "")
            return doc if s.endswith(("SUCCEEDED", "FAILED", "CANCELLED")) else None
        return self.cl.wait("sweep %s to end" % self.sid, ended, timeout, interval=1)

    def watch(self):
        """Every WatchEvent of the ended sweep, from `rdattn watch --format json`."""
        w = self.cl.run(self.client + ["watch", self.sid, "--format", "json"], timeout=60, check=False)
        out = []
        for line in w.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def check_results(self, doc, events, milestones):
        """Every job SUCCEEDED with a val NLL for each milestone and a test NLL stored."""
        for j in doc["jobs"]:
            jid = jid_of(j)
            evs = events.get(jid, [])
            vals = {int(fld(e, "milestone_tokens", fld(e, "tokens", 0))): fld(e, "val_nll") for e in evs
                    if e.get("kind") == "KIND_EVAL"}
            test = [fld(e, "test_nll") for e in evs
                    if e.get("kind") == "KIND_FINISHED" and int(fld(e, "eval_tokens", 0)) > 0]
            check(j["state"] == "JOB_STATE_SUCCEEDED" and sorted(vals) == [m * 512 for m in milestones]
                  and all(v is not None for v in vals.values()) and test and test[-1] is not None,
                  "%s SUCCEEDED with every result: val NLL at %s tokens %s, test NLL %s"
                  % (jid, sorted(vals), ["%.4f" % vals[k] for k in sorted(vals)], ["%.4f" % t for t in test]))
        return events

    def case_sweep(self):
        milestones = [8]
        self.start_service(self.sweep_text("twonode", ["block", "rd"], [1, 2, 3], 8, milestones))
        doc = self.wait_sweep_end(240)
        check(doc["state"] == "SWEEP_STATE_SUCCEEDED", "sweep %s %s" % (self.sid, doc["state"]))
        jobs = doc.get("jobs", [])
        check(len(jobs) == 6, "6 jobs (3 seeds x block, rd)")
        by_node = {}
        node_of = {w: n for n, w in self.wids.items()}
        for j in jobs:
            by_node.setdefault(node_of.get(worker_of(j), "?"), []).append(jid_of(j))
        check(set(by_node) == {"node1", "node2"},
              "jobs ran on both nodes' workers: %s" % {n: len(v) for n, v in sorted(by_node.items())})
        self.check_results(doc, metric_events(self.watch()), milestones)
        ckpts = os.path.join(self.state, "checkpoints")
        check(os.path.isdir(ckpts) and len(os.listdir(ckpts)) == 6,
              "checkpoints of all 6 jobs under the shared root %s" % ckpts)
        print("sweep: %s" % {n: sorted(v) for n, v in sorted(by_node.items())})

    # ---- a node dies mid-job
    def case_node_failure(self):
        steps, every, milestones = 100, 10, [50, 100]
        self.start_service(self.sweep_text("nodefail", ["block", "rd"], [1], steps, milestones, every=every))
        node2 = self.wids["node2"]

        def victim_ready():
            doc = self.get()
            for j in (doc or {}).get("jobs", []):
                if (worker_of(j) == node2 and j.get("state") == "JOB_STATE_RUNNING"
                        and fld(j, "last_checkpoint_path")
                        and int(j.get("step", 0)) >= 2 * every):
                    return j
            return None
        v = self.cl.wait("node2's job to pass step %d with a checkpoint" % (2 * every), victim_ready, 180)
        vid = jid_of(v)
        procs = {pid: cmdline(pid) for pid in self.cl.node_pids("node2")}
        pids, left = self.cl.kill_node("node2")
        t_kill = time.time()
        procs.update({pid: cmdline(pid) for pid in pids if pid not in procs})
        names = " ".join(sorted(set(c.split(" ")[0].rsplit("/", 1)[-1] for c in procs.values() if c)))
        check(not left and "slurmd" in names and "rdattn-worker" in names and "rdattn-train" in names
              and "munged" in names,
              "SIGKILLed every process of node2 (%d: %s) at step %s of %s; none left" % (len(pids), names,
                                                                                        v.get("step"), vid))
        print("node2's processes before the kill:\n  %s" % "\n  ".join(
            "%d %s" % (pid, c[:110]) for pid, c in sorted(procs.items())), flush=True)
        times = {}
        ended = {}

        def recovered():
            if "node2_down" not in times and self.cl.node_states().get("node2", "").startswith("down"):
                times["node2_down"] = time.time() - t_kill
                times["node2_worker_job"] = self.cl.squeue().get(self.wjobs[1], ("gone",))[0]
            doc = self.get()
            if (doc or {}).get("state", "").endswith(("SUCCEEDED", "FAILED", "CANCELLED")) and "end" not in times:
                times["end"] = time.time() - t_kill
                ended["doc"] = doc
            return "node2_down" in times and "end" in times
        self.cl.wait("node2 to be DOWN in Slurm and sweep %s to end" % self.sid, recovered, 300, interval=0.5)
        q = self.cl.squeue()
        check(times["node2_worker_job"] != "RUNNING" and q.get(self.wjobs[0], ("", ""))[0] == "RUNNING"
              and q.get(self.cjob, ("", ""))[0] == "RUNNING",
              "Slurm: node2 DOWN %.1f s after the kill; node2's worker job %s was then %s; node1's worker job and "
              "the coordinator job still RUNNING" % (times["node2_down"], self.wjobs[1], times["node2_worker_job"]))
        doc = ended["doc"]
        t_end = times["end"]
        check(doc["state"] == "SWEEP_STATE_SUCCEEDED", "sweep %s %s (%.1f s after the kill)"
              % (self.sid, doc["state"], t_end))
        j = [x for x in doc["jobs"] if jid_of(x) == vid][0]
        reason = fld(j, "failure_reason", "")
        check(int(j.get("attempts", 0)) == 2 and worker_of(j) == self.wids["node1"] and "lease expired" in reason,
              "%s SUCCEEDED in attempt 2 on node1's worker; attempt 1 recorded as: %s" % (vid, reason[:160]))
        watch = self.watch()
        events = self.check_results(doc, metric_events(watch), milestones)
        evs = events[vid]
        changes = [(ts(fld(w, "time")), fld(w, "job_state_change")) for w in watch if fld(w, "job_state_change")]
        changes = [(t, c) for t, c in changes if fld(c, "job_id") == vid]
        print("%s's state changes: %s" % (vid, "; ".join("%+.2f s %s -> %s (attempt %s) %s" % (
            t - t_kill, fld(c, "from_state", "?"), fld(c, "to_state", "?"), fld(c, "attempt", "?"),
            fld(c, "reason", "")[:60]) for t, c in changes)), flush=True)
        requeue = [t for t, c in changes if fld(c, "to_state") == "JOB_STATE_PENDING" and int(fld(c, "attempt", 0)) == 1
                   and "lease expired" in fld(c, "reason", "")]
        rerun = [t for t, c in changes if fld(c, "to_state") == "JOB_STATE_RUNNING" and int(fld(c, "attempt", 0)) == 2]
        step2 = [ts(fld(e, "wall_time")) for e in evs
                 if e.get("kind") == "KIND_TRAIN_STEP" and int(e.get("attempt", 0)) == 2]
        check(len(requeue) == 1 and rerun and step2,
              "the coordinator requeued %s (RUNNING -> PENDING, lease expired) once, and ran it again" % vid)
        times["requeued"], times["resumed"] = requeue[0] - t_kill, rerun[0] - t_kill
        times["first_step"] = min(step2) - t_kill
        check(6 - 1.5 <= times["requeued"] <= 6 + 6, "requeued %.2f s after the kill: the 6 s lease, less the time "
              "since the last heartbeat (1 s), plus the reaper's period" % times["requeued"])
        stored = [int(e.get("step", 0)) for e in evs
                  if e.get("kind") == "KIND_CHECKPOINT" and int(e.get("attempt", 0)) == 1]
        inits = [e for e in evs if e.get("kind") == "KIND_INIT"]
        first2 = min([int(e.get("step", 0)) for e in evs if e.get("kind") == "KIND_TRAIN_STEP"
                      and int(e.get("attempt", 0)) == 2] or [-1])
        resume = int(inits[-1].get("step", -1)) if len(inits) == 2 else -1
        check(len(inits) == 2 and stored and max(stored) <= resume < steps and first2 == resume + 1,
              "attempt 2 resumed from attempt 1's checkpoint: at step %d (attempt 1's last checkpoint event: step %s), "
              "first step trained %d" % (resume, max(stored) if stored else None, first2))
        # The resumed job's results are bitwise those of an uninterrupted run of its RunSpec.
        spec_path = os.path.join(self.tmp, "node1", "tmp", "rdattn-worker-%s" % self.wjobs[0], vid.replace("/", "_"),
                                 "attempt-2", "job.json")
        with open(spec_path) as f:
            spec = json.load(f)
        spec.setdefault("checkpoint", {})["dir"] = os.path.join(self.shared, "baseline-ckpt")
        for k in ("resume_from", "stored_eval_milestones", "stored_evals_known", "coordinator_checkpoint",
                  "storedEvalMilestones", "storedEvalsKnown", "coordinatorCheckpoint", "resumeFrom"):
            spec["checkpoint"].pop(k, None)
        base_job = os.path.join(self.shared, "baseline.json")
        with open(base_job, "w") as f:
            json.dump(spec, f)
        base_events = os.path.join(self.shared, "baseline-events.jsonl")
        p = subprocess.run([self.bin["train"], "train", "--job", base_job, "--events", base_events],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        check(p.returncode == 0 and "warning" not in p.stderr,
              "an uninterrupted standalone run of %s's RunSpec (from step 0, no warning)%s"
              % (vid, "" if p.returncode == 0 and "warning" not in p.stderr else ": " + p.stderr[-1000:]))
        base = read_events(base_events)
        want = {int(e["milestone_tokens"]): e["val_nll"] for e in base if e["kind"] == "KIND_EVAL"}
        want_test = [e["test_nll"] for e in base if e["kind"] == "KIND_FINISHED"][0]
        got = {int(fld(e, "milestone_tokens", 0)): fld(e, "val_nll") for e in evs if e.get("kind") == "KIND_EVAL"}
        got_test = [fld(e, "test_nll") for e in evs if e.get("kind") == "KIND_FINISHED"][-1]
        check(got == want and got_test == want_test,
              "%s's val NLLs %s and test NLL %.17g equal the uninterrupted run's bit for bit (%s, %.17g)"
              % (vid, got, got_test, want, want_test))
        print("node failure: after the kill of node2, %s requeued (lease expired) at %.2f s, RUNNING again on node1 "
              "at %.2f s, first resumed step at %.2f s; node2 DOWN in Slurm at %.1f s; sweep SUCCEEDED at %.1f s"
              % (vid, times["requeued"], times["resumed"], times["first_step"], times["node2_down"], t_end))


def fld(d, snake, default=None):
    """A field of a JSON message by its proto name, or its lowerCamelCase JSON name."""
    if snake in d:
        return d[snake]
    parts = snake.split("_")
    return d.get(parts[0] + "".join(x.title() for x in parts[1:]), default)


def metric_events(watch):
    """{job id: [metric event]} of a list of WatchEvents."""
    out = {}
    for ev in watch:
        me = fld(ev, "metric_event")
        if me:
            out.setdefault(fld(me, "job_id"), []).append(me)
    return out


def ts(rfc3339):
    """Seconds since the epoch of a protobuf JSON Timestamp ("2026-12-01T20:45:45.259Z")."""
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def jid_of(j):
    return fld(j["job"], "job_id")


def worker_of(j):
    return fld(j, "worker_id")


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--deploy", required=True, help="deploy/slurm folder with the scripts")
    ap.add_argument("--case", required=True, choices=["train", "sweep", "node-failure"])
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    args.deploy = os.path.abspath(args.deploy)
    args.bin = os.path.abspath(args.bin)
    t0 = time.time()
    if os.geteuid() != 0:
        print("multinode_test: needs root (namespaces, SlurmUser=root)")
        sys.exit(1)
    for tool in ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "srun", "squeue", "sinfo", "scancel",
                 "mpirun"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            print("multinode_test: %s not found; scripts/setup.sh installs slurm-wlm, munge and openmpi-bin" % tool)
            sys.exit(1)
    try:
        clusterlib.probe()
    except clusterlib.CapabilityMissing as e:
        print("multinode_test: SKIPPED: this machine cannot make network namespaces: %s" % e)
        sys.exit(SKIP)

    def on_signal(sig, _frame):
        raise SystemExit("multinode_test: got signal %d" % sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    tmp = tempfile.mkdtemp(prefix="rdattn-multinode-", dir="/var/tmp")  # not /tmp: each node has its own
    # The build and the deploy scripts stay visible in every node even if they are under /tmp.
    cl = clusterlib.Cluster(tmp, keep=(args.bin, args.deploy))
    ok = False
    try:
        cl.start()
        t = Test(args, tmp, cl)
        getattr(t, "case_" + args.case.replace("-", "_"))()
        ok = True
    except BaseException as e:
        # The reason first: the logs below are long and a CI excerpt may cut what follows them.
        print("\nFAILED: %s: %s" % (type(e).__name__, e), flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the teardown short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not ok:
            print("\n==== failure: logs ====")
            cl.dump_logs()
            for root, _, files in os.walk(os.path.join(tmp, "shared")):
                for name in sorted(files):
                    if name.endswith((".out", ".err", ".log", ".stderr")) or name == "exit_code":
                        path = os.path.join(root, name)
                        print("---- %s (last 30 lines)" % path)
                        with open(path, errors="replace") as f:
                            print("\n".join(f.read().splitlines()[-30:]))
        t_stop = time.time()
        left, still = cl.stop()
        print("cleanup (%.1f s): every process in our namespaces stopped%s; namespaces left: %s"
              % (time.time() - t_stop, "" if not left else " except %s" % left, still or "none"))
        if ok and (left or still):
            ok = False
            print("FAILED: the teardown left processes or namespaces behind")
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp)
    print("%s (%.0f s)" % ("1 passed, 0 failed" if ok else "0 passed, 1 failed", time.time() - t0))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
