#!/usr/bin/python3
"""The CUDA image (deploy/docker/Dockerfile.cuda), built from Debian 13 packages with buildah and
run, with no registry and no GPU.

  container_cuda_test.py --source REPO_ROOT [--mode full|prebuilt] [--log FILE] [--cold] [--keep]

1. Base: the pristine Debian 13 minbase root that scripts/debian13.sh caches
   ($RDATTN_DEBIAN13_CACHE/base-trixie, made by `scripts/debian13.sh --flavor cpu prepare` when
   missing), copied into a mounted `buildah from scratch` container and committed as
   docker.io/library/debian:trixie, so `FROM debian:trixie` resolves locally (--pull-never). Its
   apt sources are laid out as the official debian:trixie image's (deb822, trixie and
   trixie-updates, trixie-security, component main only): the Dockerfile enables contrib and
   non-free itself, as it must on the real base.
2. Image, `buildah build --isolation chroot --storage-driver vfs --format docker --pull-never
   --layers=false`, CUDNN=stub (the default):
   --mode full (default)  the default target: the build stage (every build package, the full
       Release build with CUDA and NCCL: coordinator, worker, client, trainer, rdattn-data,
       rdattn-gpu-info), runtime-base and runtime. The build stage's ccache cache mount
       (id rdattn-ccache-cuda) lives in $RDATTN_DEBIAN13_CACHE/image-build-cache, so a rerun
       recompiles only what changed (--cold: a fresh, empty one in the temporary folder). The
       time of each stage and of each long step is printed. Checked in the build log: the
       configure summary says torch 2.x, cuda=ON, nccl=ON; rdattn-train links libnccl and
       libtorch_cuda; runtime-prebuilt was not built.
   --mode prebuilt  the runtime-prebuilt target from the six binaries of
       build-debian13-cuda-full/ (built in the Debian 13 cuda root), with every library they
       load from outside Debian's packages (the cuDNN stub) in prebuilt/lib; the build stage is
       then only parsed by buildah (tests/deploy/dockerfile_lint.py's buildah_parse).
3. Checks on the image: the config (user 10001:10001, HEALTHCHECK, OCI labels, ports 50051 and
   2222, PATH, NVIDIA_DRIVER_CAPABILITIES); with `buildah run`: uid 10001; no -dev package,
   compiler or source; nvidia-cudnn and libcuda1 not installed (rdattn-gpu-stand-ins stands in);
   `ldd` of every binary resolves every library, rdattn-train's libcudnn.so.9 from
   /opt/rdattn/lib; every binary starts (--help); rdattn-gpu-info reports the CUDA runtime and
   NCCL and no device; sshd accepts the MPIJob's config; a tiny CPU job (llm.c shards
   written here, world size 1, fp32) runs with `rdattn-train train` to KIND_FINISHED; and the
   same job with world size 2 under the image's mpirun gives the same losses (1e-4).
Everything (storage root, run root, TMPDIR, the base, the context) lives in one temporary
folder, removed at the end, pass or fail (processes chrooted there are killed, mounts under it
unmounted); a folder left by a killed run is removed by the next run. Exit 77 (skipped) only
when buildah or debootstrap is not installed or the test is not root.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BINARIES = [("coordinator", "rdattn-coordinator"), ("worker/daemon", "rdattn-worker"), ("client", "rdattn"),
            ("worker/trainer", "rdattn-train"), ("worker/data", "rdattn-data"), ("worker", "rdattn-gpu-info")]
PREFIX = "rdattn-container-cuda-test-"
IMAGE = "localhost/rdattn-cuda-test:latest"
BASE = "docker.io/library/debian:trixie"
PREBUILT_DIR = "build-debian13-cuda-full"
BUILD_TIMEOUT = 3000
FAILURES = []


def log(msg):
    print(msg, flush=True)


def check(cond, what):
    log(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)
    return cond


class Buildah:
    def __init__(self, tmp):
        self.tmp = tmp
        self.env = dict(os.environ, TMPDIR=os.path.join(tmp, "tmp"), BUILDAH_ISOLATION="chroot")
        self.env.pop("CONTAINERS_STORAGE_CONF", None)
        self.flags = ["--root", os.path.join(tmp, "storage"), "--runroot", os.path.join(tmp, "runroot"),
                      "--storage-driver", "vfs"]

    def __call__(self, *args, timeout=600, check_rc=True, **kw):
        cmd = ["buildah"] + self.flags + list(args)
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if check_rc and p.returncode != 0:
            raise AssertionError("%s exited %d:\n%s\n%s" % (" ".join(args[:3]), p.returncode, p.stdout[-4000:],
                                                           p.stderr[-4000:]))
        return p

    def build_streamed(self, args, log_path, timeout):
        """`buildah build ARGS`, its output stamped with seconds since the start into log_path.
        Returns (exit status, [(seconds, line)]); killed (exit -9) after timeout seconds."""
        cmd = ["buildah"] + self.flags + ["build"] + list(args)
        lines = []
        t0 = time.time()
        with open(log_path, "w") as out:
            p = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 errors="replace", start_new_session=True)
            timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
            timer.start()
            try:
                for line in p.stdout:
                    t = time.time() - t0
                    lines.append((t, line.rstrip("\n")))
                    out.write("%7.1f %s" % (t, line))
                    out.flush()
                p.wait()
            finally:
                timer.cancel()
        return p.returncode, lines


def cache_root():
    return os.environ.get("RDATTN_DEBIAN13_CACHE", "/var/cache/rdattn/debian13")


def host_security_mirror():
    """The debian-security URI of this machine's apt sources (deb822 or one-line), else Debian's."""
    texts = []
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*")):
        if os.path.isfile(path):
            with open(path) as f:
                texts.append(f.read())
    for text in texts:
        for stanza in re.split(r"\n\s*\n", text):
            if re.search(r"^Suites:.*-security", stanza, re.M):
                m = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                if m:
                    return m.group(1).rstrip("/")
        m = re.search(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+-security\b", text, re.M)
        if m:
            return m.group(1).rstrip("/")
    return "http://deb.debian.org/debian-security"


def make_base(b, source):
    """debian:trixie from scripts/debian13.sh's cached minbase root (made when missing)."""
    base = os.path.join(cache_root(), "base-trixie")
    if not os.path.exists(os.path.join(base, ".rdattn-complete")):
        log("no %s yet: scripts/debian13.sh --flavor cpu prepare" % base)
        t = time.time()
        p = subprocess.run([os.path.join(source, "scripts", "debian13.sh"), "--flavor", "cpu", "prepare"],
                           capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise AssertionError("scripts/debian13.sh --flavor cpu prepare exited %d:\n%s"
                                 % (p.returncode, (p.stdout + p.stderr)[-3000:]))
        log("scripts/debian13.sh --flavor cpu prepare: %.0f s" % (time.time() - t))
    if not os.path.exists(os.path.join(base, ".rdattn-complete")):
        raise AssertionError("%s is incomplete after scripts/debian13.sh prepare" % base)
    with open(os.path.join(base, "etc", "apt", "sources.list")) as f:
        m = re.search(r"^deb\s+(\S+)\s+trixie\b", f.read(), re.M)
    mirror = (m.group(1) if m else "http://deb.debian.org/debian").rstrip("/")
    security = host_security_mirror()
    ctr = b("from", "scratch").stdout.strip()
    mnt = b("mount", ctr).stdout.strip()
    tar = subprocess.Popen(["tar", "-C", base, "--exclude=./.rdattn-complete", "--exclude=./var/cache/apt/archives/*.deb",
                            "--exclude=./var/lib/apt/lists/*_*", "-cf", "-", "."], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-C", mnt, "-xpf", "-"], stdin=tar.stdout, capture_output=True)
    tar.stdout.close()
    if tar.wait() != 0 or untar.returncode != 0:
        raise AssertionError("copying %s into the base failed: %s" % (base, untar.stderr[-2000:]))
    sources = ("Types: deb\nURIs: %s\nSuites: trixie trixie-updates\nComponents: main\n"
               "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
               "Types: deb\nURIs: %s\nSuites: trixie-security\nComponents: main\n"
               "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" % (mirror, security))
    with open(os.path.join(mnt, "etc", "apt", "sources.list.d", "debian.sources"), "w") as f:
        f.write(sources)
    os.remove(os.path.join(mnt, "etc", "apt", "sources.list"))
    b("umount", ctr)
    b("commit", "-q", ctr, BASE, timeout=900)
    b("rm", ctr)
    log("base %s from %s (apt: %s trixie trixie-updates, %s trixie-security; main only)" % (BASE, base, mirror, security))


def stage_prebuilt(ctx, source):
    """The context of --target runtime-prebuilt: the six binaries of build-debian13-cuda-full and
    every library they load from outside Debian's packages, resolved inside the cuda root."""
    bin_dir = os.path.join(source, PREBUILT_DIR)
    paths = [os.path.join(bin_dir, sub, name) for sub, name in BINARIES]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise AssertionError("--mode prebuilt needs the full CUDA build in %s (tests/debian13/check.sh cuda in the "
                             "Debian 13 cuda root makes it); missing: %s" % (bin_dir, ", ".join(missing)))
    debian13 = os.path.join(source, "scripts", "debian13.sh")
    root = subprocess.run([debian13, "--flavor", "cuda", "path"], capture_output=True, text=True).stdout.strip()
    if not root:
        raise AssertionError("the Debian 13 cuda root is not made (scripts/debian13.sh --flavor cuda prepare)")
    script = r'''for b in "$@"; do ldd "$b"; done > /tmp/ldd.txt
if grep "not found" /tmp/ldd.txt; then exit 3; fi
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' /tmp/ldd.txt | sort -u | while read -r so path; do
  real=$(readlink -f "$path")
  owned=0
  for c in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
    if dpkg -S "$c" > /dev/null 2>&1; then owned=1; break; fi
  done
  [ "$owned" = 1 ] || echo "EXTRA $so $real"
done'''
    p = subprocess.run([debian13, "--flavor", "cuda", "run", "--", "bash", "-c", script, "bash"] + paths,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("resolving the binaries' libraries in the cuda root failed (%d):\n%s"
                             % (p.returncode, (p.stdout + p.stderr)[-3000:]))
    extra = re.findall(r"^EXTRA (\S+) (\S+)$", p.stdout, re.M)
    docker = os.path.join(ctx, "deploy", "docker")
    os.makedirs(os.path.join(docker, "prebuilt", "bin"))
    os.makedirs(os.path.join(docker, "prebuilt", "lib"))
    shutil.copy2(os.path.join(source, "deploy", "docker", "rdattn-healthcheck"), docker)
    for path in paths:
        shutil.copy2(path, os.path.join(docker, "prebuilt", "bin"))
    for soname, lib in extra:
        shutil.copy(root + lib, os.path.join(docker, "prebuilt", "lib", soname))
    log("staged %d binaries from %s; libraries from outside Debian's packages: %s"
        % (len(paths), bin_dir, ", ".join("%s (%s)" % e for e in extra) or "none"))
    check(any(s == "libcudnn.so.9" for s, _ in extra), "the cuDNN stub (libcudnn.so.9) is staged in prebuilt/lib")


def step_times(lines):
    """[(stage, step, text, seconds)]: each STEP line of the build log until the next."""
    steps = []
    for t, line in lines:
        m = re.match(r"\[(\d+)/\d+\] (?:STEP (\d+)/(\d+): (.*)|COMMIT\b.*)$", line)
        if m:
            step = m.group(2) or "commit"
            if m.group(2) and m.group(2) == m.group(3):
                step += "+"  # the last step of a stage: its time includes the stage's commit, if any
            steps.append([int(m.group(1)), step, m.group(4) or line, t])
    if lines:
        steps.append([None, None, None, lines[-1][0]])
    return [(s[0], s[1], s[2], nxt[3] - s[3]) for s, nxt in zip(steps, steps[1:])]


def stage_names(lines):
    """{stage number: name} from the FROM steps of the build log."""
    out = {}
    for _, line in lines:
        m = re.match(r"\[(\d+)/\d+\] STEP 1/\d+: FROM \S+(?: AS (\S+))?", line)
        if m:
            out[int(m.group(1))] = m.group(2) or "stage %s" % m.group(1)
    return out


def report_build(lines):
    """Prints the time of each stage and each step over 5 s (N+: the stage's last step, with the
    commit of an intermediate stage); returns {stage name: seconds}."""
    names = stage_names(lines)
    per_stage = {}
    for stage, step, text, secs in step_times(lines):
        name = names.get(stage, str(stage))
        per_stage[name] = per_stage.get(name, 0.0) + secs
        if secs >= 5:
            log("  %-16s step %-6s %6.0f s  %s" % (name, step, secs, (text or "")[:110]))
    for name, secs in per_stage.items():
        log("  stage %-16s %6.0f s" % (name, secs))
    return per_stage


def image_config(b, ref):
    return json.loads(b("inspect", "--type", "image", ref).stdout)["Docker"]["config"]


def image_size(b, ref):
    return b("images", "--format", "{{.Size}}", ref).stdout.strip().splitlines()[0]


# ---- the tiny job: the llm.c shards and read_events of tests/trainer/trainer_cli_test.py (the
# same synthetic corpus as the trainer's end-to-end tests), and a RunSpec
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, read_events, write_shard  # noqa: E402


def write_work(work):
    """The container's /work: three shards and a job file (paths as the container sees them)."""
    data = os.path.join(work, "data")
    os.makedirs(data)
    write_shard(os.path.join(data, "c_train_000000.bin"), corpus(1, 300, 60))
    write_shard(os.path.join(data, "c_val_000000.bin"), corpus(2, 20, 60))
    write_shard(os.path.join(data, "c_test_000000.bin"), corpus(3, 20, 60))
    job = {"run_id": "cuda-image-cpu", "init_seed": 5, "model": {"preset": "tiny", "arm": "rd"},
           "data": {"train_shards": ["/work/data/c_train_*.bin"], "val_shards": ["/work/data/c_val_000000.bin"],
                    "test_shards": ["/work/data/c_test_000000.bin"], "tokenizer": "byte", "data_seed": 11,
                    "val_windows": 16, "test_windows": 16},
           "optim": {"peak_lr": 3e-3, "warmup_steps": 4},
           "schedule": {"total_tokens": 12 * 512, "global_batch_tokens": 512, "micro_batch_sequences": 2,
                        "milestones_tokens": [6 * 512]},
           "parallel": {"world_size": 1, "threads_per_rank": 1, "precision": "fp32"},
           "checkpoint": {"dir": "/work/ckpt", "keep_last": 1}}
    with open(os.path.join(work, "job.json"), "w") as f:
        json.dump(job, f)
    job = dict(job, run_id="cuda-image-cpu-mpi2", parallel=dict(job["parallel"], world_size=2),
               checkpoint={"dir": "/work/ckpt2", "keep_last": 1})
    with open(os.path.join(work, "job2.json"), "w") as f:
        json.dump(job, f)
    for root, dirs, files in os.walk(work):
        for n in [root] + [os.path.join(root, x) for x in files]:
            os.chown(n, 10001, 10001)


def checks_on_config(cfg):
    user = cfg.get("User", "")
    check(user == "10001:10001", "the image's user is 10001:10001 (%r)" % user)
    hc = cfg.get("Healthcheck") or {}
    check(hc.get("Test") == ["CMD", "rdattn-healthcheck"], "HEALTHCHECK runs rdattn-healthcheck (%r)" % hc.get("Test"))
    labels = cfg.get("Labels") or {}
    for k in ("title", "description", "version", "revision", "base.name"):
        check(labels.get("org.opencontainers.image." + k), "OCI label org.opencontainers.image.%s = %r"
              % (k, labels.get("org.opencontainers.image." + k)))
    check(labels.get("org.opencontainers.image.base.name") == BASE, "the base named in the labels is %s" % BASE)
    ports = cfg.get("ExposedPorts") or {}
    check("50051/tcp" in ports and "2222/tcp" in ports, "ports 50051 and 2222 (sshd) exposed (%s)" % sorted(ports))
    env = cfg.get("Env", [])
    check(any(e.startswith("PATH=/opt/rdattn/bin:") for e in env), "/opt/rdattn/bin on PATH")
    check("NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env, "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    check("OMP_NUM_THREADS=1" in env, "OMP_NUM_THREADS=1")


def checks_in_image(b, tmp):
    work = os.path.join(tmp, "work")
    write_work(work)
    ctr = b("from", "--pull-never", IMAGE).stdout.strip()

    def run(*cmd, timeout=300):
        return b("run", "--isolation", "chroot", "--volume", work + ":/work", ctr, "--", *cmd,
                 timeout=timeout, check_rc=False)

    r = run("id", "-u")
    check(r.returncode == 0 and r.stdout.strip() == "10001", "buildah run runs as uid 10001 (%r)" % r.stdout.strip())

    r = run("dpkg-query", "-W", "-f=${Package} ${Status}\n")
    pkgs = [l.split()[0] for l in r.stdout.splitlines() if l.endswith(" installed")]
    dev = [p for p in pkgs if p.endswith("-dev") or re.match(r"(g\+\+|gcc|cpp|clang|cmake|binutils|make|"
                                                            r"nvidia-cuda-toolkit|dpkg-dev)(-\d+)?$", p)]
    r = run("sh", "-c", "for c in cc c++ gcc g++ clang cmake ld make nvcc; do command -v $c; done; "
                        "ls -d /src /build 2>/dev/null; true")
    dev += r.stdout.split()
    check(len(pkgs) > 100 and not dev, "no -dev package, compiler or source among the image's %d packages (%s)"
          % (len(pkgs), dev or "none found"))
    check("libtorch-cuda-2.6" in pkgs and "libnccl2" in pkgs and "libcudart12" in pkgs,
          "libtorch-cuda-2.6, libnccl2 and libcudart12 are installed")
    check("rdattn-gpu-stand-ins" in pkgs and "nvidia-cudnn" not in pkgs and "libcuda1" not in pkgs,
          "nvidia-cudnn and libcuda1 are not installed (rdattn-gpu-stand-ins provides them)")

    r = run("sh", "-c", "for b in /opt/rdattn/bin/*; do echo \"== $b\"; ldd \"$b\"; done")
    ldd = r.stdout
    names = re.findall(r"^== /opt/rdattn/bin/(\S+)$", ldd, re.M)
    check(sorted(names) == sorted(n for _, n in BINARIES), "the six binaries are in /opt/rdattn/bin (%s)"
          % ", ".join(names))
    check(r.returncode == 0 and "not found" not in ldd, "ldd resolves every library of every binary%s"
          % "".join("\n       " + l.strip() for l in ldd.splitlines() if "not found" in l))
    train = ldd.split("== /opt/rdattn/bin/rdattn-train")[-1].split("==")[0]
    for lib in ("libtorch_cuda.so", "libc10_cuda.so", "libnccl.so.2", "libcudart.so.12"):
        check(re.search(r"^\s*%s\S* => /\S+" % re.escape(lib), train, re.M) is not None,
              "rdattn-train loads %s" % lib)
    m = re.search(r"^\s*libcudnn\.so\.9 => (\S+)", train, re.M)
    check(m is not None and m.group(1).startswith("/opt/rdattn/lib/"),
          "rdattn-train's libcudnn.so.9 is the one in /opt/rdattn/lib (%s)" % (m.group(1) if m else None))
    check(re.search(r"^\s*libcuda\.so\.1 =>", ldd, re.M) is None, "no binary links libcuda.so.1 (the node's driver)")

    r = run("rdattn-train", "--help")
    out = r.stdout + r.stderr
    check(r.returncode == 0 and "rdattn-train" in out and "train" in out and "error while loading" not in out,
          "rdattn-train --help prints its usage (exit %d): %s" % (r.returncode, out.strip().splitlines()[:1]))
    for name in ("rdattn-coordinator", "rdattn-worker", "rdattn", "rdattn-data"):
        r = run(name, "--help")
        out = r.stdout + r.stderr
        check(r.returncode == 0 and "error while loading" not in out, "%s --help (exit %d)" % (name, r.returncode))
    r = run("rdattn-gpu-info")
    out = r.stdout.strip()  # (buildah adds its own lines about the exit status to stderr)
    check(r.returncode == 1 and re.search(r"cuda_runtime=12\d\d\d ", out) and re.search(r"nccl=2\d{4}", out)
          and "devices=0" in out, "rdattn-gpu-info reports CUDA 12 and NCCL 2 and no device here (exit %d): %s"
          % (r.returncode, " | ".join(out.splitlines())))
    r = run("/usr/sbin/sshd", "-t", "-f", "/home/rdattn/.sshd_config")
    check(r.returncode == 0, "sshd -t accepts the MPIJob's /home/rdattn/.sshd_config as uid 10001 (exit %d) %s"
          % (r.returncode, r.stderr.strip()[-300:]))
    r = run("rdattn-healthcheck")
    check(r.returncode == 0, "rdattn-healthcheck passes without a coordinator (%s)" % r.stdout.strip())

    t = time.time()
    r = run("rdattn-train", "train", "--job", "/work/job.json", "--events", "/work/events.jsonl", timeout=900)
    t_job = time.time() - t
    events_path = os.path.join(work, "events.jsonl")
    events = read_events(events_path) if os.path.exists(events_path) else []
    kinds = [e.get("kind") for e in events]
    if not check(r.returncode == 0 and "KIND_FINISHED" in kinds,
                 "rdattn-train train runs the tiny job to KIND_FINISHED (exit %d, %d events, %.0f s)"
                 % (r.returncode, len(events), t_job)):
        log(r.stdout[-3000:] + r.stderr[-3000:])
    init = [e for e in events if e.get("kind") == "KIND_INIT"]
    check(init and init[0].get("hardware_kind") == "HARDWARE_KIND_CPU" and init[0].get("world_size", 1) == 1,
          "it ran on the CPU, world size 1 (%s)" % (init[0].get("hardware_kind") if init else None))
    losses = {e["step"]: e["train_loss"] for e in events if e.get("kind") == "KIND_TRAIN_STEP"}
    check(sorted(losses) == list(range(1, 13)) and all(math.isfinite(v) for v in losses.values()),
          "12 steps with finite losses (%s)" % ", ".join("%.3f" % losses[s] for s in sorted(losses)[:1] +
                                                          sorted(losses)[-1:]))
    # Two ranks under the image's mpirun (Open MPI 5), as an MPIJob launches them (there over ssh):
    # the same losses as one rank, to float32 rounding (tests/trainer/trainer_cli_test.py, fp32).
    t = time.time()
    r = run("env", "OMPI_MCA_btl=self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism=none", "mpirun", "-np", "2",
            "--oversubscribe", "rdattn-train", "train", "--job", "/work/job2.json", "--events", "/work/events2.jsonl",
            timeout=900)
    t_mpi = time.time() - t
    events_path = os.path.join(work, "events2.jsonl")
    events2 = read_events(events_path) if os.path.exists(events_path) else []
    if not check(r.returncode == 0 and "KIND_FINISHED" in [e.get("kind") for e in events2],
                 "mpirun -np 2 rdattn-train train (world size 2) runs to KIND_FINISHED (exit %d, %.0f s)"
                 % (r.returncode, t_mpi)):
        log(r.stdout[-3000:] + r.stderr[-3000:])
    init2 = [e for e in events2 if e.get("kind") == "KIND_INIT"]
    check(init2 and init2[0].get("world_size") == 2, "the 2-rank run reports world_size 2")
    losses2 = {e["step"]: e["train_loss"] for e in events2 if e.get("kind") == "KIND_TRAIN_STEP"}
    worst = max((abs(losses[s] - losses2[s]) / abs(losses[s]) for s in losses if s in losses2), default=float("inf"))
    check(sorted(losses2) == sorted(losses) and worst <= 1e-4,
          "its 12 losses equal the 1-rank run's to 1e-4 relative (worst %.3g)" % worst)
    b("rm", ctr)
    return t_job, len(pkgs)


def reap(tmp):
    """SIGKILL every process whose root directory is under tmp (chrooted into our storage)."""
    mine = os.getpid()
    for d in glob.glob("/proc/[0-9]*"):
        try:
            pid = int(os.path.basename(d))
            if pid != mine and os.readlink(d + "/root").startswith(tmp + "/"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


def unmount_under(tmp):
    with open("/proc/self/mounts") as f:
        points = [l.split()[1].replace("\\040", " ") for l in f]
    for m in sorted((m for m in points if m.startswith(tmp + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)


def remove_tree(tmp):
    reap(tmp)
    unmount_under(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    if os.path.exists(tmp):
        subprocess.run(["chattr", "-R", "-i", tmp], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def remove_leftovers():
    """Folders of earlier runs whose test process is gone (a ctest timeout SIGKILLs)."""
    for d in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*")):
        try:
            with open(os.path.join(d, "owner.pid")) as f:
                pid = int(f.read())
            os.kill(pid, 0)
            continue  # still running
        except (OSError, ValueError):
            pass
        log("removing the leftover %s" % d)
        remove_tree(d)


def build_full(b, args, tmp, rev):
    """The default target from the repository; returns the build's seconds or None."""
    cache = os.path.join(tmp, "tmp", "buildah-cache")  # where buildah keeps RUN --mount=type=cache
    if not args.cold:
        persistent = os.path.join(cache_root(), "image-build-cache")
        os.makedirs(persistent, exist_ok=True)
        os.symlink(persistent, cache)
        log("ccache cache mount: %s (persists across runs; --cold for an empty one)" % persistent)
    dockerfile = os.path.join(args.source, "deploy", "docker", "Dockerfile.cuda")
    t = time.time()
    rc, lines = b.build_streamed(["--isolation", "chroot", "--pull-never", "--layers=false", "--format", "docker",
                                  "--build-arg", "REVISION=" + rev, "-t", IMAGE, "-f", dockerfile, args.source],
                                 os.path.join(tmp, "build.log"), BUILD_TIMEOUT)
    t_build = time.time() - t
    if args.log:
        shutil.copy(os.path.join(tmp, "build.log"), args.log)
    text = "\n".join(l for _, l in lines)
    if not check(rc == 0, "buildah build of the default target (build, runtime-base, runtime): exit %d in %.0f s%s"
                 % (rc, t_build, " (killed after %d s)" % BUILD_TIMEOUT if rc == -9 else "")):
        log("\n".join(l for _, l in lines[-150:]))
        report_build(lines)
        return None
    log("build log: %d lines%s; times:" % (len(lines), ", kept in " + args.log if args.log else ""))
    per_stage = report_build(lines)
    log("build stage: %.0f s (%.1f min)" % (per_stage.get("build", 0), per_stage.get("build", 0) / 60))
    check(set(per_stage) >= {"build", "runtime-base", "runtime"} and "runtime-prebuilt" not in per_stage,
          "the stages built are build, runtime-base and runtime (%s)" % ", ".join(per_stage))
    m = re.search(r"^-- rdattn: torch 2\..*$", text, re.M)
    check(m is not None and re.search(r"cuda=ON.*nccl=ON", m.group(0)) is not None,
          "the configure summary: %s" % (m.group(0) if m else "missing"))
    check(re.search(r"^\s*libnccl\.so\S* => /", text, re.M) and re.search(r"^\s*libtorch_cuda\.so\S* => /", text, re.M),
          "the build stage's ldd: rdattn-train links libnccl and libtorch_cuda")
    seen = set()
    for l in re.findall(r"^\s*(?:Cacheable calls|Hits|Misses|Cache size).*$", text, re.M):
        if l.strip() not in seen:  # (ccache repeats hits and misses for its local storage)
            seen.add(l.strip())
            log("  ccache: " + l.strip())
    return t_build


def build_prebuilt(b, args, tmp, rev):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    import dockerfile_lint  # noqa: E402 -- the parse of the build stage, from the lint test
    dockerfile = os.path.join(args.source, "deploy", "docker", "Dockerfile.cuda")
    probs = dockerfile_lint.buildah_parse(dockerfile, ["build"])
    check(not probs, "buildah parses the build stage (not built in --mode prebuilt)%s" % "".join("\n  " + p for p in probs))
    ctx = os.path.join(tmp, "ctx")
    stage_prebuilt(ctx, args.source)
    t = time.time()
    rc, lines = b.build_streamed(["--isolation", "chroot", "--pull-never", "--layers=false", "--format", "docker",
                                  "--target", "runtime-prebuilt", "--build-arg", "REVISION=" + rev, "-t", IMAGE,
                                  "-f", dockerfile, ctx], os.path.join(tmp, "build.log"), BUILD_TIMEOUT)
    t_build = time.time() - t
    if args.log:
        shutil.copy(os.path.join(tmp, "build.log"), args.log)
    if not check(rc == 0, "buildah build --target runtime-prebuilt: exit %d in %.0f s" % (rc, t_build)):
        log("\n".join(l for _, l in lines[-150:]))
        return None
    per_stage = report_build(lines)
    check("build" not in per_stage and {"runtime-base", "runtime-prebuilt"} <= set(per_stage),
          "only runtime-base and runtime-prebuilt were built (%s)" % ", ".join(per_stage))
    return t_build


def run_test(args, tmp):
    b = Buildah(tmp)
    os.makedirs(os.path.join(tmp, "tmp"))
    t0 = time.time()
    make_base(b, args.source)
    t_base = time.time() - t0
    check(True, "base image %s (%.0f s)" % (BASE, t_base))
    rev = subprocess.run(["git", "-C", args.source, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    t_build = (build_full if args.mode == "full" else build_prebuilt)(b, args, tmp, rev)
    if t_build is None:
        return
    size = image_size(b, IMAGE)
    log("image size: %s %s" % (IMAGE, size))
    checks_on_config(image_config(b, IMAGE))
    t_job, npkg = checks_in_image(b, tmp)
    log("figures: base %.0f s, image build (%s) %.0f s, tiny CPU job in the image %.0f s, image %s, %d packages"
        % (t_base, args.mode, t_build, t_job, size, npkg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--mode", choices=("full", "prebuilt"), default="full",
                    help="full: the default target with its build stage; prebuilt: --target runtime-prebuilt "
                         "from %s/" % PREBUILT_DIR)
    ap.add_argument("--log", help="also keep the build log here")
    ap.add_argument("--cold", action="store_true", help="an empty ccache (not the one kept in the cache folder)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (debugging)")
    args = ap.parse_args()
    args.source = os.path.abspath(args.source)
    missing = [t for t in ("buildah", "debootstrap") if not shutil.which(t, path=os.environ.get("PATH", "") +
                                                                         ":/usr/sbin:/sbin")]
    if missing:
        log("SKIPPED: %s not installed (scripts/setup.sh installs buildah and debootstrap)" % " and ".join(missing))
        return 77
    if os.geteuid() != 0:
        log("SKIPPED: not root (debootstrap, chroot and buildah's chroot isolation need root)")
        return 77
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    remove_leftovers()
    tmp = tempfile.mkdtemp(prefix=PREFIX)
    with open(os.path.join(tmp, "owner.pid"), "w") as f:
        f.write(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    start = time.time()
    try:
        run_test(args, tmp)
    except Exception as e:  # noqa: BLE001 -- any error is a failed check, and the cleanup runs
        check(False, "error: %s: %s" % (type(e).__name__, e))
    finally:
        if args.keep:
            log("kept %s" % tmp)
        else:
            remove_tree(tmp)
            check(not os.path.exists(tmp), "the temporary folder (storage, base, container) is removed")
    log("wall time %.0f s" % (time.time() - start))
    if FAILURES:
        log("%d check(s) failed:\n  %s" % (len(FAILURES), "\n  ".join(FAILURES)))
        return 1
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
