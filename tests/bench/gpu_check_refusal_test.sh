#!/bin/sh
# gpu_check_no_cli11: scripts/gpu_check.sh refuses at once (exit 2, before it looks for PyTorch
# or a GPU) when the CLI11 headers it is pointed at are missing, and says how to provide them.
# Usage: gpu_check_refusal_test.sh GPU_CHECK_SH
set -u
out=$(CLI11_INCLUDE_DIR=/nonexistent/cli11 PYTHON=/nonexistent/python3 "$1" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 2 ]; then
  echo "FAIL: gpu_check.sh exited $rc (want 2)"; exit 1
fi
echo "$out" | grep -q "CLI11_INCLUDE_DIR=/nonexistent/cli11 has no CLI/CLI.hpp" || {
  echo "FAIL: the message does not name CLI11_INCLUDE_DIR"; exit 1
}
echo "ok"
