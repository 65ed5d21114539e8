#!/bin/bash
# Runs INSIDE the CPU image (tests/deploy/container_test.py, `buildah run`), as the image's user:
# prepares byte-level shards with rdattn-data, starts a coordinator and a worker on loopback,
# checks the image's healthcheck against the coordinator, submits /work/sweep.yaml with the
# client, watches it to its end and writes the sweep (get --format json) and the paired report
# (report.md with its gnuplot plots) under /work/out. Every process it starts is stopped on exit.
#
#   container_sweep.sh WORKDIR        (WORKDIR is /work: text/, sweep.yaml; out/ is written)
set -euo pipefail
w="$1"
out="$w/out"
mkdir -p "$out" "$w/state" "$w/workdir" "$w/ckpt"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "== rdattn-data prepare"
rdattn-data prepare --tokenizer byte --out "$w/data" --prefix ct --text "$w"/text/*.txt \
  --split files --val-files "$w/text/val.txt" --test-files "$w/text/test.txt"

echo "== coordinator"
rdattn-coordinator --listen 127.0.0.1:0 --db "$w/state/coordinator.db" --lease-seconds 30 \
  --heartbeat-seconds 1 >"$out/coordinator.out" 2>"$out/coordinator.log" &
pids+=("$!")
addr=""
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*listening on \([^ ]*:[0-9]*\).*/\1/p' "$out/coordinator.out" | head -n 1)
  [ -n "$addr" ] && break
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "the coordinator printed no address" >&2
  cat "$out/coordinator.log" >&2
  exit 1
fi
echo "coordinator at $addr"
rdattn-healthcheck "$addr" | tee "$out/health-up.txt"

echo "== worker"
rdattn-worker --coordinator "$addr" --slots 1 --kind cpu --workdir "$w/workdir" \
  --checkpoint-root "$w/ckpt" --train-binary "$(command -v rdattn-train)" --threads-per-rank 1 \
  >"$out/worker.log" 2>&1 &
pids+=("$!")

echo "== submit and watch"
rdattn --coordinator "$addr" submit "$w/sweep.yaml" | tee "$out/submit.txt"
sid=$(grep -o 'sw-[0-9A-Za-z-]*' "$out/submit.txt" | head -n 1)
timeout 300 rdattn --coordinator "$addr" watch "$sid" --format text | tee "$out/watch.txt"
rdattn --coordinator "$addr" get "$sid" --format json >"$out/get.json"
rdattn --coordinator "$addr" report "$sid" --format md --out "$out/report"

echo "== stop"
cleanup
pids=()
# A stopped coordinator must fail the healthcheck.
if rdattn-healthcheck "$addr" >"$out/health-down.txt" 2>&1; then
  echo "the healthcheck passed with the coordinator stopped" >&2
  exit 1
fi
echo "healthcheck fails with the coordinator stopped: ok"
