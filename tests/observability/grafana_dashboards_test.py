#!/usr/bin/env python3
"""Checks the Grafana dashboards (deploy/grafana) and the metric names of the Prometheus rules
(deploy/prometheus) against the metric catalogue, docs/metrics.md.

usage: grafana_dashboards_test.py [--promtool PATH] [--self-test] REPO_ROOT

Checks:
- every deploy/grafana/dashboards/*.json parses and has the structure Grafana 10 provisioning
  needs: uid (unique), title, schemaVersion, panels with unique ids and a gridPos inside the
  24-column grid; every panel, target and templating variable names the provisioned datasource
  uid (read from deploy/grafana/provisioning/datasources/prometheus.yml);
- the five topics exist: sweep overview, NLL by arm with the paired rd - block delta, a JS-by-layer
  heatmap with route entropies, throughput/MFU/step-time quantiles, worker health;
- every panel expression and label_values() variable query, with the Grafana variables replaced by
  valid stand-ins, is written as a recording rule into a temporary rules file that
  `promtool check rules` must accept (the PromQL parse check); a variable that is neither built in
  nor defined by the dashboard is reported;
- every rdattn_* metric named by a panel, a variable, or a file under deploy/prometheus/rules and
  deploy/prometheus/tests is in the catalogue tables of docs/metrics.md (histograms may carry
  _bucket/_sum/_count), and every label matched in a `rdattn_x{...}` selector is a label that
  metric has (or a scrape target label);
- `job` is the scrape job name only: no {{job}} legend, by/on/ignoring/without (job ...) on per-job
  series, nor $labels.job / such a grouping in the rule files (the rdattn job id is `job_id`).
--self-test proves that each check can fail: a broken expression is rejected by promtool, an
unknown metric, an unknown label, an unknown variable, a wrong datasource uid, a duplicate panel id
a missing topic and `job` used for the rdattn job id are reported.
Standard library only; promtool reads the YAML.
"""
import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

# The per-job labels of docs/metrics.md. The job id is `job_id`: `job` is the scrape job name.
JOB_LABELS = {"sweep", "job_id", "arm", "seed", "scale"}
# Labels Prometheus adds at scrape time (deploy/prometheus/prometheus.yml and its alternatives);
# `job` is the scrape job (rdattn-coordinator, rdattn-worker).
TARGET_LABELS = {"job", "instance", "cluster", "namespace", "pod", "node", "slurm_job_id", "kind", "component"}
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
BUILTIN_VARS = {
    "__rate_interval": "1m", "__interval": "15s", "__range": "6h", "__interval_ms": "15000",
    "__range_s": "21600", "__range_ms": "21600000", "__dashboard": "x", "__org": "1", "__user": "x",
}
STAND_IN = ".*"   # user variables are multi-value regexes (allValue .*)


# ------------------------------------------------------------------------------------ catalogue
def parse_catalogue(text):
    """{name: {"type": t, "labels": set}} from the rows starting with "| `rdattn_"."""
    cat, section = {}, ""
    for line in text.split("\n"):
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        if not line.startswith("| `rdattn_"):
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cols[0].strip("`")
        mtype = cols[1] if len(cols) > 1 else ""
        label_col = re.sub(r"\([^)]*\)", "", cols[2] if len(cols) > 2 else "")
        labels = set(re.findall(r"`([a-zA-Z_][a-zA-Z0-9_]*)`", label_col))
        if section.startswith("worker: per job"):
            labels |= JOB_LABELS
        cat[name] = {"type": mtype, "labels": labels}
    return cat


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


METRIC_RE = re.compile(r"(?<![A-Za-z0-9_:])(rdattn_[A-Za-z0-9_]+)")


def resolve(name, cat):
    """The catalogue entry a referenced name stands for, or None."""
    if name in cat:
        return name
    for suf in HIST_SUFFIXES:
        if name.endswith(suf) and cat.get(name[: -len(suf)], {}).get("type") == "histogram":
            return name[: -len(suf)]
    return None


def check_names(text, where, cat, strip=True):
    """Unknown rdattn_* names and unknown matcher labels in one expression or file."""
    errors = []
    body = strip_strings(text) if strip else text
    for name in sorted(set(METRIC_RE.findall(body))):
        if resolve(name, cat) is None:
            errors.append(f"{where}: unknown metric {name} (not in docs/metrics.md)")
    for m in re.finditer(r"(?<![A-Za-z0-9_:])(rdattn_[A-Za-z0-9_]+)\s*\{([^}]*)\}", text):
        base = resolve(m.group(1), cat)
        if base is None:
            continue
        allowed = cat[base]["labels"] | TARGET_LABELS
        if m.group(1).endswith("_bucket"):
            allowed = allowed | {"le"}
        for lab in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", strip_strings(m.group(2))):
            if lab not in allowed:
                errors.append(f"{where}: {m.group(1)} has no label '{lab}' (labels: {', '.join(sorted(allowed))})")
    return errors


