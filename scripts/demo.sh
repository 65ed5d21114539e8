#!/usr/bin/env bash
# The README's first command: the main job, end to end, on one machine.
#   1. installs the Debian packages and the offline data (scripts/setup.sh), and builds;
#   2. prepares the bundled corpus into byte-level shards: State of the Union for train and
#      validation (the 2016-2019 addresses are held out), the Jargon File as held-out test text;
#   3. starts a coordinator and a worker (2 slots, one thread per rank) on loopback, both serving
#      /metrics, and a real Prometheus scraping them (RDATTN_DEMO_PROMETHEUS=0 leaves it out);
#   4. submits the demo sweep (docs/examples/cpu-demo.yaml: block vs rd, 3 matched seeds);
#   5. shows live progress (rdattn watch);
#   6. prints the paired report and writes it (markdown, CSV, JSON, plots) under runs/demo/;
#   7. stops the services it started.
# Running it again is safe: the coordinator keeps its SQLite file in runs/demo/, the same sweep
# file is the same submission (idempotent request id), and finished jobs are not rerun;
# interrupted jobs resume from their checkpoints.
#
# Run it as root or as a user with sudo on Debian 12.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RDATTN_ROOT"

RUN_DIR="$RDATTN_ROOT/runs/demo"
PIDS=()
stop_services() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rdattn_report_exit "$rc"
}
trap stop_services EXIT

rdattn_phase setup scripts/setup.sh
rdattn_env
rdattn_phase build rdattn_build
B="$RDATTN_BUILD_DIR"

