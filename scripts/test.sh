#!/usr/bin/env bash
# The README's test command: installs the Debian packages and data (scripts/setup.sh), builds
# everything in Release with warnings as errors, runs the linters (scripts/lint.sh) and every test
# with ctest.
#
#   scripts/test.sh                 what CI runs (.ci/run)
#   scripts/test.sh -R layering     extra arguments go to the main ctest run
#   RDATTN_LINT=0 scripts/test.sh -R layering   skips the lint phase
#
# Run it as root or as a user with sudo on Debian 12. Exits non-zero on any failure.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RDATTN_ROOT"
trap rdattn_report_exit EXIT

rdattn_phase setup scripts/setup.sh
rdattn_env
rdattn_phase build rdattn_build
if [ "${RDATTN_LINT:-1}" != 0 ]; then rdattn_phase lint scripts/lint.sh "$RDATTN_BUILD_DIR"; fi
rdattn_phase test ctest --test-dir "$RDATTN_BUILD_DIR" --output-on-failure --timeout 900 "$@"
