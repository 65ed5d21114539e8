#!/bin/bash
# Submit the rdattn service to Slurm: the coordinator job, then the worker job (which starts once
# the coordinator job has started: --dependency=after:COORDINATOR_JOB), and optionally a sweep.
#
#   RDATTN_BIN_DIR=/opt/rdattn/bin RDATTN_STATE_DIR=/shared/rdattn deploy/slurm/submit-sweep.sh [SWEEP.yaml]
#
# Prints the job ids as sourceable lines on stdout:
#   RDATTN_COORDINATOR_JOB=123
#   RDATTN_WORKER_JOB=124                (with RDATTN_WORKER_NODES: one id per node, 124,125)
#   RDATTN_COORDINATOR=node01:40123      (only with SWEEP.yaml)
#   RDATTN_COORDINATOR_METRICS=node01:9401  (only with SWEEP.yaml and RDATTN_COORDINATOR_METRICS_LISTEN)
#   RDATTN_SWEEP=sw-1a2b3c4d             (only with SWEEP.yaml)
# With a sweep file it waits (RDATTN_COORDINATOR_WAIT seconds, default 600) for the coordinator's
# address file and submits the sweep with `rdattn submit`. Follow it with
#   rdattn --coordinator "$(cat $RDATTN_STATE_DIR/coordinator.addr)" watch SWEEP_ID
# Extra sbatch options: RDATTN_SBATCH_ARGS (both jobs), RDATTN_COORDINATOR_SBATCH_ARGS,
# RDATTN_WORKER_SBATCH_ARGS (e.g. "--nodes=4 --gpus-per-node=8 --exclusive --time=24:00:00").
# RDATTN_SKIP_COORDINATOR=1 submits only workers (for a coordinator that is already running).
# RDATTN_WORKER_NODES=node1,node2 submits one single-node worker job per listed node
# (--nodes=1 --nodelist=NODE) instead of one worker job: a failed node then ends only its own
# worker job (Slurm ends a whole job when one of its nodes fails, see sbatch --no-kill), and the
# other nodes' workers keep running and take over its jobs.
# Every other variable is passed to the jobs through sbatch's default --export=ALL; see README.md.
set -euo pipefail

die() { echo "submit-sweep.sh: error: $*" >&2; exit 2; }
log() { echo "submit-sweep.sh: $*" >&2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SWEEP=${1:-}
[ "$#" -le 1 ] || die "usage: submit-sweep.sh [SWEEP.yaml] (got $# arguments)"
[ -z "$SWEEP" ] || [ -r "$SWEEP" ] || die "sweep file $SWEEP is not readable"
command -v sbatch > /dev/null 2>&1 || die "sbatch not found on PATH (run this on a Slurm login node)"
for f in coordinator.sbatch worker.sbatch; do
  [ -r "$HERE/$f" ] || die "$HERE/$f is missing"
done

# The jobs and this script must agree on the state folder: fix it here and export it.
export RDATTN_STATE_DIR=${RDATTN_STATE_DIR:-$PWD/rdattn-state}
mkdir -p "$RDATTN_STATE_DIR" || die "cannot create RDATTN_STATE_DIR=$RDATTN_STATE_DIR"
ADDR_FILE=${RDATTN_COORDINATOR_ADDR_FILE:-$RDATTN_STATE_DIR/coordinator.addr}

# shellcheck disable=SC2206
common=(${RDATTN_SBATCH_ARGS:-})
# shellcheck disable=SC2206
cargs=(${RDATTN_COORDINATOR_SBATCH_ARGS:-})
# shellcheck disable=SC2206
wargs=(${RDATTN_WORKER_SBATCH_ARGS:-})

dep=()
if [ "${RDATTN_SKIP_COORDINATOR:-0}" != 1 ]; then
  # Not started yet, so its (stale) address must not be read by the workers or by us.
  rm -f "$ADDR_FILE"
  cjob=$(sbatch --parsable "${common[@]}" "${cargs[@]}" "$HERE/coordinator.sbatch") || die "sbatch coordinator.sbatch failed"
  cjob=${cjob%%;*}
  echo "RDATTN_COORDINATOR_JOB=$cjob"
  log "coordinator job $cjob (state in $RDATTN_STATE_DIR)"
  dep=(--dependency="after:$cjob")
fi
if [ -z "${RDATTN_WORKER_NODES:-}" ]; then
  wjob=$(sbatch --parsable "${common[@]}" "${dep[@]}" "${wargs[@]}" "$HERE/worker.sbatch") || die "sbatch worker.sbatch failed"
  wjob=${wjob%%;*}
  log "worker job $wjob"
else
  wjob=""
  IFS=, read -r -a wnodes <<< "$RDATTN_WORKER_NODES"
  [ "${#wnodes[@]}" -gt 0 ] || die "RDATTN_WORKER_NODES='$RDATTN_WORKER_NODES' names no node (expected e.g. node1,node2)"
  for node in "${wnodes[@]}"; do
    case "$node" in ''|*[!A-Za-z0-9._-]*) die "RDATTN_WORKER_NODES: '$node' is not a node name (comma-separated names, no ranges)" ;; esac
    j=$(sbatch --parsable "${common[@]}" "${dep[@]}" "${wargs[@]}" --nodes=1 --nodelist="$node" "$HERE/worker.sbatch") \
      || die "sbatch worker.sbatch for node $node failed"
    j=${j%%;*}
    log "worker job $j on $node"
    wjob=${wjob:+$wjob,}$j
  done
fi
echo "RDATTN_WORKER_JOB=$wjob"

[ -n "$SWEEP" ] || exit 0

if [ -n "${RDATTN_BIN_DIR:-}" ]; then
  RDATTN=""
  for c in "$RDATTN_BIN_DIR/rdattn" "$RDATTN_BIN_DIR/client/rdattn"; do
    if [ -x "$c" ]; then RDATTN=$c; break; fi
  done
  [ -n "$RDATTN" ] || die "rdattn (the client) not found in RDATTN_BIN_DIR=$RDATTN_BIN_DIR"
else
  RDATTN=$(command -v rdattn) || die "rdattn (the client) not on PATH; set RDATTN_BIN_DIR"
fi
WAIT=${RDATTN_COORDINATOR_WAIT:-600}
deadline=$((SECONDS + WAIT))
log "waiting for $ADDR_FILE (the coordinator job has to start first)"
while [ ! -s "$ADDR_FILE" ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "$ADDR_FILE did not appear within RDATTN_COORDINATOR_WAIT=${WAIT}s (squeue -j ${cjob:-?})"
  sleep 2
done
addr=$(head -n 1 "$ADDR_FILE")
echo "RDATTN_COORDINATOR=$addr"
# coordinator.sbatch writes coordinator.env (with the metrics address, if any) before the address.
ENV_FILE=${ADDR_FILE%.addr}.env
[ "$ENV_FILE" != "$ADDR_FILE" ] || ENV_FILE=$ADDR_FILE.env
grep -s '^RDATTN_COORDINATOR_METRICS=' "$ENV_FILE" || true
sid=$("$RDATTN" --coordinator "$addr" submit "$SWEEP") || die "rdattn submit $SWEEP failed"
echo "RDATTN_SWEEP=$sid"
log "sweep $sid submitted; follow it with: $RDATTN --coordinator $addr watch $sid"
