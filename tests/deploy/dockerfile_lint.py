#!/usr/bin/python3
"""A lint of deploy/docker/Dockerfile.cpu and Dockerfile.cuda (hadolint is not in Debian), plus
buildah's own parse of every stage of Dockerfile.cuda, quick and without any image.

  dockerfile_lint.py REPO_ROOT       lint both files; with buildah installed, also the parse
  dockerfile_lint.py --self-test     show that each rule reports a broken file

Rules: every instruction is a Dockerfile instruction; stage names are unique; `COPY --from`
names an earlier stage; every $VAR of an instruction is declared where it is used (an ARG or ENV
of the stage or of the stage it is built FROM, a global ARG in FROM lines only, a variable the
RUN sets itself, or a variable the base image defines: PATH, LD_LIBRARY_PATH, HOME) -- a global
ARG used in RUN without redeclaring it is empty there; exec-form CMD,
ENTRYPOINT and HEALTHCHECK CMD are valid JSON; `apt-get install` has -y and
--no-install-recommends and its RUN removes /var/lib/apt/lists; the last stage ends as a
non-root USER.

buildah parse (Dockerfile.cuda): for each stage, `buildah build --pull-never --layers=false
--target STAGE` in an empty temporary storage must stop at the stage's first FROM (debian:trixie),
spelled out with any global ARG expanded ("image not known": buildah read the whole file, found
the stage and resolved its ARGs, and nothing was downloaded); an unknown target must be refused.
That takes seconds; the image itself is built from Debian 13 packages and run by
tests/deploy/container_cuda_test.py (ctest debian13_docker, tens of minutes). The parse is also
what that test checks of the build stage when it builds only --target runtime-prebuilt.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
BASE_ENV = re.compile(r"^(PATH|LD_LIBRARY_PATH|HOME)$")
VAR = re.compile(r"\$(?:\{(\w+)(?:[:%#/][^}]*)?\}|(\w+))")


def instructions(text):
    """[(line number, KEYWORD, rest)] with continuations joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word, rest.strip()))
        buf = ""
    return out


def used_vars(s):
    return {a or b for a, b in VAR.findall(s)}


def lint(text):
    problems = []
    stages = []  # dicts: name, base, declared
    global_args = set()
    last_user = None
    for n, word, rest in instructions(text):
        kw = word.upper()
        if kw not in INSTRUCTIONS:
            problems.append("line %d: unknown instruction %s" % (n, word))
            continue
        if kw == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", rest, re.I)
            if not m:
                problems.append("line %d: FROM %s does not parse" % (n, rest))
                continue
            base, name = m.group(1), m.group(2)
            for v in used_vars(base) - global_args:
                problems.append("line %d: FROM uses $%s, which is no global ARG" % (n, v))
            if name and any(s["name"] == name for s in stages):
                problems.append("line %d: stage name %s used twice" % (n, name))
            parent = next((s for s in stages if s["name"] == base), None)
            declared = set(parent["declared"]) if parent else set()
            stages.append({"name": name, "base": base, "declared": declared})
            last_user = parent["user"] if parent else None
            stages[-1]["user"] = last_user
            continue
        if not stages:
            if kw == "ARG":
                global_args.add(rest.split("=", 1)[0].strip())
            else:
                problems.append("line %d: %s before the first FROM" % (n, kw))
            continue
        st = stages[-1]
        if kw == "ARG":
            st["declared"].add(rest.split("=", 1)[0].strip())
            continue
        check_text = rest
        if kw == "RUN":
            local = set(re.findall(r"(?:^|[\s;&|(])(\w+)=", rest)) | set(re.findall(r"\bfor\s+(\w+)\s+in\b", rest))
            undeclared = used_vars(rest) - st["declared"] - local
        else:
            undeclared = used_vars(check_text) - st["declared"]
        for v in sorted(x for x in undeclared if not BASE_ENV.match(x)):
            problems.append("line %d: %s uses $%s, declared by no ARG or ENV of this stage" % (n, kw, v))
        if kw == "ENV":
            pairs = re.findall(r"(\w+)=", rest) if "=" in rest.split()[0] else [rest.split()[0]]
            st["declared"].update(pairs)
        if kw == "COPY" or kw == "ADD":
            m = re.search(r"--from=(\S+)", rest)
            if m:
                src = m.group(1)
                earlier = [s["name"] for s in stages[:-1]]
                if src not in earlier and not re.search(r"[:/]", src) and not src.isdigit():
                    problems.append("line %d: COPY --from=%s names no earlier stage (%s)" % (n, src, earlier))
        if kw in ("CMD", "ENTRYPOINT", "HEALTHCHECK"):
            form = re.sub(r"^(--\w+=\S+\s+)*CMD\s+", "", rest) if kw == "HEALTHCHECK" else rest
            if kw == "HEALTHCHECK" and rest.strip() != "NONE" and not re.search(r"(^|\s)CMD\s", rest):
                problems.append("line %d: HEALTHCHECK without CMD" % n)
            if form.startswith("["):
                try:
                    json.loads(form)
                except ValueError:
                    problems.append("line %d: %s exec form is not valid JSON: %s" % (n, kw, form))
        if kw == "RUN" and re.search(r"apt-get\s+install", rest):
            if not re.search(r"apt-get\s+install\s+(\S+\s+)*?-y", rest):
                problems.append("line %d: apt-get install without -y" % n)
            if "--no-install-recommends" not in rest:
                problems.append("line %d: apt-get install without --no-install-recommends" % n)
            if "rm -rf /var/lib/apt/lists" not in rest:
                problems.append("line %d: the apt-get install RUN leaves /var/lib/apt/lists" % n)
        if kw == "USER":
            st["user"] = rest.split(":")[0]
    if stages:
        user = stages[-1]["user"]
        if user in (None, "0", "root"):
            problems.append("the last stage runs as root (USER %s)" % user)
    if not stages:
        problems.append("no FROM")
    return problems


