#!/usr/bin/python3
"""A real Prometheus scrapes a real coordinator and worker during a tiny sweep.

Processes on loopback, ports chosen by the OS: rdattn-coordinator and one rdattn-worker (1 slot, so that one core stays free for the scrapes)
both serving /metrics, and Debian's `prometheus` scraping them every second with the alert rules
of deploy/prometheus/rules loaded. A sweep of block and rd (1 seed, tiny byte model) runs to the
end. Then:
  - `promtool check metrics` accepts each endpoint's exposition, and no series has a step-like
    label;
  - every rdattn_ family exported is in docs/metrics.md with its type and exactly its labels,
    and every metric the catalogue lists was exported by one of the two;
  - Prometheus's HTTP API returns validation-NLL series per arm, JS per layer for rd (none for
    block), tokens/s and MFU per job, each with the labels sweep, job_id, arm, seed, scale; the
    NLL Prometheus stored equals the val_nll of the job's last evaluation event (read through an
    independent Python gRPC client);
  - the coordinator's series: 2 succeeded jobs, the SubmitSweep RPC counted with code OK, slots;
  - every alert rule loaded and evaluates without error, and none fires on this healthy sweep.
Every process is stopped at the end, pass or fail.
"""
import argparse
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from trainer_cli_test import corpus, write_shard  # noqa: E402
from itest import check, free_port, http_get, promtool_accepts  # noqa: E402

PROCS = []
JOB_LABELS = {"sweep", "job_id", "arm", "seed", "scale"}
FORBIDDEN_LABELS = {"step", "tokens", "milestone", "milestone_tokens", "lease", "lease_id", "attempt"}


def start(cmd, log_path, env, stdout=None):
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=stdout or log, stderr=log, text=True, env=env)
    PROCS.append((p, log_path))
    return p


def stop_all(show_logs):
    for p, _ in PROCS:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 20
    for p, _ in PROCS:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    if show_logs:
        for _, path in PROCS:
            try:
                with open(path) as f:
                    tail = f.read()[-3000:]
            except OSError:
                continue
            print("---- %s (tail) ----\n%s" % (path, tail))


def wait_for_log(path, pattern, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError("%s exited (%s) before printing %r" % (path, proc.returncode, pattern))
        time.sleep(0.1)
    raise AssertionError("%s: no line matching %r within %d s" % (path, pattern, timeout))


def query(prom, expr):
    url = "http://%s/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": expr}))
    doc = json.loads(http_get(url))
    if doc.get("status") != "success":
        raise AssertionError("query %s: %s" % (expr, doc))
    return doc["data"]["result"]


def exposition_types(text):
    """{family: type} from the # TYPE lines of a text exposition."""
    return dict(re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text))


def catalogue_errors(text, cat, process):
    """Every rdattn_ family the exposition holds is in docs/metrics.md with its type and exactly
    its label names; returns (errors, catalogue names of this process that were not exported)."""
    types = exposition_types(text)
    labels = exposition_labels(text)
    errors = []
    for fam, mtype in sorted(types.items()):
        if not fam.startswith("rdattn_"):
            continue
        if fam not in cat:
            errors.append("%s exports %s, which docs/metrics.md does not list" % (process, fam))
            continue
        if cat[fam]["type"] != mtype:
            errors.append("%s: %s is a %s, the catalogue says %s" % (process, fam, mtype, cat[fam]["type"]))
        seen = set()
        for series in ([fam] if mtype != "histogram" else [fam + "_bucket", fam + "_sum", fam + "_count"]):
            seen |= labels.get(series, set())
        seen.discard("le")
        if seen != cat[fam]["labels"]:
            errors.append("%s: %s has labels %s, the catalogue says %s" % (process, fam, sorted(seen), sorted(cat[fam]["labels"])))
    return errors, set(types)


