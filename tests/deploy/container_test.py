#!/usr/bin/python3
"""The CPU image (deploy/docker/Dockerfile.cpu), built with buildah and run, with no registry.

  container_test.py --bin BUILD_DIR --source REPO_ROOT [--keep]

1. Base: `debootstrap --variant=minbase bookworm` from the Debian mirror that this machine's apt
   sources name, straight into a mounted `buildah from scratch` container, committed as
   docker.io/library/debian:bookworm, so `FROM debian:bookworm` resolves locally (--pull-never).
   Its apt sources are the host's suites (bookworm, -updates, -security) on that mirror.
2. Image: the Dockerfile's `runtime-prebuilt` target (runtime-base + binaries from outside the
   image) from a context holding this build's five binaries in deploy/docker/prebuilt/bin, and in
   prebuilt/lib any library they load from outside Debian's packages (none on a plain Debian 12;
   CUDA/NCCL where the build found a CUDA toolkit). `buildah build --isolation chroot
   --storage-driver vfs --format docker`. The build stage (a from-source build: 15+ minutes on
   2 cores) is not built; runtime-base, the packages, the user, the labels and the HEALTHCHECK
   are exactly what the default target ships. Checked: the build log never ran the build stage.
3. Checks on the image: the config (user 10001:10001, the HEALTHCHECK command, the OCI labels,
   port 50051), no -dev package, compiler or source inside; then with `buildah run`: the user is
   uid 10001, `rdattn-coordinator --help` prints its usage, `rdattn-train validate` on a job file
   resolves it, and tests/deploy/container_sweep.sh runs in one container: rdattn-data shards,
   a coordinator and a worker on loopback, the image's healthcheck SERVING, a 2 x 2 tiny sweep
   submitted and watched by the client to SUCCEEDED, the report with its gnuplot plots, and the
   healthcheck failing once the coordinator is stopped.
Everything (storage root, run root, TMPDIR, the base) lives in one temporary folder, removed at
the end, pass or fail (processes chrooted there are killed, mounts under it unmounted); a folder
left by a killed run is removed by the next run. Exit 77 (skipped) only when buildah or
debootstrap is not installed or the test is not root (debootstrap and chroot isolation need it).
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BINARIES = [("coordinator", "rdattn-coordinator"), ("worker/daemon", "rdattn-worker"), ("client", "rdattn"),
            ("worker/trainer", "rdattn-train"), ("worker/data", "rdattn-data")]
PREFIX = "rdattn-container-test-"
IMAGE = "localhost/rdattn-cpu-test:latest"
BASE = "docker.io/library/debian:bookworm"
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


def apt_mirrors():
    """(debian mirror, security mirror or None) from the apt sources (deb822 and one-line)."""
    entries = []  # (uri, [suites])
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for stanza in re.split(r"\n\s*\n", f.read()):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if fields.get("Enabled", "yes").lower() == "no" or "deb" not in fields.get("Types", "").split():
                    continue
                for uri in fields.get("URIs", "").split():
                    entries.append((uri, fields.get("Suites", "").split()))
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                    if m:
                        entries.append((m.group(1), [m.group(2)]))
    main = next((u for u, s in entries if "bookworm" in s), None)
    security = next((u for u, s in entries if "bookworm-security" in s), None)
    return (main or "http://deb.debian.org/debian").rstrip("/"), security and security.rstrip("/")


def owned_by_a_package(path):
    """dpkg knows the file (as /lib/... or /usr/lib/..., Debian 12 is merged-/usr)."""
    real = os.path.realpath(path)
    candidates = {path, real}
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.add(p[len("/usr"):])
        else:
            candidates.add("/usr" + p)
    return any(subprocess.run(["dpkg", "-S", c], capture_output=True).returncode == 0 for c in candidates)


def stage_context(ctx, bin_dir, source):
    """The build context: the healthcheck script, the binaries, the non-Debian libraries."""
    docker = os.path.join(ctx, "deploy", "docker")
    os.makedirs(os.path.join(docker, "prebuilt", "bin"))
    os.makedirs(os.path.join(docker, "prebuilt", "lib"))
    shutil.copy2(os.path.join(source, "deploy", "docker", "rdattn-healthcheck"), docker)
    extra = {}
    for sub, name in BINARIES:
        path = os.path.join(bin_dir, sub, name)
        shutil.copy2(path, os.path.join(docker, "prebuilt", "bin", name))
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
        if "not found" in ldd:
            raise AssertionError("%s has unresolved libraries on this machine:\n%s" % (path, ldd))
        for soname, lib in re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M):
            if soname not in extra and not owned_by_a_package(lib):
                extra[soname] = lib
    for soname, lib in sorted(extra.items()):
        shutil.copy(os.path.realpath(lib), os.path.join(docker, "prebuilt", "lib", soname))
    log("staged %d binaries; libraries from outside Debian's packages: %s"
        % (len(BINARIES), ", ".join("%s (%s)" % kv for kv in sorted(extra.items())) or "none"))
    return extra


def make_base(b, tmp):
    mirror, security = apt_mirrors()
    log("debootstrap --variant=minbase bookworm from %s" % mirror)
    ctr = b("from", "scratch").stdout.strip()
    mnt = b("mount", ctr).stdout.strip()
    t = time.time()
    p = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", mnt, mirror], capture_output=True,
                       text=True, timeout=900, env=dict(os.environ, TMPDIR=os.path.join(tmp, "tmp")))
    if p.returncode != 0:
        raise AssertionError("debootstrap exited %d:\n%s\n%s" % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    log("debootstrap: %.0f s" % (time.time() - t))
    suites = "bookworm bookworm-updates"
    sources = "Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n" \
              "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" % (mirror, suites)
    if security:
        sources += "\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n" \
                   "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" % security
    with open(os.path.join(mnt, "etc", "apt", "sources.list.d", "debian.sources"), "w") as f:
        f.write(sources)
    os.remove(os.path.join(mnt, "etc", "apt", "sources.list"))
    for junk in glob.glob(os.path.join(mnt, "var", "cache", "apt", "archives", "*.deb")) + \
            glob.glob(os.path.join(mnt, "var", "lib", "apt", "lists", "*_*")):
        os.remove(junk)
    b("umount", ctr)
    b("commit", "-q", ctr, BASE, timeout=900)
    b("rm", ctr)


def image_config(b, ref):
    data = json.loads(b("inspect", "--type", "image", ref).stdout)
    return data["Docker"]["config"]


def image_size(b, ref):
    """buildah's size of the image (uncompressed, as `buildah images` shows it)."""
    return b("images", "--format", "{{.Size}}", ref).stdout.strip().splitlines()[0]


