#!/usr/bin/env python3
"""Checks deploy/prometheus/prometheus.yml beyond `promtool check config`.

usage: prometheus_config_test.py [--promtool PATH] REPO_ROOT

- the settings the deployment relies on are there: global scrape_interval 15s, the scrape jobs
  rdattn-coordinator (port 9401) and rdattn-worker (port 9402), rule_files rules/*.yml;
- no scrape job sets honor_labels: the rdattn job id is the exported label `job_id`
  (docs/metrics.md), so `job` stays the scrape job name with Prometheus's defaults;
- every commented alternative between "# BEGIN <name>" and "# END <name>" (Slurm file_sd,
  Kubernetes pod discovery) is uncommented into a temporary copy that `promtool check config`
  must accept, the Slurm file_sd path pointed at deploy/prometheus/file_sd/*.json so that promtool
  reads the example target file too;
- the example file_sd JSON has the file_sd shape, and a `job` target label in it (which overrides
  the scrape job name) is rdattn-worker.
Standard library only; promtool reads the YAML.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

EXPECTED_BLOCKS = {"kubernetes rdattn-coordinator", "slurm rdattn-worker", "kubernetes rdattn-worker"}


def fail(errors):
    for e in errors:
        print("FAIL:", e)
    print(f"{len(errors)} problem(s)")
    sys.exit(1)


def blocks(text):
    """{name: (start_line, end_line)} for the '# BEGIN name' ... '# END name' blocks."""
    out, open_name, start = {}, None, 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^\s*# (BEGIN|END) (.+?)\s*$", line)
        if not m:
            continue
        if m.group(1) == "BEGIN":
            open_name, start = m.group(2), i
        elif open_name == m.group(2):
            out[open_name] = (start, i)
            open_name = None
    return out


def uncomment(text, span):
    lines = text.split("\n")
    a, b = span
    for i in range(a + 1, b):
        lines[i] = re.sub(r"^(\s*)# ?", r"\1", lines[i], count=1)
    return "\n".join(lines)


def promtool_check(promtool, path):
    r = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--promtool", default="promtool")
    ap.add_argument("repo_root")
    args = ap.parse_args()
    prom = os.path.join(args.repo_root, "deploy", "prometheus")
    cfg_path = os.path.join(prom, "prometheus.yml")
    text = open(cfg_path).read()
    errors = []

    for needle, why in [
        (r"(?m)^global:\n(?:  .*\n)*?  scrape_interval: 15s$", "global scrape_interval 15s"),
        (r"(?m)^rule_files:\n  - rules/\*\.yml$", "rule_files: [rules/*.yml]"),
        (r"(?m)^  - job_name: rdattn-coordinator$", "scrape job rdattn-coordinator"),
        (r"(?m)^  - job_name: rdattn-worker$", "scrape job rdattn-worker"),
        (r"targets: \[\"[^\"]+:9401\"\]", "a static coordinator target on port 9401"),
        (r"targets: \[\"[^\"]+:9402\"\]", "a static worker target on port 9402"),
    ]:
        if not re.search(needle, text):
            errors.append(f"prometheus.yml: missing {why}")

    # Not even in a commented alternative: the per-job label is job_id, nothing needs honor_labels.
    for m in re.finditer(r"(?m)^.*\bhonor_labels\s*:.*$", text):
        errors.append(f"prometheus.yml: honor_labels must not be set (job id is `job_id`): {m.group(0).strip()}")

    found = blocks(text)
    for name in sorted(EXPECTED_BLOCKS - set(found)):
        errors.append(f"prometheus.yml: no commented alternative '# BEGIN {name}' ... '# END {name}'")

    sd_dir = os.path.join(prom, "file_sd")
    examples = sorted(f for f in os.listdir(sd_dir) if f.endswith(".json")) if os.path.isdir(sd_dir) else []
    if not examples:
        errors.append("deploy/prometheus/file_sd/: no example *.json target file")
    for f in examples:
        try:
            groups = json.load(open(os.path.join(sd_dir, f)))
            ok = isinstance(groups, list) and groups and all(
                isinstance(g, dict) and isinstance(g.get("targets"), list) and g["targets"]
                and all(isinstance(t, str) and re.fullmatch(r"[^:\s]+:\d+", t) for t in g["targets"])
                and isinstance(g.get("labels", {}), dict) for g in groups)
            if not ok:
                errors.append(f"file_sd/{f}: not a list of {{targets: [host:port...], labels: {{}}}}")
            # A target label `job` overrides the scrape job name: only rdattn-worker is right here.
            for g in groups if isinstance(groups, list) else []:
                job = (g.get("labels") or {}).get("job") if isinstance(g, dict) else None
                if job is not None and job != "rdattn-worker":
                    errors.append(f"file_sd/{f}: target label job={job!r} is not the scrape job rdattn-worker")
        except ValueError as e:
            errors.append(f"file_sd/{f}: not JSON: {e}")

    with tempfile.TemporaryDirectory() as tmp:
        for name, span in sorted(found.items()):
            variant = uncomment(text, span)
            variant = variant.replace("  - rules/*.yml", "  - " + os.path.join(prom, "rules", "*.yml"))
            variant = re.sub(r"(?m)^(\s*- )/\S*file_sd/\S*\.json$",
                             lambda m: m.group(1) + os.path.join(sd_dir, "*.json"), variant)
            path = os.path.join(tmp, re.sub(r"\W+", "_", name) + ".yml")
            with open(path, "w") as fh:
                fh.write(variant)
            rc, out = promtool_check(args.promtool, path)
            print(f"--- alternative '{name}': promtool check config -> rc {rc}\n{out}")
            if rc != 0 and "field kubernetes_sd_configs not found" in out:
                # Debian's prometheus is built without Kubernetes discovery. Check everything else
                # (the relabel rules above all) with the discovery swapped for a file_sd stand-in.
                stand_in = re.sub(r"(?m)^(\s*)kubernetes_sd_configs:\n\s*- role: pod$",
                                  lambda m: m.group(1) + "file_sd_configs:\n" + m.group(1)
                                  + "  - files: [" + json.dumps(os.path.join(sd_dir, "*.json")) + "]",
                                  variant)
                if stand_in == variant:
                    errors.append(f"alternative '{name}': no 'kubernetes_sd_configs: - role: pod' to stand in for")
                    continue
                with open(path, "w") as fh:
                    fh.write(stand_in)
                rc, out = promtool_check(args.promtool, path)
                print(f"    this promtool has no Kubernetes discovery; with a file_sd stand-in -> rc {rc}\n{out}")
            if rc != 0:
                errors.append(f"alternative '{name}' uncommented is rejected by promtool check config")
            elif "slurm" in name and "WARNING" in out:
                errors.append(f"alternative '{name}': promtool warns (file_sd example not found?)")
    if errors:
        fail(errors)
    print(f"OK: prometheus.yml settings, {len(found)} commented alternatives and "
          f"{len(examples)} file_sd example(s) checked")


if __name__ == "__main__":
    main()
