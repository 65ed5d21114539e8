#!/usr/bin/python3
"""deploy/slurm/ on a real one-node Slurm (Debian's slurm-wlm 22.05 and munge).

Everything lives in one temporary folder: a munged with its own key, socket, pid and seed files;
a slurm.conf (SLURM_CONF, with AuthInfo=socket=<our munge socket>) whose slurmctld and slurmd
run as child processes on free ports, with their state and spool directories here. /etc/slurm,
/etc/munge and the system's munged are never used.

Then, as a user of a cluster would:
  1. deploy/slurm/submit-sweep.sh sbatch's coordinator.sbatch, then worker.sbatch (dependency
     after the coordinator started); the coordinator publishes its bound address in the state
     folder, the worker job reads it. Metrics are on: RDATTN_COORDINATOR_METRICS_LISTEN with port
     0 (the script reads the bound port from the coordinator's log line and publishes it in
     coordinator.env), RDATTN_WORKER_METRICS_LISTEN with a free fixed port, RDATTN_PROM_SD_DIR in
     the temporary folder: the file_sd JSON of the coordinator and of the worker carry the bound
     ports and the job/node/slurm_job_id(/kind) labels; a real `prometheus` with file_sd configs
     on that folder discovers and scrapes both;
  2. `rdattn submit` a tiny sweep (2 arms x 2 seeds, 8 steps), `rdattn watch` it; checks: the
     sweep SUCCEEDED, every job ran on the worker that the Slurm job started (its worker id file
     in the node-local workdir, and the node's hostname), both Slurm jobs were RUNNING during the
     sweep, checkpoints went to the shared checkpoint root; the worker's /metrics has
     rdattn_train_loss and rdattn_val_nll for each job with its job_id and arm, the coordinator's
     rdattn_jobs{state="succeeded"} is 4, `promtool check metrics` accepts both expositions, and
     Prometheus has both file_sd targets up with their labels;
  3. a second sweep of longer jobs: `scancel --signal=TERM` on the worker job (what
     `--signal=TERM@120` does before the time limit) makes the worker checkpoint the running job
     and exit, and its file_sd file goes; a second worker job (submit-sweep.sh with
     RDATTN_SKIP_COORDINATOR=1, metrics port 0) publishes its bound port in its own file_sd file
     and resumes the job at the step after the checkpoint; then `rdattn cancel` ends that sweep
     CANCELLED;
  4. scancel the coordinator and the second worker job; checks: they leave squeue, the
     coordinator removed its address file and logged a clean stop, no file_sd file is left;
  5. train.sbatch with 2 tasks on the node (mpirun inside the allocation): exit_code 0, both
     rank output files, and rank 0's events say world size 2 and end with KIND_FINISHED.
Daemons and any process left with our SLURM_CONF are stopped at the end, pass or fail; on failure
the daemon logs' tails and the job output files are printed.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from itest import check, free_port, http_get, promtool_accepts  # noqa: E402

DAEMONS = []  # (name, Popen, log path)
TMP = None


def run(cmd, env, timeout=60, check_rc=True, **kw):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and p.returncode != 0:
        raise AssertionError("%s exited %d:\nstdout: %s\nstderr: %s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def start_daemon(name, cmd, env):
    log_path = os.path.join(TMP, "log", name + ".out")
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    DAEMONS.append((name, p, log_path))
    return p


def wait_for(what, fn, timeout, interval=0.5):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out after %ds waiting for %s" % (timeout, what))
        for name, p, _ in DAEMONS:
            if p.poll() is not None:
                raise AssertionError("%s exited with %s while waiting for %s" % (name, p.returncode, what))
        time.sleep(interval)


def processes_with_env(key, value):
    """PIDs (not ours) whose environment has key=value: the jobs' processes, slurmstepd."""
    needle = ("%s=%s" % (key, value)).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
        return "\n".join(lines[-n:])
    except OSError as e:
        return "(%s)" % e


def dump_logs():
    print("\n==== failure: logs ====", flush=True)
    for root, _, files in os.walk(TMP):
        for name in sorted(files):
            path = os.path.join(root, name)
            if (root.endswith("/log") or name.endswith(".out") or name.endswith(".err") or name.endswith(".log")
                    or name == "exit_code"):
                print("---- %s (last 40 lines)" % path)
                print(tail(path))
    sys.stdout.flush()