prepare_shards() {
  local sotu=data/third_party/sotu val=()
  for year in 2016 2017 2018 2019; do val+=("$sotu/${year}_"*.txt); done
  "$B/worker/data/rdattn-data" prepare --tokenizer byte --out data/shards --prefix sotu \
    --text "$sotu"/*.txt --val-files "${val[@]}" \
    --test-files /usr/share/doc/jargon-text/jargon.txt.gz --split files
}
rdattn_phase shards prepare_shards

start_services() {
  mkdir -p "$RUN_DIR"
  # The sweep file with absolute shard paths (the trainer runs in the worker's job folders).
  sed "s#\"data/shards/#\"$RDATTN_ROOT/data/shards/#" docs/examples/cpu-demo.yaml > "$RUN_DIR/sweep.yaml"
  "$B/coordinator/rdattn-coordinator" --listen 127.0.0.1:0 --db "$RUN_DIR/coordinator.db" \
    --metrics-listen 127.0.0.1:0 > "$RUN_DIR/coordinator.out" 2> "$RUN_DIR/coordinator.log" &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    if grep -q "^listening on " "$RUN_DIR/coordinator.out" 2>/dev/null; then break; fi
    if ! kill -0 "${PIDS[0]}" 2>/dev/null; then cat "$RUN_DIR/coordinator.log" >&2; return 1; fi
    sleep 0.1
  done
  ADDR=$(sed -n 's/^listening on //p' "$RUN_DIR/coordinator.out" | head -n 1)
  [ -n "$ADDR" ] || { echo "rdattn: the coordinator did not start; see $RUN_DIR/coordinator.log" >&2; return 1; }
  "$B/worker/daemon/rdattn-worker" --coordinator "$ADDR" --slots 2 --kind cpu --threads-per-rank 1 \
    --workdir "$RUN_DIR/worker" --checkpoint-root "$RUN_DIR/checkpoints" \
    --train-binary "$B/worker/trainer/rdattn-train" --metrics-listen 127.0.0.1:0 \
    2> "$RUN_DIR/worker.log" &
  PIDS+=($!)
  echo "coordinator on $ADDR (log $RUN_DIR/coordinator.log), worker with 2 slots (log $RUN_DIR/worker.log)"
  COORD_METRICS=$(metrics_address "$RUN_DIR/coordinator.log" "${PIDS[0]}")
  WORKER_METRICS=$(metrics_address "$RUN_DIR/worker.log" "${PIDS[1]}")
  echo "metrics: http://$COORD_METRICS/metrics (coordinator), http://$WORKER_METRICS/metrics (worker)"
  if [ "${RDATTN_DEMO_PROMETHEUS:-1}" != 0 ]; then start_prometheus; fi
}

# The HOST:PORT of the "metrics on http://HOST:PORT/metrics" line a service logs at start.
metrics_address() {
  local log=$1 pid=$2 addr
  for _ in $(seq 1 100); do
    addr=$(sed -n 's#.*metrics on http://\([^/]*\)/metrics.*#\1#p' "$log" 2>/dev/null | head -n 1)
    if [ -n "$addr" ]; then echo "$addr"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then cat "$log" >&2; return 1; fi
    sleep 0.1
  done
  echo "rdattn: no metrics line in $log" >&2
  return 1
}

# A real Prometheus (Debian's, from setup.sh) scraping both services every 5 s with the alert
# rules of deploy/prometheus/rules; RDATTN_DEMO_PROMETHEUS=0 skips it.
start_prometheus() {
  PROM_ADDR="127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  {
    echo "global: {scrape_interval: 5s, evaluation_interval: 5s}"
    echo "rule_files: [\"$RDATTN_ROOT/deploy/prometheus/rules/*.yml\"]"
    echo "scrape_configs:"
    echo "  - {job_name: rdattn-coordinator, static_configs: [{targets: [\"$COORD_METRICS\"]}]}"
    echo "  - {job_name: rdattn-worker, static_configs: [{targets: [\"$WORKER_METRICS\"]}]}"
  } > "$RUN_DIR/prometheus.yml"
  prometheus --config.file="$RUN_DIR/prometheus.yml" --web.listen-address="$PROM_ADDR" \
    --storage.tsdb.path="$RUN_DIR/prometheus-data" 2> "$RUN_DIR/prometheus.log" &
  PIDS+=($!)
  echo "prometheus: http://$PROM_ADDR (log $RUN_DIR/prometheus.log); point Grafana at it with deploy/grafana/"
}

# What Prometheus recorded: the last validation NLL of each job, per arm and seed.
prometheus_summary() {
  [ -n "${PROM_ADDR:-}" ] || return 0
  python3 - "$PROM_ADDR" "$SID" <<'PY' || echo "rdattn: could not query Prometheus (see $RUN_DIR/prometheus.log)"
import json, sys, urllib.parse, urllib.request
prom, sid = sys.argv[1], sys.argv[2]
q = 'last_over_time(rdattn_val_nll{sweep="%s"}[1d])' % sid
url = "http://%s/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": q}))
rows = json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
if not rows:
    print("Prometheus holds no validation NLL of %s: its jobs ran before this Prometheus (or an earlier run's)" % sid)
    print("scraped them; remove runs/demo to run the sweep again from scratch.")
else:
    print("Prometheus recorded %d validation-NLL series for %s (last value per job):" % (len(rows), sid))
for r in sorted(rows, key=lambda r: (r["metric"].get("seed", ""), r["metric"].get("arm", ""))):
    m = r["metric"]
    print("  seed %-4s %-8s %.4f" % (m.get("seed"), m.get("arm"), float(r["value"][1])))
PY
}
rdattn_phase services start_services

RDATTN=("$B/client/rdattn" --coordinator "$ADDR")
SID=$("${RDATTN[@]}" submit "$RUN_DIR/sweep.yaml")
echo "submitted sweep $SID"
rdattn_phase watch "${RDATTN[@]}" watch "$SID" --interval 5

show_report() {
  "${RDATTN[@]}" report "$SID"
  "${RDATTN[@]}" report "$SID" --format md --out "$RUN_DIR/report"
  "${RDATTN[@]}" report "$SID" --format csv --out "$RUN_DIR/report"
  "${RDATTN[@]}" report "$SID" --format json --out "$RUN_DIR/report"
  echo
  echo "rdattn: the paired report of sweep $SID is in $RUN_DIR/report/ (report.md, plots/*.png, *.csv, report.json)"
}
rdattn_phase report show_report
if [ -n "${PROM_ADDR:-}" ]; then
  sleep 6  # one more scrape of the final values
  prometheus_summary
fi
