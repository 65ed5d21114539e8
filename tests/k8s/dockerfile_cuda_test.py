#!/usr/bin/env python3
"""Structure of deploy/docker/Dockerfile.cuda (there is no Docker engine on the build machines,
so the file is checked as text), and that it agrees with deploy/k8s.

  dockerfile_cuda_test.py REPO_ROOT     check the repository
  dockerfile_cuda_test.py --self-test   show that broken Dockerfiles are reported
"""
import os
import re
import sys

BINARIES = ["rdattn-coordinator", "rdattn-worker", "rdattn", "rdattn-train", "rdattn-data"]


def stages(text):
    """[(base image, stage name, body)] per FROM, with line continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [l for l in joined.splitlines() if not l.lstrip().startswith("#")]
    out = []
    for l in lines:
        m = re.match(r"\s*FROM\s+(\S+)(?:\s+AS\s+(\S+))?", l, re.I)
        if m:
            out.append([m.group(1), m.group(2), ""])
        elif out:
            out[-1][2] += l + "\n"
    return out


def check(text, k8s_uid=10001, ssh_home="/home/rdattn"):
    problems = []
    st = stages(text)
    if len(st) < 2:
        return ["need a build stage and a runtime stage, found %d stage(s)" % len(st)]
    (b_img, b_name, build), (r_img, _, runtime) = st[0], st[-1]
    if not re.match(r"nvidia/cuda:\S*-devel-", b_img):
        problems.append("build stage base %s is not an nvidia/cuda *-devel image" % b_img)
    if not re.match(r"nvidia/cuda:\S*-runtime-", r_img):
        problems.append("runtime stage base %s is not an nvidia/cuda *-runtime image" % r_img)
    if "ubuntu22.04" not in text:
        problems.append("no ubuntu22.04 base")
    for arg in ("LIBTORCH_URL", "LIBTORCH_SHA256"):
        if not re.search(r"^ARG\s+%s\b" % arg, build, re.M):
            problems.append("build stage has no ARG %s" % arg)
    if not re.search(r"\$\{?LIBTORCH_SHA256\}?\s+\S*libtorch\S*\"?\s*\|\s*sha256sum\s+-c", build):
        problems.append("the LibTorch download is not verified with sha256sum -c against LIBTORCH_SHA256")
    if not re.search(r"test\s+-n\s+\"?\$\{?LIBTORCH_SHA256", build):
        problems.append("an empty LIBTORCH_SHA256 is not refused")
    if re.search(r"^ARG\s+LIBTORCH_SHA256=\S", build, re.M):
        problems.append("LIBTORCH_SHA256 has a default; the builder must supply the checksum")
    cm = re.search(r"cmake\s+-S\s+\.\s+-B\s+\S+([^\n]*)", build)
    if not cm:
        problems.append("no cmake configure of the project in the build stage")
    else:
        opts = cm.group(1)
        if "-DRDATTN_WITH_CUDA=ON" not in opts:
            problems.append("the project is not configured with -DRDATTN_WITH_CUDA=ON")
        if not re.search(r"-DTorch_DIR=\S+", opts):
            problems.append("the project is not configured with -DTorch_DIR")
        if "-DRDATTN_TRAINER_ONLY=ON" in opts:
            problems.append("a trainer-only build has no worker daemon")
    for b in BINARIES:
        if not re.search(r"/%s(\s|$)" % re.escape(b), build):
            problems.append("the build stage does not install %s" % b)
    if not re.search(r"COPY\s+--from=%s\s+/opt/rdattn/bin\b" % re.escape(b_name or "0"), runtime):
        problems.append("the runtime stage does not copy /opt/rdattn/bin from the build stage")
    if not re.search(r"COPY\s+--from=\S+\s+/opt/libtorch/lib\b", runtime):
        problems.append("the runtime stage does not copy LibTorch's libraries")
    user = re.findall(r"^USER\s+(\S+)", runtime, re.M)
    if not user or not user[-1].split(":")[0].isdigit():
        problems.append("runtime USER %r is not numeric (runAsNonRoot cannot verify a name)" % (user[-1] if user else None))
    elif int(user[-1].split(":")[0]) != k8s_uid:
        problems.append("runtime USER %s != runAsUser %d of deploy/k8s" % (user[-1], k8s_uid))
    if "openssh-server" not in runtime or (ssh_home + "/.sshd_config") not in runtime:
        problems.append("no sshd for the MPIJob workers (%s/.sshd_config)" % ssh_home)
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


def main():
    if sys.argv[1:] == ["--self-test"]:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "deploy", "docker", "Dockerfile.cuda")) as f:
            good = f.read()
        assert check(good) == [], check(good)
        cases = [
            ("no sha256 check", lambda t: t.replace("sha256sum -c -", "true"), "not verified with sha256sum"),
            ("CUDA off", lambda t: t.replace("-DRDATTN_WITH_CUDA=ON", "-DRDATTN_WITH_CUDA=OFF"), "RDATTN_WITH_CUDA=ON"),
            ("no Torch_DIR", lambda t: re.sub(r"-DTorch_DIR=\S+", "", t), "-DTorch_DIR"),
            ("one stage", lambda t: t[:t.index("FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime")], "runtime stage"),
            ("named user", lambda t: t.replace("USER 10001:10001", "USER rdattn"), "not numeric"),
            ("checksum default", lambda t: t.replace("ARG LIBTORCH_SHA256=\n", "ARG LIBTORCH_SHA256=abc\n"), "has a default"),
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
    print("dockerfile_cuda_test: %d stages (%s); LibTorch sha256-checked; CUDA build with Torch_DIR; "
          "USER %d as in deploy/k8s" % (len(st), ", ".join("%s AS %s" % (s[0], s[1]) for s in st), uid))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