def stop_everything(env):
    # Jobs first (slurmd must be alive to stop their steps), then anything left with our
    # SLURM_CONF in its environment (slurmstepd, job processes), then the daemons, munged last.
    if env is not None:
        try:
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=20)
        except Exception:  # noqa: BLE001
            pass
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                q = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, timeout=10)
                if q.returncode != 0 or not q.stdout.strip():
                    break
            except Exception:  # noqa: BLE001
                break
            time.sleep(0.5)
    for name, p, _ in reversed(DAEMONS):
        if name == "munged":
            continue
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for name, p, _ in reversed(DAEMONS):
        if name == "munged":
            continue
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if env is not None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = processes_with_env("SLURM_CONF", env["SLURM_CONF"])
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            if pids and sig == signal.SIGTERM:
                time.sleep(2)
    for name, p, _ in DAEMONS:
        if name == "munged" and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def write_corpus(folder):
    """Text files of a small Markov chain over words (learnable), for rdattn-data prepare."""
    rng = random.Random(7)
    vocab = ["the", "model", "reads", "depth", "value", "query", "block", "routes", "over", "layers",
             "and", "a", "residual", "stream", "with", "learned", "softmax", "mixture", "of", "sources"]
    nxt = {w: rng.sample(vocab, 4) for w in vocab}
    out = {}
    for split, docs in (("train", 60), ("val", 4), ("test", 4)):
        d = os.path.join(folder, split)
        os.makedirs(d)
        out[split] = []
        for i in range(docs):
            w, words = rng.choice(vocab), []
            for _ in range(80):
                words.append(w)
                w = rng.choice(nxt[w])
            path = os.path.join(d, "doc%03d.txt" % i)
            with open(path, "w") as f:
                f.write(" ".join(words) + "\n")
            out[split].append(path)
    return out


def slurm_conf(host, cpus, ctld_port, slurmd_port, munge_socket):
    mem_mb = 1024
    d = TMP
    return """# written by tests/slurm/slurm_test.py
ClusterName=rdattntest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmctldPort={cport}
SlurmdPort={dport}
StateSaveLocation={d}/slurm/state
SlurmdSpoolDir={d}/slurm/spool
SlurmctldPidFile={d}/slurm/slurmctld.pid
SlurmdPidFile={d}/slurm/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName={host} CPUs={cpus} RealMemory={mem}
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
""".format(host=host, sock=munge_socket, cport=ctld_port, dport=slurmd_port, d=d, cpus=cpus, mem=mem_mb)


def read_sd(path):
    """(target, labels) of a one-group file_sd JSON file, checking its file_sd shape."""
    with open(path) as f:
        groups = json.load(f)
    check(isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0].get("targets"), list)
          and len(groups[0]["targets"]) == 1 and isinstance(groups[0].get("labels"), dict),
          "%s parses as file_sd JSON: %s" % (os.path.basename(path), json.dumps(groups)))
    return groups[0]["targets"][0], groups[0]["labels"]


