#!/bin/sh
# client_validate_cli: `rdattn validate` on the CPU demo exits 0; on a bad file it exits 2 and
# names the bad field. Usage: validate_cli_test.sh RDATTN GOOD.yaml BAD.yaml
set -u
rdattn=$1 good=$2 bad=$3

out=$("$rdattn" validate "$good" 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL: rdattn validate $good exited $rc:"; echo "$out"; exit 1
fi
echo "$out" | grep -q "6 jobs" || { echo "FAIL: expected '6 jobs' in:"; echo "$out"; exit 1; }

out=$("$rdattn" validate "$bad" 2>&1)
rc=$?
if [ "$rc" -ne 2 ]; then
  echo "FAIL: rdattn validate $bad exited $rc (want 2):"; echo "$out"; exit 1
fi
echo "$out" | grep -q "^rdattn: INVALID_ARGUMENT: .*scales\[0\]\.shape\.width: 63 is not divisible" || {
  echo "FAIL: the error does not name scales[0].shape.width:"; echo "$out"; exit 1
}
echo "ok"
