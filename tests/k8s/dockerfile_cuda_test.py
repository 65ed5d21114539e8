#!/usr/bin/env python3
"""Structure of deploy/docker/Dockerfile.cuda, checked as text (quick, no buildah needed; the
image itself is built and run by tests/deploy/container_cuda_test.py, ctest debian13_docker),
and that it agrees with deploy/k8s.

  dockerfile_cuda_test.py REPO_ROOT     check the repository
  dockerfile_cuda_test.py --self-test   show that broken Dockerfiles are reported

Checked: the stages build and runtime-base come FROM debian:trixie and runtime-prebuilt and
runtime FROM runtime-base; nothing is downloaded from outside Debian (no curl, wget, git clone,
pip or ADD of a URL, no other base image); the build stage has ARG CUDNN=stub, answers the
nvidia-cudnn question (I Decline for stub, I Agree for nvidia), makes the stub with
scripts/cudnn_stub.sh, enables contrib and non-free, installs LibTorch CUDA, the CUDA toolkit
and NCCL (and libgloo-cuda-dev, not the conflicting libgloo-dev), configures the full build with
-DRDATTN_WITH_CUDA=ON and -DRDATTN_WITH_MPI=ON, fails unless the configure summary matches
`rdattn: torch 2\\..*cuda=ON.*nccl=ON`, builds the six binaries and fails unless rdattn-train
links libnccl and libtorch_cuda (ldd), with ccache in a cache mount; runtime-base installs no
-dev package or compiler, enables contrib and non-free, runs as the numeric user of deploy/k8s,
has the MPIJob's sshd config, EXPOSEs 2222 and has a HEALTHCHECK; runtime copies /opt/rdattn
from the build stage and checks that ldd finds every library.
"""
import os
import re
import sys

BINARIES = ["rdattn-coordinator", "rdattn-worker", "rdattn", "rdattn-train", "rdattn-data", "rdattn-gpu-info"]
STAGES = ["build", "runtime-base", "runtime-prebuilt", "runtime"]
BUILD_PACKAGES = ["libtorch-cuda-dev", "libgloo-cuda-dev", "nvidia-cuda-toolkit", "libnccl-dev", "libgrpc++-dev",
                  "prometheus-cpp-dev", "libopenmpi-dev", "ccache"]
RUNTIME_PACKAGES = ["libtorch-cuda-2.6", "libnccl2", "libcudart12", "openmpi-bin", "openssh-server"]
COMPILERS = re.compile(r"^(g\+\+|gcc|cpp|clang|cmake|binutils|make|nvidia-cuda-toolkit|dpkg-dev)(-\d+)?$")


def stages(text):
    """[(base image, stage name, body)] per FROM, with line continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    out = []
    for l in joined.splitlines():
        m = re.match(r"\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", l, re.I)
        if m:
            out.append([m.group(1), m.group(2), ""])
        elif out:
            out[-1][2] += l + "\n"
    return out


def apt_packages(body):
    """The package names of every `apt-get install` of a stage body."""
    names = []
    for m in re.finditer(r"apt-get\s+install\s+([^&;|]*)", body):
        names += [w for w in m.group(1).split() if not w.startswith("-")]
    return names


def downloads(text):
    """Commands that fetch from outside Debian's archive, per instruction."""
    problems = []
    for base, name, body in stages(text):
        for l in body.splitlines():
            kw = l.strip().split(" ", 1)[0].upper()
            if kw not in ("RUN", "ADD"):
                continue
            if kw == "ADD" and re.search(r"https?://|git@", l):
                problems.append("stage %s: ADD of a URL: %s" % (name, l.strip()[:120]))
            for cmd, what in ((r"curl", "curl"), (r"wget", "wget"), (r"git\s+clone", "git clone"),
                              (r"pip3?\s+install|python3?\s+-m\s+pip", "pip")):
                if re.search(r"(^RUN\s+(--mount\S*\s+)*|&&|\|\||;|\||\$\(|`)\s*%s\b" % cmd, l.strip()):
                    problems.append("stage %s: a download with %s: %s" % (name, what, l.strip()[:120]))
            if kw == "RUN" and re.search(r"https?://", l):
                problems.append("stage %s: a URL in a RUN: %s" % (name, l.strip()[:120]))
    return problems