def series_labels(text, name):
    """Label dicts of every sample of metric `name` in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body = line[len(name) + 1:line.rindex("}")]
            out.append(dict((k, v.strip('"')) for k, v in (kv.split("=", 1) for kv in body.split('",') if kv)))
        elif line.startswith(name + " "):
            out.append({})
    return out


def squeue_states(env):
    q = run(["squeue", "-h", "-o", "%i %T"], env, check_rc=False)
    return dict(line.split() for line in q.stdout.splitlines() if line.strip())


def main():
    global TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--deploy", required=True, help="deploy/slurm folder with the scripts")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--promtool", default=shutil.which("promtool") or "/usr/bin/promtool")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    args = ap.parse_args()
    args.deploy = os.path.abspath(args.deploy)
    args.bin = os.path.abspath(args.bin)
    t0 = time.time()
    if os.geteuid() != 0:
        print("slurm_test: needs root (SlurmUser=root, slurmd runs jobs as their users)")
        sys.exit(1)
    for tool in ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "sinfo", "scancel", "mpirun"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            print("slurm_test: %s not found; scripts/setup.sh installs slurm-wlm, munge and openmpi-bin" % tool)
            sys.exit(1)
    for tool in (args.promtool, args.prometheus):
        if not os.access(tool, os.X_OK):
            print("slurm_test: %s not found; Debian's prometheus package (scripts/setup.sh) has promtool and "
                  "prometheus (or pass --promtool/--prometheus)" % tool)
            sys.exit(1)
    b = args.bin
    binaries = {"coordinator": "coordinator/rdattn-coordinator", "worker": "worker/daemon/rdattn-worker",
                "train": "worker/trainer/rdattn-train", "data": "worker/data/rdattn-data", "client": "client/rdattn"}
    for k, rel in binaries.items():
        binaries[k] = os.path.join(b, rel)
        if not os.access(binaries[k], os.X_OK):
            print("slurm_test: %s is not built" % binaries[k])
            sys.exit(1)

    TMP = tempfile.mkdtemp(prefix="rdattn-slurm-test-")
    # munged wants execute permission for everyone on the socket's folder and its parents.
    os.chmod(TMP, 0o755)
    for sub in ("log", "munge", "run", "slurm/state", "slurm/spool", "shared", "nodetmp", "jobs", "text", "data"):
        os.makedirs(os.path.join(TMP, sub), exist_ok=True)
    os.chmod(os.path.join(TMP, "munge"), 0o700)
    os.chmod(os.path.join(TMP, "run"), 0o755)
    env = None
    ok = False
    try:
        # ---- munge: own key, socket, pid and seed files; foreground, logs on stderr.
        key = os.path.join(TMP, "munge", "munge.key")
        sock = os.path.join(TMP, "run", "munge.socket")
        run(["mungekey", "--create", "--keyfile", key], dict(os.environ))
        munge_env = dict(os.environ)
        start_daemon("munged", ["munged", "--foreground", "--socket", sock, "--key-file", key,
                                "--pid-file", os.path.join(TMP, "run", "munged.pid"),
                                "--seed-file", os.path.join(TMP, "munge", "munged.seed"),
                                "--log-file", os.path.join(TMP, "log", "munged.log"), "--num-threads", "4"], munge_env)
        wait_for("the munge socket", lambda: os.path.exists(sock) and stat.S_ISSOCK(os.stat(sock).st_mode), 20)
        cred = run(["munge", "--socket", sock, "--no-input"], munge_env).stdout
        un = run(["unmunge", "--socket", sock], munge_env, input=cred)
        check("Success" in un.stdout, "munged on %s encodes and decodes a credential" % sock)

        # ---- Slurm: slurm.conf here, daemons in the foreground as children.
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        conf = os.path.join(TMP, "slurm", "slurm.conf")
        with open(conf, "w") as f:
            f.write(slurm_conf(host, cpus, ctld_port, slurmd_port, sock))
        env = dict(os.environ, SLURM_CONF=conf, OMP_NUM_THREADS="1")
        for k in list(env):  # a Slurm job running this test must not leak its job into ours
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del env[k]
        start_daemon("slurmctld", ["slurmctld", "-D", "-i"], env)
        start_daemon("slurmd", ["slurmd", "-D"], env)

        def node_idle():
            p = run(["sinfo", "-h", "-N", "-o", "%N %t %c"], env, check_rc=False)
            return p.stdout.strip() if p.returncode == 0 and " idle " in p.stdout + " " else None
        line = wait_for("sinfo to show node %s idle" % host, node_idle, 60)
        check(line.split()[0] == host, "sinfo: %s (slurmctld port %d, slurmd port %d)" % (line, ctld_port, slurmd_port))

        # ---- shards with rdattn-data
        text = write_corpus(os.path.join(TMP, "text"))
        data = os.path.join(TMP, "data")
        run([binaries["data"], "prepare", "--tokenizer", "byte", "--out", data, "--prefix", "it",
             "--text"] + text["train"] + ["--val-files"] + text["val"] + ["--test-files"] + text["test"] +
            ["--split", "files"], env)
        check(all(os.path.exists(os.path.join(data, "it_%s_000000.bin" % s)) for s in ("train", "val", "test")),
              "rdattn-data prepared train/val/test shards")

        # ---- the scripts' own checks (no Slurm needed): a clear error naming what is missing
        bad = run(["bash", os.path.join(args.deploy, "train.sbatch")], dict(env, RDATTN_BIN_DIR=b), check_rc=False)
        check(bad.returncode == 2 and "RDATTN_TRAIN_JOB is not set" in bad.stderr,
              "train.sbatch without RDATTN_TRAIN_JOB: %s" % bad.stderr.strip())
        bad = run(["bash", os.path.join(args.deploy, "worker.sbatch")], dict(env, RDATTN_BIN_DIR=TMP + "/nowhere"),
                  check_rc=False)
        check(bad.returncode == 2 and "RDATTN_BIN_DIR=%s/nowhere" % TMP in bad.stderr,
              "worker.sbatch with a wrong RDATTN_BIN_DIR: %s" % bad.stderr.strip())
        for script in ("worker.sbatch", "coordinator.sbatch"):
            bad = run(["bash", os.path.join(args.deploy, script)],
                      dict(env, RDATTN_BIN_DIR=b, RDATTN_METRICS_LISTEN="0.0.0.0:9402",
                           RDATTN_STATE_DIR=os.path.join(TMP, "nostate")), check_rc=False)
            check(bad.returncode == 2 and "RDATTN_WORKER_METRICS_LISTEN" in bad.stderr
                  and "RDATTN_COORDINATOR_METRICS_LISTEN" in bad.stderr,
                  "%s with the old RDATTN_METRICS_LISTEN: %s" % (script, bad.stderr.strip()))

        # ---- the service: coordinator and worker jobs via submit-sweep.sh
        state = os.path.join(TMP, "shared", "state")
        job_env = dict(env, RDATTN_BIN_DIR=b, RDATTN_STATE_DIR=state, TMPDIR=os.path.join(TMP, "nodetmp"),
                       RDATTN_COORDINATOR_ARGS="--lease-seconds 30 --heartbeat-seconds 1",
                       RDATTN_COORDINATOR_WAIT="120", RDATTN_WORKER_STOP_GRACE="5",
                       RDATTN_METRICS_LISTEN="", RDATTN_PROM_SD_DIR=os.path.join(TMP, "shared", "file_sd"),
                       RDATTN_COORDINATOR_METRICS_LISTEN="127.0.0.1:0")
        sd_dir = job_env["RDATTN_PROM_SD_DIR"]
        worker_metrics_port = free_port()
        job_env["RDATTN_WORKER_METRICS_LISTEN"] = "127.0.0.1:%d" % worker_metrics_port
        # The advertised host is the node's hostname (the default) when it resolves to this
        # machine's loopback, as in containers; otherwise the test pins 127.0.0.1.
        try:
            resolved = socket.gethostbyname(host)
        except OSError:
            resolved = ""
        job_env["RDATTN_COORDINATOR_LISTEN"] = "127.0.0.1:0"
        if not resolved.startswith("127."):
            job_env["RDATTN_COORDINATOR_HOST"] = "127.0.0.1"
        jobs_dir = os.path.join(TMP, "jobs")
        sub = run(["bash", os.path.join(args.deploy, "submit-sweep.sh")], job_env, cwd=jobs_dir, timeout=60)
        ids = dict(l.split("=", 1) for l in sub.stdout.splitlines() if "=" in l)
        cjob, wjob = ids.get("RDATTN_COORDINATOR_JOB"), ids.get("RDATTN_WORKER_JOB")
        check(bool(cjob) and bool(wjob), "submit-sweep.sh: coordinator job %s, worker job %s" % (cjob, wjob))
        addr_file = os.path.join(state, "coordinator.addr")
        wait_for("the coordinator's address file", lambda: os.path.exists(addr_file) and open(addr_file).read().strip(), 60)
        addr = open(addr_file).read().strip()
        check(addr.rsplit(":", 1)[1].isdigit() and int(addr.rsplit(":", 1)[1]) > 0,
              "coordinator.sbatch published its bound address %s" % addr)
        with open(os.path.join(state, "coordinator.env")) as f:
            cenv = dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
        check(cenv.get("RDATTN_COORDINATOR_JOB_ID") == cjob, "coordinator.env names job %s" % cjob)
        cmetrics = cenv.get("RDATTN_COORDINATOR_METRICS", "")
        check(cmetrics.startswith("127.0.0.1:") and int(cmetrics.rsplit(":", 1)[1]) > 0,
              "coordinator.env: RDATTN_COORDINATOR_METRICS=%s (the port bound for port 0)" % cmetrics)
        clog_path = os.path.join(jobs_dir, "rdattn-coordinator-%s.out" % cjob)
        check("rdattn-coordinator: metrics on http://%s/metrics" % cmetrics in open(clog_path).read(),
              "the coordinator's own log line names the same port (the job output still has its stderr)")
        wait_for("both Slurm jobs RUNNING",
                 lambda: squeue_states(env).get(cjob) == "RUNNING" and squeue_states(env).get(wjob) == "RUNNING", 90)
        check(True, "squeue: coordinator job %s and worker job %s RUNNING" % (cjob, wjob))

        # ---- metrics: file_sd targets of both jobs, and a real Prometheus discovering them
        csd = os.path.join(sd_dir, "rdattn-coordinator-%s.json" % cjob)
        check(os.path.exists(csd), "coordinator.sbatch wrote %s" % csd)
        target, labels = read_sd(csd)
        check(target == cmetrics and labels == {"job": "rdattn-coordinator", "node": socket.gethostname(),
                                                "slurm_job_id": cjob},
              "coordinator file_sd: target %s, labels %s" % (target, labels))

        def worker_sd(job):
            found = [f for f in os.listdir(sd_dir) if f.startswith("rdattn-worker-") and f.endswith("-%s.json" % job)]
            return os.path.join(sd_dir, found[0]) if found else None
        wsd = wait_for("worker job %s's file_sd file in %s" % (wjob, sd_dir), lambda: worker_sd(wjob), 60)
        target, labels = read_sd(wsd)
        wmetrics = "127.0.0.1:%d" % worker_metrics_port
        check(target == wmetrics and labels == {"job": "rdattn-worker", "node": socket.gethostname(),
                                                "slurm_job_id": wjob, "kind": "cpu"},
              "worker file_sd %s: target %s, labels %s" % (os.path.basename(wsd), target, labels))
        prom = "127.0.0.1:%d" % free_port()
        pcfg = os.path.join(TMP, "prometheus.yml")
        with open(pcfg, "w") as f:
            f.write("""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: rdattn-coordinator
    file_sd_configs: [{files: ["%(d)s/rdattn-coordinator-*.json"], refresh_interval: 5s}]
  - job_name: rdattn-worker
    file_sd_configs: [{files: ["%(d)s/rdattn-worker-*.json"], refresh_interval: 5s}]
