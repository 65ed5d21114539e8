#!/usr/bin/env python3
"""The CPU Dockerfile installs exactly the packages of scripts/setup.sh (there is no Docker
engine on the build machines, so this is how the image's package list is kept honest).

  docker_packages_test.py REPO_ROOT        check the repository
  docker_packages_test.py --self-test      show that a drifted list is caught
"""
import os
import re
import sys
import tempfile


def setup_packages(text):
    m = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise ValueError("scripts/setup.sh: no PACKAGES=( … ) block")
    body = "\n".join(line.split("#", 1)[0] for line in m.group(1).splitlines())
    return body.split()


def dockerfile_packages(text):
    joined = text.replace("\\\n", " ")
    m = re.search(r"apt-get install\s+(.*?)(?:&&|$)", joined, re.M)
    if not m:
        raise ValueError("Dockerfile: no apt-get install line")
    return [w for w in m.group(1).split() if not w.startswith("-")]


def compare(setup_text, docker_text):
    a, b = setup_packages(setup_text), dockerfile_packages(docker_text)
    problems = []
    for p in sorted(set(a) - set(b)):
        problems.append("in scripts/setup.sh but not in the Dockerfile: " + p)
    for p in sorted(set(b) - set(a)):
        problems.append("in the Dockerfile but not in scripts/setup.sh: " + p)
    return a, problems


def main():
    if sys.argv[1:] == ["--self-test"]:
        setup = "PACKAGES=(\n  a b\n  c # comment\n)\n"
        good = "RUN apt-get update && apt-get install -y -qq \\\n  a b \\\n  c \\\n && rm -rf x\n"
        bad = good.replace(" c ", " d ")
        assert compare(setup, good)[1] == [], compare(setup, good)
        problems = compare(setup, bad)[1]
        assert len(problems) == 2 and "c" in problems[0] and "d" in problems[1], problems
        print("self-test: a drifted list is reported:", problems)
        print("1 passed, 0 failed")
        return 0
    root = sys.argv[1]
    with open(os.path.join(root, "scripts", "setup.sh")) as f:
        setup = f.read()
    with open(os.path.join(root, "deploy", "docker", "Dockerfile.cpu")) as f:
        docker = f.read()
    pkgs, problems = compare(setup, docker)
    for p in problems:
        print("docker_packages_test:", p)
    if problems:
        return 1
    print("docker_packages_test: Dockerfile.cpu installs the same %d packages as scripts/setup.sh" % len(pkgs))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