# ------------------------------------------------------------------------------------ promtool
def rules_text(items):
    lines = ["groups:", "  - name: grafana-dashboard-expressions", "    rules:"]
    for i, (_, expr) in enumerate(items):
        lines.append(f"      - record: dashboard_check:expr_{i}")
        lines.append("        expr: |-")
        lines.extend("          " + l for l in expr.split("\n"))
    return "\n".join(lines) + "\n"


def promtool_rules(promtool, items, tmp, fname):
    path = os.path.join(tmp, fname)
    with open(path, "w") as fh:
        fh.write(rules_text(items))
    r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def check_promql(promtool, items):
    """items: [(where, expr)]. Errors for the expressions promtool does not accept."""
    if not items:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = promtool_rules(promtool, items, tmp, "all.yml")
        if rc == 0:
            if f"SUCCESS: {len(items)} rules found" not in out:
                return [f"promtool check rules did not report {len(items)} rules: {out}"]
            return []
        errors = []
        for i, item in enumerate(items):   # find which ones
            rc1, out1 = promtool_rules(promtool, [item], tmp, f"one_{i}.yml")
            if rc1 != 0:
                msg = " ".join(l.strip() for l in out1.split("\n") if "FAILED" not in l and "Checking" not in l)
                errors.append(f"{item[0]}: promtool rejects the expression: {msg}")
        return errors or [f"promtool check rules failed: {out}"]


# ------------------------------------------------------------------------------------ dashboards
def substitute(expr, var_names):
    """Grafana variables -> stand-ins. Returns (expr, [unknown variable names])."""
    unknown = []

    def sub(m):
        name = m.group(1) or m.group(2) or m.group(4)
        if name in BUILTIN_VARS:
            return BUILTIN_VARS[name]
        if name in var_names:
            return STAND_IN
        unknown.append(name)
        return STAND_IN

    out = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|(\[\[([A-Za-z_][A-Za-z0-9_]*)(?::[^\]]*)?\]\])",
                 sub, expr)
    return out, unknown


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []) or [])


def dashboard_structure(fname, d, ds_uid):
    errors = []
    for key, typ in [("uid", str), ("title", str), ("schemaVersion", int), ("panels", list)]:
        if not isinstance(d.get(key), typ) or (typ is str and not d[key]):
            errors.append(f"{fname}: missing or bad '{key}'")
    if errors:
        return errors
    if len(d["uid"]) > 40:
        errors.append(f"{fname}: uid longer than 40 characters")
    if d["schemaVersion"] < 36:
        errors.append(f"{fname}: schemaVersion {d['schemaVersion']} is older than Grafana 9/10 (36+)")
    ids = {}
    for p in all_panels(d["panels"]):
        pid, title = p.get("id"), p.get("title", "?")
        where = f"{fname}: panel {pid} '{title}'"
        if not isinstance(pid, int):
            errors.append(f"{where}: no integer id")
        elif pid in ids:
            errors.append(f"{where}: duplicate panel id (also '{ids[pid]}')")
        else:
            ids[pid] = title
        if not p.get("type"):
            errors.append(f"{where}: no type")
        gp = p.get("gridPos")
        if not isinstance(gp, dict) or not all(isinstance(gp.get(k), int) for k in ("h", "w", "x", "y")):
            errors.append(f"{where}: gridPos needs integer h, w, x, y")
        elif gp["x"] < 0 or gp["w"] <= 0 or gp["h"] <= 0 or gp["x"] + gp["w"] > 24:
            errors.append(f"{where}: gridPos {gp} outside the 24-column grid")
        if p.get("type") == "row":
            continue
        if not p.get("title"):
            errors.append(f"{where}: no title")
        if (p.get("datasource") or {}).get("uid") != ds_uid:
            errors.append(f"{where}: datasource uid is not the provisioned '{ds_uid}': {p.get('datasource')}")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{where}: no targets")
        for t in targets:
            if (t.get("datasource") or {}).get("uid", ds_uid) != ds_uid:
                errors.append(f"{where}: target {t.get('refId')} datasource uid is not '{ds_uid}'")
            if not (t.get("expr") or "").strip():
                errors.append(f"{where}: target {t.get('refId')} has no expr")
    for v in (d.get("templating") or {}).get("list", []):
        if v.get("type") == "query" and (v.get("datasource") or {}).get("uid") != ds_uid:
            errors.append(f"{fname}: variable {v.get('name')} datasource uid is not '{ds_uid}'")
    return errors