def corpus_text(seed, docs, words):
    rng = random.Random(seed)
    vocab = ["the", "model", "reads", "depth", "value", "query", "block", "routes", "over", "layers",
             "and", "a", "residual", "stream", "with", "learned", "softmax", "mixture", "of", "sources"]
    nxt = {w: rng.sample(vocab, 4) for w in vocab}
    out = []
    for _ in range(docs):
        w = rng.choice(vocab)
        text = []
        for _ in range(words):
            text.append(w)
            w = rng.choice(nxt[w])
        out.append(" ".join(text))
    return out


def write_work(work):
    """The container's /work: text documents, a sweep file and a RunSpec job file."""
    text = os.path.join(work, "text")
    os.makedirs(text)
    for i, doc in enumerate(corpus_text(1, 200, 60)):
        with open(os.path.join(text, "train%03d.txt" % i), "w") as f:
            f.write(doc)
    for name, seed in (("val", 2), ("test", 3)):
        with open(os.path.join(text, name + ".txt"), "w") as f:
            f.write("\n".join(corpus_text(seed, 20, 60)))
    data = {"train_shards": ["/work/data/ct_train_*.bin"], "val_shards": ["/work/data/ct_val_000000.bin"],
            "test_shards": ["/work/data/ct_test_000000.bin"], "tokenizer": "byte"}
    with open(os.path.join(work, "sweep.yaml"), "w") as f:
        f.write("""name: container
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [1, 2]
data:
  train_shards: ["%(train)s"]
  val_shards: ["%(val)s"]
  test_shards: ["%(test)s"]
  tokenizer: byte
  val_windows: 8
  test_windows: 8
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 6144
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [3072, 6144]
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 1
""" % {"train": data["train_shards"][0], "val": data["val_shards"][0], "test": data["test_shards"][0]})
    job = {"run_id": "container-validate", "init_seed": 5, "model": {"preset": "tiny", "arm": "rd"},
           "data": dict(data, data_seed=11, val_windows=8, test_windows=8),
           "optim": {"peak_lr": 3e-3, "warmup_steps": 2},
           "schedule": {"total_tokens": 8 * 512, "global_batch_tokens": 512, "micro_batch_sequences": 2,
                        "milestones_tokens": [4 * 512, 8 * 512]},
           "parallel": {"world_size": 1, "threads_per_rank": 1, "precision": "fp32"},
           "checkpoint": {"dir": "/work/validate-ckpt", "keep_last": 1}}
    with open(os.path.join(work, "job.json"), "w") as f:
        json.dump(job, f)
    for root, dirs, files in os.walk(work):
        for n in [root] + [os.path.join(root, x) for x in files]:
            os.chown(n, 10001, 10001)