def exposition_labels(text):
    """Label names used by each metric family in a text exposition."""
    names = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            continue
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        names.setdefault(m.group(1), set()).update(labels)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build dir with the binaries")
    ap.add_argument("--pystubs", required=True, help="folder with the generated Python gRPC stubs")
    ap.add_argument("--source", required=True, help="repository root (for deploy/prometheus)")
    ap.add_argument("--prometheus", default="prometheus")
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()
    sys.path.insert(0, args.pystubs)
    import grpc  # noqa: E402
    from rdattn.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, run_spec_pb2 as rpb  # noqa

    b = args.bin
    coordinator = os.path.join(b, "coordinator", "rdattn-coordinator")
    worker = os.path.join(b, "worker", "daemon", "rdattn-worker")
    train = os.path.join(b, "worker", "trainer", "rdattn-train")
    client = os.path.join(b, "client", "rdattn")
    rules = sorted(glob.glob(os.path.join(args.source, "deploy", "prometheus", "rules", "*.yml")))
    check(len(rules) > 0, "deploy/prometheus/rules holds rule files: %s" % [os.path.basename(r) for r in rules])

    tmp = tempfile.mkdtemp(prefix="rdattn-prometheus-test-")
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    write_shard(os.path.join(data, "pt_train_000000.bin"), corpus(1, 300, 60))
    write_shard(os.path.join(data, "pt_val_000000.bin"), corpus(2, 20, 60))
    write_shard(os.path.join(data, "pt_test_000000.bin"), corpus(3, 20, 60))
    sweep = os.path.join(tmp, "sweep.yaml")
    with open(sweep, "w") as f:
        f.write("""name: prometheus-it
scales:
  - {name: tiny, preset: tiny}
arms: [block, rd]
seeds: [7]
data:
  train_shards: ["%(d)s/pt_train_*.bin"]
  val_shards: ["%(d)s/pt_val_000000.bin"]
  test_shards: ["%(d)s/pt_test_000000.bin"]
  tokenizer: byte
  val_windows: 16
  test_windows: 16
optim: {peak_lr: 0.003, warmup_steps: 2}
schedule:
  total_tokens: 49152
  global_batch_tokens: 512
  micro_batch_sequences: 8
  milestones_tokens: [24576, 49152]
metrics: {train_event_every_steps: 4}
parallel: {world_size: 1, threads_per_rank: 1}
max_attempts: 1
""" % {"d": data})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    failed = True
    try:
        coord_log = os.path.join(tmp, "coordinator.log")
        coord = start([coordinator, "--listen", "127.0.0.1:0", "--db", os.path.join(tmp, "coordinator.db"),
                       "--lease-seconds", "30", "--heartbeat-seconds", "1", "--metrics-listen", "127.0.0.1:0"],
                      coord_log, env, stdout=subprocess.PIPE)
        m = re.search(r"listening on (\S+:\d+)", coord.stdout.readline())
        check(m is not None, "the coordinator prints its gRPC address")
        addr = m.group(1)
        coord_metrics = wait_for_log(coord_log, r"metrics on http://(\S+:\d+)/metrics", coord).group(1)
        check(True, "the coordinator serves metrics on %s" % coord_metrics)

        worker_log = os.path.join(tmp, "worker.log")
        wproc = start([worker, "--coordinator", addr, "--slots", "1", "--kind", "cpu",
                       "--workdir", os.path.join(tmp, "w0"), "--checkpoint-root", os.path.join(tmp, "ckpt"),
                       "--train-binary", train, "--threads-per-rank", "1",
                       "--metrics-listen", "127.0.0.1:0", "--metrics-retention", "600"], worker_log, env)
        worker_metrics = wait_for_log(worker_log, r"metrics on http://(\S+:\d+)/metrics", wproc).group(1)
        check(True, "the worker serves metrics on %s" % worker_metrics)

        prom = "127.0.0.1:%d" % free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
%s
scrape_configs:
  - job_name: rdattn-coordinator
    static_configs: [{targets: ["%s"]}]
  - job_name: rdattn-worker
    static_configs: [{targets: ["%s"]}]