def variable_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    return q or v.get("definition") or ""


def collect_expressions(fname, d):
    """[(where, raw expr)] for every panel target and label_values() variable; plus errors."""
    items, errors = [], []
    var_names = {v.get("name") for v in (d.get("templating") or {}).get("list", [])}
    for v in (d.get("templating") or {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = variable_query(v)
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q, re.S)
        where = f"{fname}: variable {v.get('name')}"
        if not m:
            errors.append(f"{where}: query is not label_values(selector, label): {q!r}")
            continue
        items.append((where, m.group(1), m.group(2)))
    for p in all_panels(d.get("panels", [])):
        for t in p.get("targets") or []:
            if t.get("expr"):
                items.append((f"{fname}: panel {p.get('id')} '{p.get('title')}' target {t.get('refId')}",
                              t["expr"], None))
    return items, var_names, errors


def job_label_errors(where, expr, legend, cat):
    """`job` is the scrape job name; on per-job series the rdattn job id is `job_id`."""
    per_job = [n for n in METRIC_RE.findall(strip_strings(expr))
               if "job_id" in cat.get(resolve(n, cat) or "", {}).get("labels", set())]
    if not per_job:
        return []
    errors = []
    if re.search(r"\{\{\s*job\s*\}\}", legend or ""):
        errors.append(f"{where}: legend {{{{job}}}} on per-job series ({per_job[0]}): the job id is {{{{job_id}}}}")
    for m in re.finditer(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)", strip_strings(expr)):
        if "job" in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(2)):
            errors.append(f"{where}: {m.group(1)} ({m.group(2)}) on per-job series: the job id is job_id, "
                          f"`job` is the scrape job")
    return errors


# topic -> [(requirement, predicate(panel, exprs))]; a requirement is met by one panel.
def _e(exprs):
    return re.sub(r"\s+", " ", " ".join(exprs))


TOPICS = {
    "sweep overview": [
        ("jobs by state (rdattn_sweep_jobs or rdattn_jobs)",
         lambda p, ex: re.search(r"rdattn_(sweep_)?jobs\b", _e(ex))),
        ("progress rdattn_train_tokens / rdattn_job_budget_tokens",
         lambda p, ex: any("rdattn_train_tokens" in e and "rdattn_job_budget_tokens" in e and "/" in e for e in ex)),
    ],
    "NLL by arm": [
        ("val NLL per arm (rdattn_val_nll by arm)",
         lambda p, ex: any("rdattn_val_nll" in e and re.search(r"by \([^)]*\barm\b", e) for e in map(lambda s: _e([s]), ex))),
        ("paired delta rd - block joined on(sweep, seed, scale) with last_over_time",
         lambda p, ex: any("rdattn_val_nll" in e and re.search(r"on ?\( ?sweep, ?seed, ?scale ?\)", e)
                           and 'arm="rd"' in e and 'arm="block"' in e and "last_over_time" in e
                           for e in map(lambda s: _e([s]), ex))),
        ("test NLL (rdattn_test_nll)", lambda p, ex: "rdattn_test_nll" in _e(ex)),
    ],
    "depth routing": [
        ("heatmap panel of rdattn_depth_js_divergence by layer",
         lambda p, ex: p.get("type") == "heatmap" and re.search(r"rdattn_depth_js_divergence\b(?!_)", _e(ex))
         and "layer" in _e(ex)),
        ("route entropies (rdattn_route_entropy_nats)", lambda p, ex: "rdattn_route_entropy_nats" in _e(ex)),
    ],
    "throughput and MFU": [
        ("tokens/s (rdattn_tokens_per_second)", lambda p, ex: "rdattn_tokens_per_second" in _e(ex)),
        ("MFU as percentunit",
         lambda p, ex: "rdattn_model_flops_utilization" in _e(ex)
         and (p.get("fieldConfig") or {}).get("defaults", {}).get("unit") == "percentunit"),
        ("step duration quantile", lambda p, ex: re.search(r"histogram_quantile\(.*rdattn_step_duration_seconds_bucket", _e(ex))),
        ("all-reduce quantile", lambda p, ex: re.search(r"histogram_quantile\(.*rdattn_allreduce_duration_seconds_bucket", _e(ex))),
        ("data-wait quantile", lambda p, ex: re.search(r"histogram_quantile\(.*rdattn_data_wait_seconds_bucket", _e(ex))),
    ],
    "worker health": [
        ("scrape targets up", lambda p, ex: re.search(r"(?<![A-Za-z0-9_])up\{", _e(ex))),
        ("rdattn_workers", lambda p, ex: re.search(r"rdattn_workers\b", _e(ex))),
        ("rdattn_worker_slots", lambda p, ex: "rdattn_worker_slots" in _e(ex)),
        ("heartbeat age time() - rdattn_worker_last_heartbeat_timestamp_seconds",
         lambda p, ex: re.search(r"time\(\) ?- ?rdattn_worker_last_heartbeat_timestamp_seconds", _e(ex))),
        ("event parse errors", lambda p, ex: "rdattn_worker_event_parse_errors_total" in _e(ex)),
        ("gRPC request rate by method and code",
         lambda p, ex: re.search(r"by \((method, ?code|code, ?method)\) \(rate\(rdattn_grpc_requests_total", _e(ex))),
        ("gRPC error ratio", lambda p, ex: any("rdattn_grpc_requests_total" in e and 'code!="OK"' in e and "/" in e for e in ex)),
    ],
}