""" % {"d": sd_dir})
        start_daemon("prometheus", [args.prometheus, "--config.file=" + pcfg, "--web.listen-address=" + prom,
                                    "--storage.tsdb.path=" + os.path.join(TMP, "tsdb")], env)

        sweep = os.path.join(TMP, "sweep.yaml")
        with open(sweep, "w") as f:
            f.write("""name: slurm
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [1, 2]
data:
  train_shards: ["%(d)s/it_train_*.bin"]
  val_shards: ["%(d)s/it_val_000000.bin"]
  test_shards: ["%(d)s/it_test_000000.bin"]
  tokenizer: byte
  val_windows: 8
  test_windows: 8
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 4096
  global_batch_tokens: 512
  micro_batch_sequences: 4
  milestones_tokens: [4096]
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 2
""" % {"d": data})
        client = [binaries["client"], "--coordinator", addr]
        sid = run(client + ["submit", sweep], env).stdout.strip()
        check(sid.startswith("sw-"), "rdattn submit: sweep %s" % sid)
        seen_running = set()

        def sweep_done():
            st = squeue_states(env)
            seen_running.update(j for j in (cjob, wjob) if st.get(j) == "RUNNING")
            g = run(client + ["get", sid, "--format", "json"], env, check_rc=False)
            if g.returncode != 0:
                return None
            doc = json.loads(g.stdout)
            s = doc.get("state", "")
            return doc if s.endswith("SUCCEEDED") or s.endswith("FAILED") or s.endswith("CANCELLED") else None
        doc = wait_for("sweep %s to end" % sid, sweep_done, 150, interval=1)
        check(doc["state"] == "SWEEP_STATE_SUCCEEDED", "sweep %s %s" % (sid, doc["state"]))
        check(seen_running == {cjob, wjob}, "both Slurm jobs were RUNNING while the sweep ran")
        watch = run(client + ["watch", sid], env, timeout=60)
        print(watch.stdout[-1500:])
        jobs = doc.get("jobs", [])
        check(len(jobs) == 4, "4 jobs (2 seeds x block, rd)")
        wid_file = os.path.join(TMP, "nodetmp", "rdattn-worker-%s" % wjob, "worker_id")
        check(os.path.exists(wid_file), "the worker kept its id in its node-local workdir %s" % os.path.dirname(wid_file))
        wid = open(wid_file).read().strip()
        for j in jobs:
            jid = j["job"].get("jobId", j["job"].get("job_id"))
            check(j["state"] == "JOB_STATE_SUCCEEDED", "job %s SUCCEEDED" % jid)
            check(j.get("workerId", j.get("worker_id")) == wid,
                  "job %s ran on worker %s, the one Slurm job %s started" % (jid, wid, wjob))
        ckpts = os.path.join(state, "checkpoints")
        check(os.path.isdir(ckpts) and len(os.listdir(ckpts)) == 4,
              "checkpoints under the shared root %s: %s" % (ckpts, sorted(os.listdir(ckpts)) if os.path.isdir(ckpts) else []))
        wlog = open(os.path.join(jobs_dir, "rdattn-worker-%s.out" % wjob)).read()
        check(("--slots 1 --kind cpu" in wlog) and ("--checkpoint-root %s" % ckpts) in wlog and "--threads-per-rank 1" in wlog,
              "worker.sbatch derived --slots 1 --kind cpu --threads-per-rank 1 from the allocation")

        # ---- the endpoints after the sweep
        wtext = http_get("http://%s/metrics" % wmetrics)
        arms = {j["job"].get("jobId", j["job"].get("job_id")): j["job"].get("arm") for j in jobs}
        for metric in ("rdattn_train_loss", "rdattn_val_nll"):
            got = {(l.get("job_id"), l.get("arm")) for l in series_labels(wtext, metric) if l.get("sweep") == sid}
            check(got == set(arms.items()), "worker /metrics: %s for each job with its job_id and arm: %s"
                  % (metric, sorted(got)))
        promtool_accepts(args.promtool, "worker", wtext)
        ctext = http_get("http://%s/metrics" % cmetrics)
        check('rdattn_jobs{state="succeeded"} 4' in ctext.splitlines(),
              "coordinator /metrics: %s" % [l for l in ctext.splitlines() if l.startswith("rdattn_jobs{")])
        promtool_accepts(args.promtool, "coordinator", ctext)

        def prom_targets():
            try:
                t = json.loads(http_get("http://%s/api/v1/targets?state=active" % prom, timeout=5))["data"]["activeTargets"]
            except (OSError, ValueError, KeyError):
                return None
            up = {x["labels"].get("job"): x for x in t if x.get("health") == "up"}
            return up if {"rdattn-coordinator", "rdattn-worker"} <= set(up) else None
        up = wait_for("prometheus to discover and scrape both file_sd targets", prom_targets, 40)
        pw, pc = up["rdattn-worker"]["labels"], up["rdattn-coordinator"]["labels"]
        check(pw.get("instance") == wmetrics and pw.get("slurm_job_id") == wjob and pw.get("kind") == "cpu"
              and pc.get("instance") == cmetrics and pc.get("slurm_job_id") == cjob,
              "prometheus (file_sd on %s): targets up: worker %s, coordinator %s" % (sd_dir, pw, pc))

        # ---- preemption: SIGTERM to the worker job's steps (what --signal=TERM@120 does before
        # the time limit) checkpoints the running job; a second worker job resumes it.
        sweep2 = os.path.join(TMP, "sweep-preempt.yaml")
        with open(sweep, "r") as f:
            text2 = f.read()
        text2 = text2.replace("name: slurm", "name: slurm-preempt").replace("seeds: [1, 2]", "seeds: [3]")
        text2 = text2.replace("total_tokens: 4096\n  global_batch_tokens: 512\n  micro_batch_sequences: 4\n"
                              "  milestones_tokens: [4096]",
                              "total_tokens: 1638400\n  global_batch_tokens: 4096\n  micro_batch_sequences: 8\n"
                              "  milestones_tokens: [1638400]")
        check("1638400" in text2, "a second sweep of 400-step jobs")
        with open(sweep2, "w") as f:
            f.write(text2)
        sid2 = run(client + ["submit", sweep2], env).stdout.strip()

        def running_job():
            g = run(client + ["get", sid2, "--format", "json"], env, check_rc=False)
            if g.returncode != 0:
                return None
            for j in json.loads(g.stdout).get("jobs", []):
                if j.get("state") == "JOB_STATE_RUNNING" and int(j.get("step", 0)) >= 5:
                    return j
            return None
        j1 = wait_for("a job of %s to pass step 5" % sid2, running_job, 60)
        jid = j1["job"].get("jobId", j1["job"].get("job_id"))
        run(["scancel", "--signal=TERM", wjob], env)
        wait_for("worker job %s to end after SIGTERM" % wjob, lambda: wjob not in squeue_states(env), 60)
        wlog = open(os.path.join(jobs_dir, "rdattn-worker-%s.out" % wjob)).read()
        check("received SIGTERM" in wlog and "exiting" in wlog,
              "scancel --signal=TERM %s: the worker got SIGTERM, stopped its ranks and exited" % wjob)
        check(not os.path.exists(wsd), "worker job %s removed its file_sd file %s" % (wjob, os.path.basename(wsd)))
        doc2 = json.loads(run(client + ["get", sid2, "--format", "json"], env).stdout)
        jst = [j for j in doc2["jobs"] if j["job"].get("jobId", j["job"].get("job_id")) == jid][0]
        check(jst["state"] == "JOB_STATE_PENDING" and jst.get("lastCheckpointPath", jst.get("last_checkpoint_path")),
              "%s is PENDING again with a checkpoint in the shared root (%s)" %
              (jid, jst.get("lastCheckpointPath", jst.get("last_checkpoint_path"))))
        sub2 = run(["bash", os.path.join(args.deploy, "submit-sweep.sh")],
                   dict(job_env, RDATTN_SKIP_COORDINATOR="1", RDATTN_WORKER_METRICS_LISTEN="127.0.0.1:0"),
                   cwd=jobs_dir, timeout=60)
        wjob2 = dict(l.split("=", 1) for l in sub2.stdout.splitlines() if "=" in l).get("RDATTN_WORKER_JOB")
        check(bool(wjob2) and "RDATTN_COORDINATOR_JOB" not in sub2.stdout,
              "RDATTN_SKIP_COORDINATOR=1 submit-sweep.sh: worker job %s only" % wjob2)

        def resumed():
            g = json.loads(run(client + ["get", sid2, "--format", "json"], env).stdout)
            j = [x for x in g["jobs"] if x["job"].get("jobId", x["job"].get("job_id")) == jid][0]
            return j if int(j.get("attempts", 0)) == 2 and j.get("state") == "JOB_STATE_RUNNING" else None
        wait_for("%s attempt 2 to run on worker job %s" % (jid, wjob2), resumed, 90)
        wsd2 = wait_for("worker job %s's file_sd file" % wjob2, lambda: worker_sd(wjob2), 30)
        target2, labels2 = read_sd(wsd2)
        check(target2.startswith("127.0.0.1:") and int(target2.rsplit(":", 1)[1]) > 0
              and labels2.get("slurm_job_id") == wjob2,
              "worker job %s with metrics port 0: file_sd target %s (the bound port), labels %s" % (wjob2, target2, labels2))
        wait_for("the second worker's rdattn_train_loss for %s" % jid,
                 lambda: [l for l in series_labels(http_get("http://%s/metrics" % target2), "rdattn_train_loss")
                          if l.get("job_id") == jid], 30)
        check(True, "the second worker serves rdattn_train_loss{job_id=\"%s\"} on %s" % (jid, target2))
        run(client + ["cancel", sid2, "--reason", "test over"], env)
        wait_for("sweep %s to end CANCELLED" % sid2,
                 lambda: json.loads(run(client + ["get", sid2, "--format", "json"], env).stdout)["state"]
                 == "SWEEP_STATE_CANCELLED", 60)
        check(True, "rdattn cancel: sweep %s CANCELLED" % sid2)
        w2 = run(client + ["watch", sid2, "--format", "json"], env, timeout=60, check_rc=False)
        steps = {1: [], 2: []}
        ckpt_step = None
        for line in w2.stdout.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            me = ev.get("metricEvent", ev.get("metric_event"))
            if not me or me.get("jobId", me.get("job_id")) != jid:
                continue
            a = int(me.get("attempt", 0))
            if me.get("kind") == "KIND_TRAIN_STEP" and a in steps:
                steps[a].append(int(me.get("step", 0)))
            if me.get("kind") == "KIND_CHECKPOINT" and a == 1:
                ckpt_step = int(me.get("step", 0))
        check(ckpt_step is not None and steps[2] and min(steps[2]) == ckpt_step + 1,
              "attempt 2 resumed at step %s after attempt 1's checkpoint at step %s"
              % (min(steps[2]) if steps[2] else None, ckpt_step))

        # ---- scancel: the jobs end, the coordinator removes its address and stops cleanly
        run(["scancel", cjob, wjob2], env)
        wait_for("the service jobs to leave squeue",
                 lambda: not ({cjob, wjob, wjob2} & set(squeue_states(env))), 60)
        check(True, "scancel %s %s: the jobs ended" % (cjob, wjob2))
        wait_for("the coordinator to remove its address file", lambda: not os.path.exists(addr_file), 20)
        check(True, "coordinator.sbatch removed %s on SIGTERM" % addr_file)
        clog = open(os.path.join(jobs_dir, "rdattn-coordinator-%s.out" % cjob)).read()
        check("rdattn-coordinator stopped on SIGTERM" in clog, "coordinator.sbatch: the coordinator stopped on SIGTERM")
        check(not os.listdir(sd_dir), "no file_sd file left in %s after scancel: %s" % (sd_dir, os.listdir(sd_dir)))

        # ---- train.sbatch: 2 ranks on the one node, mpirun inside the allocation
        out = os.path.join(TMP, "shared", "train-out")
        job = os.path.join(TMP, "train-job.json")
        with open(job, "w") as f:
            json.dump({"run_id": "slurm-train", "init_seed": 1,
                       "model": {"preset": "tiny", "arm": "rd"},
                       "data": {"train_shards": [data + "/it_train_*.bin"], "val_shards": [data + "/it_val_000000.bin"],
                                "test_shards": [data + "/it_test_000000.bin"], "tokenizer": "byte", "data_seed": 1,
                                "val_windows": 8, "test_windows": 8},
                       "optim": {"peak_lr": 3e-3, "warmup_steps": 2},
                       "schedule": {"total_tokens": 4096, "global_batch_tokens": 512, "micro_batch_sequences": 4,
                                    "milestones_tokens": [4096]},
                       "parallel": {"world_size": 2, "threads_per_rank": 1},
                       "checkpoint": {"dir": os.path.join(TMP, "shared", "train-ckpt"), "keep_last": 1}}, f)
        tenv = dict(job_env, RDATTN_TRAIN_JOB=job, RDATTN_TRAIN_OUT=out)
        # The container's OpenMPI settings from docs/communicator.md (root, oversubscription, shared memory).
        tenv.update(OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none")
        tjob = run(["sbatch", "--parsable", "--ntasks=2", os.path.join(args.deploy, "train.sbatch")],
                   tenv, cwd=jobs_dir).stdout.strip().split(";")[0]
        check(tjob.isdigit(), "sbatch --ntasks=2 train.sbatch: job %s" % tjob)
        wait_for("train job %s to end" % tjob, lambda: tjob not in squeue_states(env), 120)
        code_file = os.path.join(out, "exit_code")
        check(os.path.exists(code_file) and open(code_file).read().strip() == "0",
              "train.sbatch wrote exit_code 0 (%s)" % (open(code_file).read().strip() if os.path.exists(code_file) else "missing"))
        for r in (0, 1):
            check(os.path.exists(os.path.join(out, "rank%d.err" % r)), "rank %d of 2 ran (rank%d.err)" % (r, r))
        with open(os.path.join(out, "events.jsonl")) as f:
            evs = [json.loads(l) for l in f if l.strip()]
        init = [e for e in evs if e.get("kind") == "KIND_INIT"]
        check(len(init) == 1 and init[0].get("world_size", init[0].get("worldSize")) == 2,
              "rank 0's KIND_INIT event says world size 2")
        check(evs[-1].get("kind") == "KIND_FINISHED", "the run ended with KIND_FINISHED")
        tlog = open(os.path.join(jobs_dir, "rdattn-train-%s.out" % tjob)).read()
        check("2 rank(s)" in tlog and "finished: exit code 0" in tlog, "the train job's output reports 2 ranks, exit code 0")
        ok = True
    finally:
        if not ok and TMP is not None:
            dump_logs()
        stop_everything(env)
        left = processes_with_env("SLURM_CONF", env["SLURM_CONF"]) if env else []
        print("cleanup: daemons stopped; processes left with our SLURM_CONF: %s" % left)
        if ok and not args.keep:
            shutil.rmtree(TMP, ignore_errors=True)
        else:
            print("kept %s" % TMP)
    print("1 passed, 0 failed (%.0f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