def stage_names(text):
    return [m.group(1) for _, w, r in instructions(text) if w.upper() == "FROM"
            for m in [re.search(r"\s+AS\s+(\S+)\s*$", r, re.I)] if m]


def buildah_parse(path, targets):
    """[problem] from buildah's parse of the file for each target (no image is downloaded, none is
    in the empty storage: each target stops at its first FROM with "image not known")."""
    problems = []
    tmp = tempfile.mkdtemp(prefix="rdattn-dockerfile-lint-")
    try:
        flags = ["--root", os.path.join(tmp, "root"), "--runroot", os.path.join(tmp, "run"), "--storage-driver", "vfs"]
        env = dict(os.environ, TMPDIR=tmp)
        ctx = os.path.join(tmp, "ctx")
        os.makedirs(ctx)
        for target in list(targets) + ["no-such-stage"]:
            p = subprocess.run(["buildah"] + flags + ["build", "--isolation", "chroot", "--pull-never", "--layers=false",
                                                      "--target", target, "-f", path, ctx],
                               capture_output=True, text=True, timeout=120, env=env)
            out = p.stdout + p.stderr
            if target == "no-such-stage":
                ok = p.returncode != 0 and "not found" in out
                print("buildah --target %s: %s" % (target, "refused" if ok else "NOT refused"))
                if not ok:
                    problems.append("buildah accepted an unknown target: %s" % out[-500:])
                continue
            m = re.search(r"STEP 1/\d+: FROM (\S+)", out)
            ok = p.returncode != 0 and m and "$" not in m.group(1) and "image not known" in out
            print("buildah --target %s: stopped at FROM %s (%s)" % (target, m.group(1) if m else "?",
                                                                    "image not known" if ok else out.strip()[-300:]))
            if not ok:
                problems.append("buildah --target %s did not stop at an expanded base-image FROM: %s" % (target, out[-800:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return problems


GOOD = """ARG V=1
FROM debian:bookworm AS build
ARG V
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/* && echo $V
FROM debian:bookworm AS runtime
ENV X=1
RUN for b in a b; do echo $b $X; done
COPY --from=build /opt /opt
USER 10001:10001
HEALTHCHECK --interval=30s CMD ["true"]
CMD ["rdattn", "help"]
"""
BROKEN = {
    "unknown instruction": GOOD.replace("ENV X=1", "ENVV X=1"),
    "declared by no ARG": GOOD.replace("ARG V\n", ""),
    "names no earlier stage": GOOD.replace("--from=build", "--from=bulid"),
    "not valid JSON": GOOD.replace('CMD ["rdattn", "help"]', 'CMD ["rdattn", help]'),
    "--no-install-recommends": GOOD.replace(" --no-install-recommends", ""),
    "leaves /var/lib/apt/lists": GOOD.replace(" && rm -rf /var/lib/apt/lists/*", ""),
    "runs as root": GOOD.replace("USER 10001:10001", "USER root"),
    "used twice": GOOD.replace("AS runtime", "AS build"),
    "no global ARG": GOOD.replace("FROM debian:bookworm AS runtime", "FROM debian:${W} AS runtime"),
}


def main():
    if sys.argv[1:] == ["--self-test"]:
        failed = 0
        assert lint(GOOD) == [], lint(GOOD)
        for rule, text in BROKEN.items():
            probs = lint(text)
            hit = any(rule in p for p in probs)
            print("%s: %s -> %s" % ("ok" if hit else "MISSED", rule, probs))
            failed += not hit
        print("%d passed, %d failed" % (len(BROKEN) + 1 - failed, failed))
        return 1 if failed else 0
    root = sys.argv[1]
    problems = []
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        path = os.path.join(root, "deploy", "docker", name)
        with open(path) as f:
            text = f.read()
        probs = lint(text)
        print("%s: %d stages (%s), %d problem(s)" % (name, len(stage_names(text)), ", ".join(stage_names(text)),
                                                     len(probs)))
        problems += ["%s: %s" % (name, p) for p in probs]
    cuda = os.path.join(root, "deploy", "docker", "Dockerfile.cuda")
    if shutil.which("buildah"):
        with open(cuda) as f:
            targets = stage_names(f.read())
        problems += ["Dockerfile.cuda: %s" % p for p in buildah_parse(cuda, targets)]
    else:
        print("buildah not installed: the buildah parse of Dockerfile.cuda was not run (scripts/setup.sh)")
        problems.append("buildah not installed (scripts/setup.sh installs it)")
    for p in problems:
        print("dockerfile_lint:", p)
    print("%d passed, %d failed" % (0 if problems else 1, 1 if problems else 0))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