def check_topics(dashboards):
    panels = [(p, [t.get("expr", "") for t in p.get("targets") or []])
              for _, d in dashboards for p in all_panels(d.get("panels", [])) if p.get("type") != "row"]
    errors = []
    for topic, reqs in TOPICS.items():
        for req, pred in reqs:
            if not any(pred(p, ex) for p, ex in panels):
                errors.append(f"missing topic '{topic}': no panel with {req}")
    return errors


def check_dashboards(dashboards, ds_uid, cat, promtool):
    """dashboards: [(file name, parsed JSON)]. Returns errors."""
    errors, items = [], []
    uids = {}
    for fname, d in dashboards:
        errors += dashboard_structure(fname, d, ds_uid)
        if isinstance(d.get("uid"), str):
            if d["uid"] in uids:
                errors.append(f"{fname}: uid {d['uid']} also used by {uids[d['uid']]}")
            uids[d["uid"]] = fname
        exprs, var_names, errs = collect_expressions(fname, d)
        errors += errs
        for where, raw, label in exprs:
            expr, unknown = substitute(raw, var_names)
            for u in unknown:
                errors.append(f"{where}: unknown Grafana variable ${u}")
            errors += check_names(raw, where, cat)
            if label is not None:   # label_values(selector, label)
                base = [resolve(n, cat) for n in METRIC_RE.findall(strip_strings(raw))]
                if base and base[0] and label not in cat[base[0]]["labels"] | TARGET_LABELS:
                    errors.append(f"{where}: {base[0]} has no label '{label}'")
            items.append((where, expr))
        for p in all_panels(d.get("panels", [])):
            for tg in p.get("targets") or []:
                errors += job_label_errors(f"{fname}: panel {p.get('id')} '{p.get('title')}' target "
                                           f"{tg.get('refId')}", tg.get("expr") or "", tg.get("legendFormat"), cat)
    errors += check_topics(dashboards)
    errors += check_promql(promtool, items)
    return errors, len(items)


