#!/usr/bin/python3
"""A two-node Slurm cluster on one machine, inside namespaces this module creates.

Layout (NAME = "rdattn-t<pid>", so that a leftover of a killed run can be found and removed):

    netns NAME-ctl    hostname "slurmctl", 10.213.0.1/24 on the bridge "rdbr": munged, slurmctld;
                      the test's client commands (sbatch, squeue, rdattn ...) run here too
    netns NAME-node1  hostname "node1", 10.213.0.11/24 on eth0 (veth to the bridge): munged, slurmd
    netns NAME-node2  hostname "node2", 10.213.0.12/24 on eth0: munged, slurmd

The bridge and every veth end are created inside those namespaces (`ip link add ... netns`), so
nothing is added to the machine's own network namespace and only loopback and 10.213.0.0/24
inside our namespaces are used. Each namespace has a holder process (`sleep infinity`) started
with `nsenter --net=/run/netns/NS unshare --uts --mount --propagation private` (not `ip netns
exec`, which remounts /sys and so hides /sys/fs/cgroup, which slurmd needs): it sets the
hostname and, in its private mount namespace, bind-mounts
  - TMP/etc/hosts over /etc/hosts (the three names; /etc itself is never written),
  - TMP/<ns>/run over TMP/run (each node's own munged socket at the one path slurm.conf names),
  - TMP/<ns>/tmp over /tmp, and a fresh tmpfs on /dev/shm: node-local scratch, as on a real
    cluster (worker workdirs, OpenMPI session folders and Slurm's PMIx folders go there; with one
    /tmp the two slurmstepds of a step collide on /tmp/spmix_appdir_*). So TMP itself must not be
    under /tmp: the tests make it in /var/tmp,
and every daemon and command is started in it with `nsenter --target HOLDER --net --mount --uts`.
TMP/shared is seen by every node: the shared file system (state, checkpoints, job outputs).

All munged share one key (as on a real cluster), each with its own socket, pid and seed files.
slurm.conf lives in TMP/slurm (SLURM_CONF), with ports picked free, per-node spool/pid/log files
(%n), and short timeouts so a dead node is noticed in seconds (SlurmdTimeout).

`kill_node(name)` SIGKILLs every process of a node namespace (`ip netns pids`): its munged,
slurmd, slurmstepd, job steps, workers and ranks: what a power loss does. `stop()` tears
everything down: scancel, SIGTERM then SIGKILL to every process in our namespaces, `ip netns
del`. It runs on any failure (the caller's finally) and on SIGTERM/SIGINT; when the test process
is SIGKILLed (a ctest timeout), a reaper started by `start()` in its own session does the same,
and a leftover the reaper missed (its pid gone) is removed by the next `start()`.
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from itest import free_port  # noqa: E402

PREFIX = "rdattn-t"
SUBNET = "10.213.0"
CTL = "slurmctl"


class CapabilityMissing(Exception):
    """The machine cannot make network namespaces (no CAP_SYS_ADMIN/CAP_NET_ADMIN, no iproute2)."""


def _run(cmd, timeout=30, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\nstdout: %s\nstderr: %s"
                             % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def _netns_list():
    p = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _netns_pids(ns):
    p = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def _kill_netns(ns, grace=3.0):
    """SIGTERM (unless grace is 0), then SIGKILL every process in netns ns, until none is left."""
    sigs = ([signal.SIGTERM] if grace > 0 else []) + [signal.SIGKILL]
    for sig in sigs:
        for pid in _netns_pids(ns):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + (grace if sig == signal.SIGTERM else 10)
        while _netns_pids(ns) and time.time() < deadline:
            time.sleep(0.1)
    return _netns_pids(ns)


def remove_leftovers():
    """Namespaces of earlier runs whose test process is gone (killed by a ctest timeout)."""
    removed = []
    for ns in _netns_list():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", ns)
        if not m:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and os.path.exists("/proc/%d" % pid):
            continue  # its owner is still running (another test)
        _kill_netns(ns, grace=0)
        _run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    return removed


def probe():
    """Raises CapabilityMissing unless a network namespace can be made here."""
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            raise CapabilityMissing("%s not found (iproute2 / util-linux)" % tool)
    name = "%s%d-probe" % (PREFIX, os.getpid())
    p = _run(["ip", "netns", "add", name], check=False)
    if p.returncode != 0:
        raise CapabilityMissing("ip netns add failed (needs CAP_SYS_ADMIN and CAP_NET_ADMIN): %s" % p.stderr.strip())
    try:
        q = _run(["nsenter", "--net=/run/netns/" + name, "--", "unshare", "--uts", "--mount",
                  "--propagation", "private",
                  "true"], check=False)
        if q.returncode != 0:
            raise CapabilityMissing("unshare --uts --mount inside a netns failed: %s" % q.stderr.strip())
    finally:
        _run(["ip", "netns", "del", name], check=False)


def _slurm_conf(tmp, nodes, cpus, ctld_port, slurmd_port, sock):
    node_lines = "".join("NodeName={n} NodeAddr={a} CPUs={c} RealMemory=1024\n".format(n=n, a=a, c=cpus)
                         for n, a in nodes)
    return """# written by tests/slurm/cluster.py: a two-node cluster in network namespaces