def checks_on_config(cfg):
    user = cfg.get("User", "")
    check(user == "10001:10001", "the image's user is 10001:10001 (%r)" % user)
    hc = cfg.get("Healthcheck") or {}
    check(hc.get("Test") == ["CMD", "rdattn-healthcheck"], "HEALTHCHECK runs rdattn-healthcheck (%r)" % hc)
    labels = cfg.get("Labels") or {}
    for k in ("title", "description", "version", "revision", "base.name"):
        check(labels.get("org.opencontainers.image." + k), "OCI label org.opencontainers.image.%s = %r"
              % (k, labels.get("org.opencontainers.image." + k)))
    check("50051/tcp" in (cfg.get("ExposedPorts") or {}), "port 50051 exposed")
    check(any(e.startswith("PATH=/opt/rdattn/bin:") for e in cfg.get("Env", [])), "/opt/rdattn/bin on PATH")


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


def run_test(args, tmp):
    b = Buildah(tmp)
    os.makedirs(os.path.join(tmp, "tmp"))
    t0 = time.time()
    make_base(b, tmp)
    t_base = time.time() - t0
    check(True, "base image %s from debootstrap (%.0f s)" % (BASE, t_base))

    ctx = os.path.join(tmp, "ctx")
    stage_context(ctx, args.bin, args.source)
    rev = subprocess.run(["git", "-C", args.source, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    t1 = time.time()
    p = b("build", "--isolation", "chroot", "--pull-never", "--layers=false", "--format", "docker",
          "--target", "runtime-prebuilt", "--build-arg", "REVISION=" + rev, "-t", IMAGE,
          "-f", os.path.join(args.source, "deploy", "docker", "Dockerfile.cpu"), ctx, timeout=1500,
          check_rc=False)
    t_build = time.time() - t1
    with open(os.path.join(tmp, "build.log"), "w") as f:
        f.write(p.stdout + p.stderr)
    if not check(p.returncode == 0, "buildah build --target runtime-prebuilt (%.0f s)" % t_build):
        log(p.stdout[-6000:] + p.stderr[-3000:])
        return
    steps = re.findall(r"^\[\d+/\d+\] STEP \d+/\d+: FROM .* AS (\S+)", p.stdout, re.M)
    check("build" not in steps and "runtime-base" in steps and "runtime-prebuilt" in steps,
          "only runtime-base and runtime-prebuilt were built (stages run: %s)" % ", ".join(steps))
    size, base_size = image_size(b, IMAGE), image_size(b, BASE)
    log("image size: %s %s (base %s)" % (IMAGE, size, base_size))
    checks_on_config(image_config(b, IMAGE))

    work = os.path.join(tmp, "work")
    write_work(work)
    shutil.copy2(os.path.join(args.source, "tests", "deploy", "container_sweep.sh"), work)
    ctr = b("from", "--pull-never", IMAGE).stdout.strip()

    def run(*cmd, timeout=120):
        return b("run", "--isolation", "chroot", "--volume", work + ":/work", ctr, "--", *cmd,
                 timeout=timeout, check_rc=False)

    r = run("id", "-u")
    check(r.returncode == 0 and r.stdout.strip() == "10001", "buildah run runs as uid 10001 (%r)" % r.stdout.strip())
    r = run("dpkg-query", "-W", "-f=${Package}\n")
    pkgs = r.stdout.split()
    npkg = len(pkgs)
    dev = [p for p in pkgs if p.endswith("-dev") or re.match(r"(g\+\+|gcc|cpp|clang|cmake|binutils)(-\d+)?$", p)]
    r = run("sh", "-c", "for c in cc c++ gcc g++ clang cmake ld make; do command -v $c; done; ls -d /src /build "
                        "2>/dev/null; true")
    dev += r.stdout.split()
    check(npkg > 100 and not dev, "no -dev package, compiler or source among the image's %d packages (%s)"
          % (npkg, dev or "none found"))
    r = run("rdattn-coordinator", "--help")
    out = r.stdout + r.stderr
    check(r.returncode == 0 and "rdattn-coordinator --listen HOST:PORT --db FILE" in out
          and "error while loading shared libraries" not in out,
          "rdattn-coordinator --help prints its usage (exit %d)" % r.returncode)
    check("--listen" in r.stdout and "--lease-seconds" in r.stdout,
          "rdattn-coordinator --help lists --listen and --lease-seconds on stdout")
    t2 = time.time()
    r = run("bash", "/work/container_sweep.sh", "/work", timeout=600)
    t_sweep = time.time() - t2
    log(r.stdout[-5000:] + r.stderr[-3000:])
    if not check(r.returncode == 0, "container_sweep.sh in the image exited 0 (%.0f s)" % t_sweep):
        for name in ("coordinator.log", "worker.log"):
            path = os.path.join(work, "out", name)
            if os.path.exists(path):
                with open(path) as f:
                    log("--- %s (tail)\n%s" % (name, f.read()[-3000:]))
    r = run("rdattn-train", "validate", "--job", "/work/job.json")
    check(r.returncode == 0 and '"container-validate"' in r.stdout and '"preset"' in r.stdout,
          "rdattn-train validate --job resolves the job file (exit %d): %s"
          % (r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:] ))
    r = run("rdattn-train", "validate", "--job", "/work/nosuch.json")
    check(r.returncode != 0, "rdattn-train validate fails on a missing job file (exit %d)" % r.returncode)

    get_path = os.path.join(work, "out", "get.json")
    if check(os.path.exists(get_path), "the sweep's state was written (rdattn get --format json)"):
        with open(get_path) as f:
            sweep = json.load(f)
        state = sweep.get("state") or sweep.get("sweep", {}).get("state")
        jobs = sweep.get("jobs") or sweep.get("sweep", {}).get("jobs") or []
        check(state == "SWEEP_STATE_SUCCEEDED", "the sweep SUCCEEDED (%s)" % state)
        states = [j.get("state") for j in jobs]
        check(len(jobs) == 4 and all(s == "JOB_STATE_SUCCEEDED" for s in states),
              "4 jobs (2 arms x 2 seeds), every one SUCCEEDED (%s)" % states)
    pngs = glob.glob(os.path.join(work, "out", "report", "**", "*.png"), recursive=True)
    check(os.path.exists(os.path.join(work, "out", "report", "report.md")) and len(pngs) >= 4,
          "rdattn report --format md wrote report.md and %d PNG plots (gnuplot in the image)" % len(pngs))
    for name in ("health-up.txt", "health-down.txt"):
        path = os.path.join(work, "out", name)
        if os.path.exists(path):
            with open(path) as f:
                log("%s: %s" % (name, f.read().strip()))
    b("rm", ctr)
    log("figures: base %.0f s, image build %.0f s, sweep in the container %.0f s, image %s, %d packages"
        % (t_base, t_build, t_sweep, size, npkg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the build folder with the binaries")
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (debugging)")
    args = ap.parse_args()
    missing = [t for t in ("buildah", "debootstrap") if not shutil.which(t, path=os.environ.get("PATH", "") +
                                                                         ":/usr/sbin:/sbin")]
    if missing:
        log("SKIPPED: %s not installed (scripts/setup.sh installs buildah and debootstrap)" % " and ".join(missing))
        return 77
    if os.geteuid() != 0:
        log("SKIPPED: not root (debootstrap and buildah's chroot isolation need root)")
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
