# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/demo.sh (source it; it defines functions only).
#
#   rdattn_env              export the run-time environment of CI and the test scripts
#   rdattn_build            configure and build into $RDATTN_BUILD_DIR (default: build/)
#   rdattn_phase NAME CMD…  run CMD as a named phase and print its elapsed time
#
# Knobs (environment): RDATTN_BUILD_DIR (default build), RDATTN_JOBS (default 2),
# RDATTN_CMAKE_ARGS (extra configure arguments, split on spaces).

RDATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RDATTN_BUILD_DIR="${RDATTN_BUILD_DIR:-$RDATTN_ROOT/build}"
RDATTN_JOBS="${RDATTN_JOBS:-2}"

# MPI as root in a container, oversubscribed local ranks, no ssh needed (docs/build.md), and one
# OpenMP thread per process: oversubscribed OpenMP spin barriers are catastrophically slow.
rdattn_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_plm=isolated
  export OMP_NUM_THREADS=1
}

# One configuration for every script (test and demo share build/ without rebuilding each other).
rdattn_build() {
  local cache="$RDATTN_BUILD_DIR/CMakeCache.txt" extra=()
  # A build folder configured with another generator cannot be reused: start it afresh.
  if [ -f "$cache" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$cache"; then
    echo "rdattn: $RDATTN_BUILD_DIR was configured with another generator; reconfiguring with Ninja"
    rm -rf -- "$cache" "$RDATTN_BUILD_DIR/CMakeFiles"
  fi
  if [ -n "${RDATTN_CMAKE_ARGS:-}" ]; then read -r -a extra <<<"$RDATTN_CMAKE_ARGS"; fi
  cmake -S "$RDATTN_ROOT" -B "$RDATTN_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DRDATTN_WERROR=ON "${extra[@]}" || return
  cmake --build "$RDATTN_BUILD_DIR" -j"$RDATTN_JOBS" || return
}

RDATTN_PHASE=""
RDATTN_PHASE_T0=0
RDATTN_T0=$SECONDS

rdattn_phase() {
  RDATTN_PHASE=$1
  shift
  RDATTN_PHASE_T0=$SECONDS
  echo "==> [$RDATTN_PHASE] $*"
  "$@" || return
  echo "==> [$RDATTN_PHASE] done in $((SECONDS - RDATTN_PHASE_T0)) s"
  RDATTN_PHASE=""
}

# Installed as an EXIT trap by the scripts: names the phase that failed and the total time.
# A trap that does its own clean-up first passes the original exit status as $1.
rdattn_report_exit() {
  local rc=${1:-$?}
  if [ "$rc" -ne 0 ] && [ -n "$RDATTN_PHASE" ]; then
    echo "==> [$RDATTN_PHASE] FAILED (exit $rc) after $((SECONDS - RDATTN_PHASE_T0)) s" >&2
  fi
  echo "==> total $((SECONDS - RDATTN_T0)) s, exit $rc"
  return "$rc"
}