ClusterName=rdattnmn
SlurmctldHost={ctl}({ctl_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmctldPort={cport}
SlurmdPort={dport}
StateSaveLocation={d}/slurm/state
SlurmdSpoolDir={d}/slurm/spool-%n
SlurmctldPidFile={d}/slurm/slurmctld.pid
SlurmdPidFile={d}/slurm/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmdParameters=config_overrides
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
SlurmdTimeout=6
SlurmctldTimeout=10
MessageTimeout=5
KillWait=10
MinJobAge=600
InactiveLimit=0
{nodes}PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP
""".format(ctl=CTL, ctl_addr=SUBNET + ".1", sock=sock, cport=ctld_port, dport=slurmd_port, d=tmp,
           nodes=node_lines, names=",".join(n for n, _ in nodes))


class Cluster:
    """Two Slurm nodes (node1, node2) and a controller, each in its own netns/UTS/mount namespace."""

    def __init__(self, tmp, node_names=("node1", "node2"), cpus=2, keep=()):
        self.tmp = tmp
        # Host folders the nodes must still see although they are under /tmp, which each node
        # replaces with its own (a checkout or build folder in /tmp, as in a CI clone there).
        self.keep = sorted({os.path.realpath(k) for k in keep
                            if os.path.realpath(k).startswith("/tmp/")})
        self.tag = "%s%d" % (PREFIX, os.getpid())
        self.nodes = [(n, "%s.%d" % (SUBNET, 11 + i)) for i, n in enumerate(node_names)]
        self.cpus = cpus
        self.netns = {}    # name (CTL or a node) -> netns name
        self.holders = {}  # name -> pid of the holder (sleep infinity) whose namespaces nsenter enters
        self.daemons = []  # (name, Popen, log path)
        self.env = None    # environment for commands in the cluster (SLURM_CONF, ...)
        self.conf = os.path.join(tmp, "slurm", "slurm.conf")
        self.sock = os.path.join(tmp, "run", "munge.socket")
        self.killed = set()

    # ---- bring-up
    def start(self):
        removed = remove_leftovers()
        if removed:
            print("cluster: removed leftover namespaces of a killed run: %s" % removed, flush=True)
        # A reaper in its own session: if this process is SIGKILLed (a ctest timeout), it kills every
        # process in our namespaces and deletes them within a second or two.
        self.reaper = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--reap", str(os.getpid())],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        t0 = time.time()
        os.chmod(self.tmp, 0o755)  # munged wants x for everyone on its socket's folder and parents
        if os.path.realpath(self.tmp).startswith("/tmp/") or os.path.realpath(self.tmp).startswith("/dev/shm/"):
            raise ValueError("the cluster's folder must not be under /tmp or /dev/shm (each node gets its own): %s"
                             % self.tmp)
        for sub in ("log", "run", "etc", "munge", "slurm/state", "shared"):
            os.makedirs(os.path.join(self.tmp, sub), exist_ok=True)
        for n, _ in self.nodes:
            sub = "slurm/spool-" + n
            os.makedirs(os.path.join(self.tmp, sub), exist_ok=True)
        os.chmod(os.path.join(self.tmp, "munge"), 0o700)
        names = [CTL] + [n for n, _ in self.nodes]
        with open(os.path.join(self.tmp, "etc", "hosts"), "w") as f:
            f.write("127.0.0.1\tlocalhost\n%s.1\t%s\n" % (SUBNET, CTL))
            for n, a in self.nodes:
                f.write("%s\t%s\n" % (a, n))
        for n in names:
            for sub in ("run", "tmp"):
                os.makedirs(os.path.join(self.tmp, n, sub), exist_ok=True)
            os.chmod(os.path.join(self.tmp, n, "run"), 0o755)
            os.chmod(os.path.join(self.tmp, n, "tmp"), 0o1777)

        # Network: the bridge in the controller's namespace, a veth pair per node.
        for n in names:
            ns = "%s-%s" % (self.tag, n)
            _run(["ip", "netns", "add", ns])
            self.netns[n] = ns
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        ctl = self.netns[CTL]
        _run(["ip", "-n", ctl, "link", "add", "rdbr", "type", "bridge"])
        _run(["ip", "-n", ctl, "addr", "add", SUBNET + ".1/24", "dev", "rdbr"])
        _run(["ip", "-n", ctl, "link", "set", "rdbr", "up"])
        for i, (n, addr) in enumerate(self.nodes):
            peer = "veth%d" % (i + 1)
            _run(["ip", "link", "add", "name", peer, "netns", ctl, "type", "veth", "peer", "name", "eth0",
                  "netns", self.netns[n]])
            _run(["ip", "-n", ctl, "link", "set", peer, "master", "rdbr"])
            _run(["ip", "-n", ctl, "link", "set", peer, "up"])
            _run(["ip", "-n", self.netns[n], "addr", "add", addr + "/24", "dev", "eth0"])
            _run(["ip", "-n", self.netns[n], "link", "set", "eth0", "up"])

        # Holders: hostname and bind mounts in a private mount namespace per node.
        for n in names:
            ready = os.path.join(self.tmp, n, "ready")
            # The kept folders are bound aside before /tmp is replaced, then bound back in place.
            stash = ["{t}/{n}/keep%d" % i for i in range(len(self.keep))]
            aside = "".join("mkdir -p %s; mount --bind %s %s; " % (d, k, d) for k, d in zip(self.keep, stash))
            back = "".join("mkdir -p %s; mount --bind %s %s; " % (k, d, k) for k, d in zip(self.keep, stash))
            script = ("set -e; hostname {n}; mount --bind {t}/etc/hosts /etc/hosts; "
                      "mount --bind {t}/{n}/run {t}/run; " + aside + "mount --bind {t}/{n}/tmp /tmp; " + back +
                      "mount -t tmpfs -o size=512m,mode=1777 rdattn-shm-{n} /dev/shm; "
                      "touch {ready}; exec sleep infinity").format(n=n, t=self.tmp, ready=ready)
            log = open(os.path.join(self.tmp, "log", "holder-%s.out" % n), "w")
            self.holders[n] = subprocess.Popen(
                ["nsenter", "--net=/run/netns/" + self.netns[n], "--", "unshare", "--uts", "--mount",
                 "--propagation", "private", "bash", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._wait("the %s namespace's holder" % n, lambda: os.path.exists(ready), 20)
        # Resolve each holder to the process that runs `sleep infinity` (what nsenter -t enters).
        self.holder_procs = dict(self.holders)
        for n in names:
            self.holders[n] = self._wait("the %s holder's sleep" % n, lambda: self._holder_pid(n), 10)

        # munge: one key, one munged per namespace, each on "its" TMP/run/munge.socket.
        key = os.path.join(self.tmp, "munge", "munge.key")
        _run(["mungekey", "--create", "--keyfile", key])
        for n in names:
            self.start_daemon(n, "munged-" + n, [
                "munged", "--foreground", "--socket", self.sock, "--key-file", key,
                "--pid-file", os.path.join(self.tmp, n, "run", "munged.pid"),
                "--seed-file", os.path.join(self.tmp, "munge", "munged-%s.seed" % n),
                "--log-file", os.path.join(self.tmp, "log", "munged-%s.log" % n), "--num-threads", "2"],
                dict(os.environ))
            sock_here = os.path.join(self.tmp, n, "run", "munge.socket")
            self._wait("munged on %s" % n,
                       lambda: os.path.exists(sock_here) and stat.S_ISSOCK(os.stat(sock_here).st_mode), 20)

        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        with open(self.conf, "w") as f:
            f.write(_slurm_conf(self.tmp, self.nodes, self.cpus, ctld_port, slurmd_port, self.sock))
        env = dict(os.environ, SLURM_CONF=self.conf, OMP_NUM_THREADS="1")
        for k in list(env):  # a Slurm job running this test must not leak its job into ours
            if (k.startswith("SLURM_") and k != "SLURM_CONF") or k.startswith("PMIX_") or k.startswith("PMI_"):
                del env[k]
        env.pop("TMPDIR", None)  # each node's own /tmp
        # The test scripts' one-host OpenMPI setting (OMPI_MCA_btl=self,vader: shared memory only)
        # cannot reach a rank on the other node; add TCP, or every cross-node MPI job aborts
        # ("unable to reach each other ... BTLs attempted: self"), as in a CI run.
        if env.get("OMPI_MCA_btl") and "tcp" not in env["OMPI_MCA_btl"].split(","):
            env["OMPI_MCA_btl"] = env["OMPI_MCA_btl"] + ",tcp"
        # And OMPI_MCA_plm=isolated (mpirun starts no remote daemons) put every rank of a
        # two-node mpirun on the first node, as in a CI run; the cluster's mpirun uses Slurm's.
        if env.get("OMPI_MCA_plm") == "isolated":
            del env["OMPI_MCA_plm"]
        self.env = env
        self.start_daemon(CTL, "slurmctld", ["slurmctld", "-D", "-i"], env)
        for n, _ in self.nodes:
            self.start_daemon(n, "slurmd-" + n, ["slurmd", "-D", "-N", n], env)

        def all_idle():
            p = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            states = dict(line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
            return states if p.returncode == 0 and all(states.get(n) == "idle" for n, _ in self.nodes) else None
        states = self._wait("sinfo to show %s idle" % ", ".join(n for n, _ in self.nodes), all_idle, 60)
        print("cluster: %s up in %.1f s: %s" % (", ".join(n for n, _ in self.nodes), time.time() - t0, states),
              flush=True)
        return self

    def _holder_pid(self, n):
        # The holder is nsenter -> unshare -> bash, each exec-ing the next, ending in sleep; look for
        # it among the descendants in case one of them forks.
        root = self.holders[n].pid if isinstance(self.holders[n], subprocess.Popen) else self.holders[n]
        todo, seen = [root], []
        while todo:
            pid = todo.pop()
            seen.append(pid)
            try:
                with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                    todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        for pid in seen:
            try:
                with open("/proc/%d/comm" % pid) as f:
                    if f.read().strip() == "sleep":
                        return pid
            except OSError:
                pass
        return None

    def _wait(self, what, fn, timeout, interval=0.2):
        deadline = time.time() + timeout
        while True:
            v = fn()
            if v:
                return v
            if time.time() > deadline:
                raise AssertionError("cluster: timed out after %ds waiting for %s" % (timeout, what))
            for name, p, _ in self.daemons:
                if p.poll() is not None and not any(name.endswith("-" + k) for k in self.killed):
                    raise AssertionError("cluster: %s exited with %s while waiting for %s" % (name, p.returncode, what))
            time.sleep(interval)

    def wait(self, what, fn, timeout, interval=0.5):
        return self._wait(what, fn, timeout, interval)

    # ---- running things in the namespaces
    def enter(self, where):
        """The command prefix that runs a program in namespace `where` (CTL or a node name)."""
        return ["nsenter", "--target", str(self.holders[where]), "--net", "--mount", "--uts", "--"]

    def start_daemon(self, where, name, cmd, env):
        log_path = os.path.join(self.tmp, "log", name + ".out")
        log = open(log_path, "w")
        enter = self.enter(where)
        enter[-1:-1] = ["--wd=" + self.tmp]
        p = subprocess.Popen(enter + cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        self.daemons.append((name, p, log_path))
        return p

    def run(self, cmd, env=None, where=CTL, timeout=60, check=True, cwd=None, **kw):
        """Runs cmd in namespace `where` (the controller's by default, where a login node would be), in
        folder cwd (nsenter --wd: entering a mount namespace resets the working directory to /)."""
        enter = self.enter(where)
        enter[-1:-1] = ["--wd=" + (cwd or self.tmp)]
        return _run(enter + list(cmd), env=env if env is not None else self.env, timeout=timeout,
                    check=check, **kw)

    def node_pids(self, node):
        return _netns_pids(self.netns[node])

    def kill_node(self, node):
        """SIGKILL every process of `node` (munged, slurmd, slurmstepd, job processes): a power loss."""
        self.killed.add(node)
        pids = self.node_pids(node)
        left = _kill_netns(self.netns[node], grace=0)
        return pids, left

    def squeue(self):
        """{slurm job id: (state, nodelist)}."""
        p = self.run(["squeue", "-h", "-o", "%i %T %N"], check=False)
        out = {}
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 2:
                out[f[0]] = (f[1], f[2] if len(f) > 2 else "")
        return out

    def node_states(self):
        p = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)

    # ---- teardown
    def stop(self):
        """Stops everything this cluster started, pass or fail; returns what could not be removed."""
        if self.env is not None and CTL in self.holders and isinstance(self.holders[CTL], int):
            try:  # end the jobs first (at most 5 s), so no step is left half-started
                self.run(["scancel", "--full", "--user", "root"], timeout=10, check=False)
                deadline = time.time() + 5
                while time.time() < deadline:
                    q = self.run(["squeue", "-h", "-t", "RUNNING,COMPLETING"], timeout=5, check=False)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.5)
            except Exception:  # noqa: BLE001
                pass
        # Then SIGTERM to every process in our namespaces, SIGKILL to what is left after 3 s.
        spaces = [ns for ns in self.netns.values()]
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
            for ns in spaces:
                for pid in _netns_pids(ns):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            deadline = time.time() + wait
            while any(_netns_pids(ns) for ns in spaces) and time.time() < deadline:
                time.sleep(0.1)
        left = {ns: _netns_pids(ns) for ns in spaces if _netns_pids(ns)}
        for p in [p for _, p, _ in self.daemons] + list(getattr(self, "holder_procs", {}).values()):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        for ns in spaces:
            _run(["ip", "netns", "del", ns], check=False)
        still = [ns for ns in _netns_list() if ns.startswith(self.tag + "-")]
        if getattr(self, "reaper", None) is not None and self.reaper.poll() is None:
            self.reaper.kill()
            self.reaper.wait()
        return left, still

    def dump_logs(self, n=40):
        for name in sorted(os.listdir(os.path.join(self.tmp, "log"))):
            path = os.path.join(self.tmp, "log", name)
            print("---- %s (last %d lines)" % (path, n))
            try:
                with open(path, errors="replace") as f:
                    print("\n".join(f.read().splitlines()[-n:]))
            except OSError as e:
                print("(%s)" % e)
        sys.stdout.flush()


def reap(owner):
    """Waits for process `owner` to end, then removes its namespaces and their processes."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.path.exists("/proc/%d" % owner):
        time.sleep(1)
    for ns in _netns_list():
        if ns.startswith("%s%d-" % (PREFIX, owner)):
            _kill_netns(ns, grace=0)
            _run(["ip", "netns", "del", ns], check=False)


def main():
    """Bring the cluster up, print how to use it, wait for Ctrl-C, tear it down (for debugging)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--reap":
        reap(int(sys.argv[2]))
        return
    import tempfile
    tmp = tempfile.mkdtemp(prefix="rdattn-cluster-", dir="/var/tmp")
    c = Cluster(tmp)
    try:
        probe()
        c.start()
        print("SLURM_CONF=%s; run commands with: %s sinfo" % (c.conf, " ".join(c.enter(CTL))), flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        print("cluster: stopped; left: %s" % (c.stop(),))


if __name__ == "__main__":
    main()