# ------------------------------------------------------------------------------------ repo
def load(root):
    cat = parse_catalogue(open(os.path.join(root, "docs", "metrics.md")).read())
    prov = open(os.path.join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml")).read()
    m = re.search(r"(?m)^\s*uid:\s*['\"]?([A-Za-z0-9_-]+)", prov)
    ds_uid = m.group(1) if m else None
    dashboards, errors = [], []
    files = sorted(glob.glob(os.path.join(root, "deploy", "grafana", "dashboards", "*.json")))
    if not files:
        errors.append("deploy/grafana/dashboards: no *.json dashboard")
    for f in files:
        try:
            dashboards.append((os.path.basename(f), json.load(open(f))))
        except ValueError as e:
            errors.append(f"{os.path.basename(f)}: not JSON: {e}")
    return cat, ds_uid, dashboards, errors


def provisioning_errors(root, ds_uid):
    errors = []
    g = os.path.join(root, "deploy", "grafana", "provisioning")
    ds = open(os.path.join(g, "datasources", "prometheus.yml")).read()
    if not ds_uid:
        errors.append("provisioning/datasources/prometheus.yml: no fixed uid")
    if not re.search(r"(?m)^\s*type:\s*prometheus\s*$", ds):
        errors.append("provisioning/datasources/prometheus.yml: datasource type is not prometheus")
    prov_files = glob.glob(os.path.join(g, "dashboards", "*.yml"))
    if not prov_files:
        errors.append("provisioning/dashboards: no dashboard provider file")
    for f in prov_files:
        t = open(f).read()
        if not re.search(r"(?m)^\s*type:\s*file\s*$", t) or not re.search(r"(?m)^\s*path:\s*\S+", t):
            errors.append(f"{os.path.basename(f)}: not a file provider with options.path")
    return errors


def rule_job_errors(text, where):
    """Annotations and groupings that would take the scrape job name for the rdattn job id."""
    errors = []
    for m in re.finditer(r"\$labels\.job\b(?!_)", text):
        line = text.count("\n", 0, m.start()) + 1
        errors.append(f"{where}:{line}: $labels.job is the scrape job name; the rdattn job id is $labels.job_id")
    for m in re.finditer(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)", text):
        if "job" in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(2)):
            line = text.count("\n", 0, m.start()) + 1
            errors.append(f"{where}:{line}: {m.group(1)} ({m.group(2)}) names `job` (the scrape job); "
                          f"the rdattn job id is job_id")
    return errors


def rule_file_errors(root, cat):
    errors, n = [], 0
    prom = os.path.join(root, "deploy", "prometheus")
    for f in sorted(glob.glob(os.path.join(prom, "rules", "*.yml")) + glob.glob(os.path.join(prom, "tests", "*.yml"))):
        n += 1
        rel = os.path.relpath(f, root)
        # Quoted YAML strings hold whole series selectors here, so names are read from the raw text.
        text = open(f).read()
        errors += check_names(text, rel, cat, strip=False)
        errors += rule_job_errors(text, rel)
    if n == 0:
        errors.append("deploy/prometheus: no rule files")
    return errors, n


def run(root, promtool):
    cat, ds_uid, dashboards, errors = load(root)
    if len(cat) < 20:
        errors.append(f"docs/metrics.md: only {len(cat)} catalogue rows parsed")
    errors += provisioning_errors(root, ds_uid)
    derr, nexpr = check_dashboards(dashboards, ds_uid, cat, promtool)
    errors += derr
    rerr, nrules = rule_file_errors(root, cat)
    errors += rerr
    if errors:
        for e in errors:
            print("FAIL:", e)
        print(f"{len(errors)} problem(s)")
        return 1
    npanels = sum(1 for _, d in dashboards for p in all_panels(d["panels"]) if p.get("type") != "row")
    print(f"OK: {len(dashboards)} dashboards, {npanels} panels, {nexpr} expressions accepted by promtool, "
          f"{len(TOPICS)} topics present, metric names of {nrules} Prometheus rule/test files and all panels "
          f"in the catalogue ({len(cat)} metrics)")
    return 0


