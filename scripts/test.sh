#!/usr/bin/env bash
# The README's test command: installs the Debian packages and data (scripts/setup.sh), builds
# everything in Release with warnings as errors, runs the linters (scripts/lint.sh) and every test
# with ctest (RDATTN_TEST_JOBS at a time, default 2), and builds the coordinator, worker and client
# tests with ASan+UBSan (build-asan/) and with TSan (build-tsan/) in the background meanwhile, then
# runs them there; and makes Debian 13 roots (LibTorch 2.6 CPU, CUDA LibTorch 2.6 + CUDA 12.4 +
# NCCL 2.22) and builds the trainer in them in the background too, then runs the debian13 ctests
# (tests/debian13) in a phase of their own (docs/build.md).
#
#   scripts/test.sh                 what CI runs (.ci/run)
#   scripts/test.sh -R layering     extra arguments go to the main ctest run (and then the
#                                   debian13 phases are left out: run them with -L debian13)
#   RDATTN_LINT=0 RDATTN_SANITIZERS=0 RDATTN_DEBIAN13=0 scripts/test.sh -R layering
#                                   skip those phases locally
#
# Run it as root on Debian 12 (the Debian 13 roots need root: debootstrap, chroot, mounts).
# Exits non-zero on any failure.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RDATTN_ROOT"
# On any exit: stop a background sanitizer build, name the phase that failed, print the total.
trap 'rc=$?; rdattn_sanitize_builds_stop; rdattn_debian13_builds_stop; rdattn_report_exit "$rc"' EXIT

rdattn_phase setup scripts/setup.sh
rdattn_env
rdattn_phase build rdattn_build
# The sanitizer builds compile in the background at the lowest CPU priority while the linters
# and the main tests run: those phases wait on processes, sockets and timers most of the time
# and leave the CPU idle, and `nice -n 19` gives the tests the CPU whenever they want it.
sanitizers=${RDATTN_SANITIZERS:-1}
debian13=${RDATTN_DEBIAN13:-1}
if [ $# -gt 0 ]; then debian13=0; fi
if [ "$debian13" != 0 ]; then rdattn_debian13_builds_start; fi
if [ "$sanitizers" != 0 ]; then rdattn_sanitize_builds_start; fi
if [ "${RDATTN_LINT:-1}" != 0 ]; then rdattn_phase lint scripts/lint.sh "$RDATTN_BUILD_DIR"; fi
rdattn_phase test ctest --test-dir "$RDATTN_BUILD_DIR" --output-on-failure --timeout 900 \
  -j"$RDATTN_TEST_JOBS" -LE debian13 "$@"
if [ "$sanitizers" != 0 ]; then
  rdattn_phase sanitize-build rdattn_sanitize_builds_wait
  rdattn_phase asan-test rdattn_sanitize_test "$RDATTN_ROOT/build-asan" -j2
  rdattn_phase tsan-test rdattn_sanitize_test "$RDATTN_ROOT/build-tsan" -j2 -E "$RDATTN_TSAN_EXCLUDE"
fi
if [ "$debian13" != 0 ]; then
  rdattn_phase debian13-build rdattn_debian13_builds_wait
  rdattn_phase debian13-test ctest --test-dir "$RDATTN_BUILD_DIR" -L debian13 --output-on-failure \
    --timeout 3600 -j2
fi