def check(text, k8s_uid=10001, ssh_home="/home/rdattn"):
    problems = []
    st = stages(text)
    names = [s[1] for s in st]
    if names != STAGES:
        return ["the stages are %s, not %s" % (names, STAGES)]
    by = {name: (base, body) for base, name, body in st}
    for name in ("build", "runtime-base"):
        if by[name][0] != "debian:trixie":
            problems.append("stage %s is FROM %s, not debian:trixie" % (name, by[name][0]))
    for name in ("runtime-prebuilt", "runtime"):
        if by[name][0] != "runtime-base":
            problems.append("stage %s is FROM %s, not runtime-base" % (name, by[name][0]))
    problems += downloads(text)
    build, base = by["build"][1], by["runtime-base"][1]

    # cuDNN: the argument, the debconf answer, the stub.
    if not re.search(r"^ARG\s+CUDNN=stub\s*$", build, re.M):
        problems.append("the build stage has no ARG CUDNN=stub (the default must need no NVIDIA download)")
    if "nvidia-cudnn nvidia-cudnn/question select" not in build or "debconf-set-selections" not in build:
        problems.append("the build stage does not preseed the nvidia-cudnn/question answer")
    if not re.search(r"stub\)\s*answer=\"I Decline\"", build) or not re.search(r"nvidia\)\s*answer=\"I Agree\"", build):
        problems.append("CUDNN=stub must answer \"I Decline\" and CUDNN=nvidia \"I Agree\"")
    if "scripts/cudnn_stub.sh" not in build or not re.search(r"rdattn-cudnn-stub\s+\S*libtorch_cuda\.so", build):
        problems.append("the build stage does not make the cuDNN stub with scripts/cudnn_stub.sh from libtorch_cuda.so")
    for name in ("build", "runtime-base"):
        if not re.search(r"sed\s.*contrib.*non-free", by[name][1]):
            problems.append("stage %s does not enable contrib and non-free" % name)

    # The build.
    pk = apt_packages(build)
    for p in BUILD_PACKAGES:
        if p not in pk:
            problems.append("the build stage does not install %s" % p)
    if "libgloo-dev" in pk:
        problems.append("libgloo-dev conflicts with libtorch-cuda-dev (libgloo-cuda-dev is the one)")
    cm = re.search(r"cmake\s+-S\s+\S+\s+-B\s+\S+([^\n]*)", build)
    if not cm:
        problems.append("no cmake configure of the project in the build stage")
    else:
        opts = cm.group(1)
        for o in ("-DRDATTN_WITH_CUDA=ON", "-DRDATTN_WITH_MPI=ON"):
            if o not in opts:
                problems.append("the project is not configured with %s" % o)
        if "-DRDATTN_TRAINER_ONLY=ON" in opts:
            problems.append("a trainer-only build has no worker daemon")
    if not re.search(r"grep\s+(-\w+\s+)*\"rdattn: torch 2\\\.\.\*cuda=ON\.\*nccl=ON\"", build):
        problems.append("the configure summary is not checked for rdattn: torch 2.x, cuda=ON, nccl=ON")
    for b in BINARIES:
        if not re.search(r"/%s(\s|$)" % re.escape(b), build):
            problems.append("the build stage does not install %s" % b)
    if not re.search(r"ldd\s+/opt/rdattn/bin/rdattn-train", build) or "libnccl" not in build \
            or "libtorch_cuda" not in build:
        problems.append("no ldd check that rdattn-train links libnccl and libtorch_cuda")
    if not re.search(r"--mount=type=cache,\S*target=/root/\.cache/ccache", build):
        problems.append("no ccache cache mount in the build RUN")

    # runtime-base.
    pk = apt_packages(base)
    for p in RUNTIME_PACKAGES:
        if p not in pk:
            problems.append("runtime-base does not install %s" % p)
    bad = [p for p in pk if p.endswith("-dev") or COMPILERS.match(p)]
    if bad:
        problems.append("runtime-base installs -dev packages or compilers: %s" % ", ".join(bad))
    if not re.search(r"Provides: nvidia-cudnn \(= \$\{cudnn\}\), libcuda\.so\.1", base):
        problems.append("runtime-base has no stand-in for nvidia-cudnn and libcuda.so.1 (it would pull "
                        "nvidia-cuda-dev and the driver's libcuda1 into the runtime image)")
    user = re.findall(r"^USER\s+(\S+)", base + by["runtime"][1], re.M)
    if not user or not user[-1].split(":")[0].isdigit():
        problems.append("runtime USER %r is not numeric (runAsNonRoot cannot verify a name)" % (user[-1] if user else None))
    elif int(user[-1].split(":")[0]) != k8s_uid:
        problems.append("runtime USER %s != runAsUser %d of deploy/k8s" % (user[-1], k8s_uid))
    if "openssh-server" not in base or (ssh_home + "/.sshd_config") not in base:
        problems.append("no sshd for the MPIJob workers (%s/.sshd_config)" % ssh_home)
    if not re.search(r"^EXPOSE\s.*\b2222\b", base, re.M):
        problems.append("port 2222 (sshd) is not EXPOSEd")
    if not re.search(r"^HEALTHCHECK\s.*CMD\s", base, re.M):
        problems.append("runtime-base has no HEALTHCHECK")

    # runtime.
    runtime = by["runtime"][1]
    if not re.search(r"COPY\s+--from=build\s+/opt/rdattn\s", runtime):
        problems.append("the runtime stage does not copy /opt/rdattn from the build stage")
    if "not found" not in runtime or "ldd" not in runtime:
        problems.append("the runtime stage does not check that ldd finds every library")
    return problems