def self_test(root, promtool):
    cat, ds_uid, dashboards, errors = load(root)
    assert not errors, errors
    problems = []

    def expect(name, errs, needle):
        hit = [e for e in errs if needle in e]
        print(f"self-test {name}: {'reported' if hit else 'NOT reported'}" + (f" -> {hit[0]}" if hit else ""))
        if not hit:
            problems.append(f"{name}: expected an error containing {needle!r}, got {errs}")

    # the catalogue parser sees the histograms and the label columns
    hists = sorted(n for n, v in cat.items() if v["type"] == "histogram")
    if len(hists) < 4 or "route" not in cat.get("rdattn_route_entropy_nats", {}).get("labels", set()):
        problems.append(f"catalogue parse: histograms {hists}, route entropy labels "
                        f"{cat.get('rdattn_route_entropy_nats')}")
    # per-job series carry job_id (the rdattn job id); `job` is only the scrape job label
    tl = cat.get("rdattn_train_loss", {}).get("labels", set())
    if "job_id" not in tl or "job" in tl:
        problems.append(f"catalogue parse: rdattn_train_loss labels {sorted(tl)} (want job_id, not job)")
    if check_names('rdattn_train_loss{job_id="a", job="rdattn-worker"}', "x", cat):
        problems.append("job_id or the scrape job label was reported as unknown on a per-job metric")
    expect("legend {{job}} on a per-job metric",
           job_label_errors("x", "rdattn_train_loss", "{{job}}", cat), "the job id is {{job_id}}")
    expect("by (job) on a per-job metric",
           job_label_errors("x", "sum by (job, le) (rate(rdattn_step_duration_seconds_bucket[5m]))", "", cat),
           "the job id is job_id")
    if job_label_errors("x", 'up{job="rdattn-worker"}', "{{job}} {{instance}}", cat):
        problems.append("the scrape job label on up was reported")
    expect("$labels.job in a rule file", rule_job_errors("summary: {{ $labels.job }}", "r.yml"), "$labels.job_id")
    expect("on(job) in a rule file", rule_job_errors("a - on(sweep, job) b", "r.yml"), "the rdattn job id is job_id")
    if rule_job_errors('summary: {{ $labels.job_id }}\nexpr: up{job="rdattn-worker"} == 0', "r.yml"):
        problems.append("$labels.job_id or a scrape-job matcher was reported")
    # promtool accepts a good expression and rejects a broken one
    if check_promql(promtool, [("good", "sum by (arm) (rate(rdattn_step_duration_seconds_count[5m]))")]):
        problems.append("promtool rejected a valid expression")
    expect("broken expression", check_promql(promtool, [("broken", "sum(rate(rdattn_train_loss[5m])")]),
           "promtool rejects")
    expect("broken expression among good ones",
           check_promql(promtool, [("ok", "up"), ("bad one", "rdattn_val_nll{arm=}"), ("ok2", "rdattn_jobs")]), "bad one")

    def mutated(fn):
        ds = copy.deepcopy(dashboards)
        fn(ds)
        return check_dashboards(ds, ds_uid, cat, promtool)[0]

    def first_target(ds):
        for _, d in ds:
            for p in all_panels(d["panels"]):
                if p.get("targets"):
                    return p, p["targets"][0]

    expect("unknown metric", mutated(lambda ds: first_target(ds)[1].update(expr="rate(rdattn_no_such_metric_total[5m])")),
           "unknown metric rdattn_no_such_metric_total")
    expect("unknown label", mutated(lambda ds: first_target(ds)[1].update(expr='rdattn_workers{status="lost"}')),
           "has no label 'status'")
    expect("unknown variable", mutated(lambda ds: first_target(ds)[1].update(expr='rdattn_val_nll{seed=~"$seed"}')),
           "unknown Grafana variable $seed")
    expect("broken panel expression", mutated(lambda ds: first_target(ds)[1].update(expr="sum(rdattn_jobs")),
           "promtool rejects")
    expect("wrong datasource", mutated(lambda ds: first_target(ds)[0].update(datasource={"type": "prometheus", "uid": "other"})),
           "datasource uid is not")

    def dup_id(ds):
        ps = [p for p in all_panels(ds[0][1]["panels"])]
        ps[1]["id"] = ps[0]["id"]
    expect("duplicate panel id", mutated(dup_id), "duplicate panel id")

    def no_heatmap(ds):
        for _, d in ds:
            for p in all_panels(d["panels"]):
                if p.get("type") == "heatmap":
                    p["type"] = "timeseries"
    expect("missing topic (heatmap)", mutated(no_heatmap), "missing topic 'depth routing'")

    def no_delta(ds):
        for _, d in ds:
            for p in all_panels(d["panels"]):
                for t in p.get("targets") or []:
                    t["expr"] = re.sub(r"on\s*\(\s*sweep,\s*seed,\s*scale\s*\)", "", t.get("expr", "")) \
                        if 'arm="block"' in t.get("expr", "") else t.get("expr", "")
    expect("missing topic (paired delta)", mutated(no_delta), "paired delta")
    expect("rule file with unknown metric",
           check_names('expr: rdattn_trian_loss != rdattn_trian_loss', "rules.yml", cat, strip=False), "rdattn_trian_loss")
    expect("histogram suffix on a gauge", check_names("rdattn_val_nll_bucket", "x", cat), "unknown metric rdattn_val_nll_bucket")
    if check_names("rate(rdattn_step_duration_seconds_bucket[5m])", "x", cat):
        problems.append("a histogram's _bucket series was reported as unknown")

    if problems:
        for p in problems:
            print("FAIL:", p)
        return 1
    print("OK: self-test, every check can fail")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--promtool", default="promtool")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("repo_root")
    args = ap.parse_args()
    sys.exit(self_test(args.repo_root, args.promtool) if args.self_test else run(args.repo_root, args.promtool))


if __name__ == "__main__":
    main()
