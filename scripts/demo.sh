#!/usr/bin/env bash
# The README's first command: sets up the machine (scripts/setup.sh), builds rdattn and runs the
# main job. Until the sweep service lands it stops after a successful setup and build.
#
# Run it as root or as a user with sudo on Debian 12.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RDATTN_ROOT"
trap rdattn_report_exit EXIT

rdattn_phase setup scripts/setup.sh
rdattn_env
rdattn_phase build rdattn_build
echo "rdattn: the sweep service is not built yet (issue: the service); setup and build succeeded"