def k8s_facts(root):
    """runAsUser of the manifests and the MPIJob's sshAuthMountPath, read as text."""
    k8s = os.path.join(root, "deploy", "k8s")
    with open(os.path.join(k8s, "base", "coordinator-deployment.yaml")) as f:
        uid = int(re.search(r"runAsUser:\s*(\d+)", f.read()).group(1))
    with open(os.path.join(k8s, "components", "mpijob", "mpijob.yaml")) as f:
        mj = f.read()
    ssh = re.search(r"sshAuthMountPath:\s*(\S+)", mj).group(1)
    sshd = re.search(r"-f,\s*(\S+?)\]", mj).group(1)
    return uid, os.path.dirname(ssh), sshd


def insert_after_first(t, anchor, line):
    i = t.index(anchor)
    j = t.index("\n", i) + 1
    return t[:j] + line + "\n" + t[j:]


def main():
    if sys.argv[1:] == ["--self-test"]:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "deploy", "docker", "Dockerfile.cuda")) as f:
            good = f.read()
        assert check(good) == [], check(good)
        build_from = "FROM debian:trixie AS build"
        cases = [
            ("nvidia/cuda base", lambda t: t.replace(build_from, "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04 AS build"),
             "not debian:trixie"),
            ("CUDA off", lambda t: t.replace("-DRDATTN_WITH_CUDA=ON", "-DRDATTN_WITH_CUDA=OFF"), "RDATTN_WITH_CUDA=ON"),
            ("trainer only", lambda t: t.replace("-DRDATTN_WITH_MPI=ON", "-DRDATTN_WITH_MPI=ON -DRDATTN_TRAINER_ONLY=ON"),
             "trainer-only"),
            ("no cuda grep", lambda t: t.replace('"rdattn: torch 2\\..*cuda=ON.*nccl=ON"', '"rdattn: torch"'),
             "cuda=ON, nccl=ON"),
            ("no ldd check", lambda t: t.replace("ldd /opt/rdattn/bin/rdattn-train", "true /opt/rdattn/bin/rdattn-train"),
             "ldd check"),
            ("curl download", lambda t: insert_after_first(t, "ARG CUDNN=stub",
                                                            "RUN curl -fsSL -o /tmp/l.zip https://download.pytorch.org/l.zip"),
             "download with curl"),
            ("git clone", lambda t: insert_after_first(t, "ARG CUDNN=stub",
                                                        "RUN git clone --depth 1 https://github.com/grpc/grpc /tmp/grpc"),
             "git clone"),
            ("pip install", lambda t: insert_after_first(t, "ARG CUDNN=stub", "RUN pip3 install cmake"), "with pip"),
            ("ADD a URL", lambda t: insert_after_first(t, "ARG CUDNN=stub", "ADD https://example.org/x.tgz /tmp/"),
             "ADD of a URL"),
            ("cudnn default", lambda t: t.replace("ARG CUDNN=stub", "ARG CUDNN=nvidia"), "ARG CUDNN=stub"),
            ("cudnn agreed", lambda t: t.replace('stub) answer="I Decline"', 'stub) answer="I Agree"'), "I Decline"),
            ("no stub", lambda t: t.replace("rdattn-cudnn-stub \"/usr/lib", "true \"/usr/lib"), "cudnn_stub.sh"),
            ("libgloo-dev", lambda t: t.replace("libgloo-cuda-dev", "libgloo-dev"), "conflicts"),
            ("no contrib", lambda t: t.replace("contrib( |$)/!s/$/ contrib/;", "", 1), "contrib and non-free"),
            ("dev in runtime", lambda t: t.replace("libnccl2 libcudart12", "libnccl2 libnccl-dev libcudart12"),
             "-dev packages"),
            ("no stand-ins", lambda t: t.replace(", libcuda.so.1 (= ${driver})", ""), "stand-in"),
            ("one stage", lambda t: t[:t.index("# ---------------------------------------------------------------"
                                               "-------------- runtime-base")], "the stages are"),
            ("named user", lambda t: t.replace("USER 10001:10001", "USER rdattn"), "not numeric"),
            ("no ccache mount", lambda t: t.replace("--mount=type=cache,id=rdattn-ccache-cuda,target=/root/.cache/ccache ",
                                                    ""), "ccache"),
        ]
        for what, mutate, want in cases:
            bad = mutate(good)
            assert bad != good, what
            problems = check(bad)
            assert any(want in p for p in problems), (what, problems)
            print("self-test: %-16s -> %s" % (what, [p for p in problems if want in p][0]))
        print("%d passed, 0 failed" % len(cases))
        return 0
    root = sys.argv[1]
    with open(os.path.join(root, "deploy", "docker", "Dockerfile.cuda")) as f:
        text = f.read()
    uid, home, sshd = k8s_facts(root)
    problems = check(text, uid, home)
    if sshd != home + "/.sshd_config":
        problems.append("MPIJob starts sshd with %s, the image has %s/.sshd_config" % (sshd, home))
    for p in problems:
        print("dockerfile_cuda_test:", p)
    if problems:
        print("0 passed, 1 failed")
        return 1
    st = stages(text)
    print("dockerfile_cuda_test: %d stages (%s); Debian 13 packages only (no download); CUDNN=stub by default; "
          "full build with cuda=ON, nccl=ON checked; USER %d as in deploy/k8s"
          % (len(st), ", ".join("%s AS %s" % (s[0], s[1]) for s in st), uid))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