""" % ("\n".join("  - %s" % r for r in rules), coord_metrics, worker_metrics))
        promproc = start([args.prometheus, "--config.file=" + cfg, "--web.listen-address=" + prom,
                          "--storage.tsdb.path=" + os.path.join(tmp, "tsdb")], os.path.join(tmp, "prometheus.log"), env)
        deadline = time.time() + 60
        while True:
            try:
                if "Ready" in http_get("http://%s/-/ready" % prom, timeout=2):
                    break
            except OSError:
                pass
            if promproc.poll() is not None or time.time() > deadline:
                raise AssertionError("prometheus did not become ready")
            time.sleep(0.3)
        check(True, "prometheus is ready on %s" % prom)
        # Prometheus starts scraping only after its first target sync (about 5 s): wait until it
        # has scraped both targets, so that the sweep is watched from its start.
        while len(query(prom, "up == 1")) < 2:
            if time.time() > deadline + 30:
                raise AssertionError("prometheus did not scrape both targets within 90 s")
            time.sleep(0.3)
        check(True, "prometheus has scraped the coordinator and the worker")

        sub = subprocess.run([client, "--coordinator", addr, "submit", sweep], capture_output=True, text=True, timeout=60)
        check(sub.returncode == 0, "rdattn submit: %s %s" % (sub.stdout.strip(), sub.stderr.strip()))
        sid = re.search(r"(sw-[0-9a-zA-Z-]+)", sub.stdout).group(1)
        # While the sweep runs: both targets are up, and the live training series appear.
        deadline = time.time() + 120
        while not query(prom, 'max_over_time(rdattn_job_running{sweep="%s"}[10m]) == 1' % sid):
            if time.time() > deadline:
                targets = json.loads(http_get("http://%s/api/v1/targets" % prom))["data"]["activeTargets"]
                raise AssertionError("no running job in Prometheus within 120 s; targets: %s" % [
                    (t["labels"].get("job"), t["health"], t.get("lastError")) for t in targets] +
                    "; rdattn_job_running series: %s" % query(prom, "max_over_time(rdattn_job_running[10m])"))
            time.sleep(0.5)
        check(True, "Prometheus scraped a job while it ran (rdattn_job_running 1)")
        watch = subprocess.run([client, "--coordinator", addr, "watch", sid], capture_output=True, text=True, timeout=600)
        check(watch.returncode == 0, "the sweep ended (rdattn watch exit 0)")
        time.sleep(3)  # a few more scrapes of the final values

        channel = grpc.insecure_channel(addr)
        svc = cgrpc.SweepServiceStub(channel)
        status = svc.GetSweep(cpb.GetSweepRequest(sweep_id=sid), timeout=30).sweep
        jobs = {j.job.job_id: j.job for j in status.jobs}
        check(len(jobs) == 2, "2 jobs")
        last_val = {}
        for resp in svc.WatchSweep(cpb.WatchSweepRequest(sweep_id=sid, after_seq=0), timeout=60):
            ev = resp.event
            if ev.HasField("metric_event") and ev.metric_event.kind == rpb.MetricEvent.KIND_EVAL:
                last_val[ev.metric_event.job_id] = ev.metric_event.val_nll
            if ev.HasField("sweep_state_change") and ev.sweep_state_change.to_state > 2:
                break
        check(set(last_val) == set(jobs), "every job has an evaluation event")

        # The expositions themselves, against the catalogue of docs/metrics.md.
        sys.path.insert(0, os.path.join(args.source, "tests", "observability"))
        from grafana_dashboards_test import parse_catalogue  # noqa: E402
        with open(os.path.join(args.source, "docs", "metrics.md")) as f:
            catalogue = parse_catalogue(f.read())
        exported_by = {}
        for name, ep in (("coordinator", coord_metrics), ("worker", worker_metrics)):
            text = http_get("http://%s/metrics" % ep)
            promtool_accepts(args.promtool, name, text)
            families = exposition_labels(text)
            rdattn = {k: v for k, v in families.items() if k.startswith("rdattn_")}
            check(len(rdattn) >= 5, "the %s exports %d rdattn_ series names" % (name, len(rdattn)))
            bad = {k: sorted(v & FORBIDDEN_LABELS) for k, v in rdattn.items() if v & FORBIDDEN_LABELS}
            check(not bad, "no %s series carries a step-like label %s" % (name, bad))
            errors, exported = catalogue_errors(text, catalogue, name)
            check(not errors, "every rdattn_ family the %s exports is in docs/metrics.md with its type and labels%s"
                  % (name, (": " + "; ".join(errors)) if errors else ""))
            exported_by[name] = exported

        missing = sorted(n for n in catalogue if not any(n in e for e in exported_by.values()))
        check(not missing, "every metric of docs/metrics.md (%d) was exported by the coordinator or the worker%s"
              % (len(catalogue), (": missing " + ", ".join(missing)) if missing else ""))

        def series(expr):
            return [(r["metric"], float(r["value"][1])) for r in query(prom, expr)]

        # Validation NLL per arm, with the job labels, equal to the trainer's own last evaluation.
        val = series('last_over_time(rdattn_val_nll{sweep="%s"}[15m])' % sid)
        check(sorted(mt["arm"] for mt, _ in val) == ["block", "rd"], "rdattn_val_nll: one series per arm")
        for mt, v in val:
            check(JOB_LABELS <= set(mt), "rdattn_val_nll{arm=%s} has labels %s" % (mt["arm"], sorted(JOB_LABELS)))
            check(mt["job"] == "rdattn-worker" and mt["seed"] == "7" and mt["scale"] == "tiny"
                  and jobs[mt["job_id"]].arm == mt["arm"], "rdattn_val_nll{arm=%s}: scraped from the worker, seed 7, "
                  "scale tiny, job_id names that arm's job" % mt["arm"])
            want = last_val[mt["job_id"]]
            check(abs(v - want) <= 1e-9 * abs(want), "rdattn_val_nll{arm=%s} = %.9f = last eval event's val_nll %.9f"
                  % (mt["arm"], v, want))
        # JS per layer: rd has one series per layer (tiny: 2 layers), block none.
        js = series('last_over_time(rdattn_depth_js_divergence{sweep="%s"}[15m])' % sid)
        check(sorted((mt["arm"], mt["layer"]) for mt, _ in js) == [("rd", "0"), ("rd", "1")],
              "rdattn_depth_js_divergence: rd layers 0 and 1, nothing for block: %s"
              % [(mt["arm"], mt["layer"], round(v, 5)) for mt, v in js])
        check(all(v >= 0 and math.isfinite(v) for _, v in js), "JS values are finite and >= 0")
        check(all(JOB_LABELS <= set(mt) for mt, _ in js), "JS series carry the job labels")
        for metric in ("rdattn_tokens_per_second", "rdattn_model_flops_utilization"):
            s = series('last_over_time(%s{sweep="%s"}[15m])' % (metric, sid))
            check(sorted(mt["arm"] for mt, _ in s) == ["block", "rd"] and all(v > 0 for _, v in s),
                  "%s: one positive series per job: %s" % (metric, [(mt["arm"], round(v, 4)) for mt, v in s]))
        mfu = series('last_over_time(rdattn_model_flops_utilization{sweep="%s"}[15m])' % sid)
        check(all(0 < v <= 1 for _, v in mfu), "MFU is a 0-1 ratio")
        steps = series('sum by (arm) (last_over_time(rdattn_step_duration_seconds_count{sweep="%s"}[15m]))' % sid)
        check(len(steps) == 2 and all(v >= 5 for _, v in steps), "step-duration histograms hold observations: %s"
              % [(mt["arm"], v) for mt, v in steps])

        # The coordinator's scheduling view.
        done = series('rdattn_jobs{job="rdattn-coordinator",state="succeeded"}')
        check(len(done) == 1 and done[0][1] == 2, "rdattn_jobs{state=succeeded} = 2")
        sj = series('rdattn_sweep_jobs{sweep="%s",state="succeeded"}' % sid)
        check(len(sj) == 1 and sj[0][1] == 2, "rdattn_sweep_jobs{sweep,state=succeeded} = 2")
        sub_ok = series('rdattn_grpc_requests_total{method="SubmitSweep",code="OK"}')
        check(len(sub_ok) == 1 and sub_ok[0][1] >= 1, "rdattn_grpc_requests_total counts SubmitSweep OK")
        up = series("up")
        check(sorted(mt["job"] for mt, v in up if v == 1) == ["rdattn-coordinator", "rdattn-worker"], "both targets up")

        # The deploy rules run against these series: all healthy, no alert fires.
        doc = json.loads(http_get("http://%s/api/v1/rules" % prom))
        rl = [r for g in doc["data"]["groups"] for r in g["rules"]]
        check(len(rl) > 0 and all(r.get("health") == "ok" for r in rl),
              "%d rules from deploy/prometheus loaded and evaluate without error" % len(rl))
        firing = [a for a in json.loads(http_get("http://%s/api/v1/alerts" % prom))["data"]["alerts"]
                  if a.get("state") == "firing"]
        check(not firing, "no alert fires on a healthy sweep: %s" % [a["labels"].get("alertname") for a in firing])
        failed = False
    finally:
        stop_all(show_logs=failed)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
