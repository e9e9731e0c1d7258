#!/usr/bin/env bash
# make test's two pytest passes, side by side (see the root conftest.py for why two):
#   1. every test but the control-plane ones, in parallel (pytest-xdist, $WORKERS workers);
#   2. the control-plane tests in one process (one cluster: their pods' ports are fixed).
# Pass 2 mostly waits on the control plane, so it runs beside pass 1 instead of after it:
# 991 s for both on the 2-CPU dev box (session 16), against 670 + 602 s one after the other.
# Pass 2's output goes to a file, printed whole when both have ended; either failing
# (pytest's exit 5, "no tests ran", included) fails this script.
# Usage: tools/test_passes.sh PYTHON WORKERS [pytest args...]
set -uo pipefail
py=$1 workers=$2
shift 2
log=$(mktemp "${TMPDIR:-/tmp}/pdserve-controlplane-tests.XXXXXX")
echo "control-plane tests (pass 2) run beside pass 1; their output: $log (printed when both end)"
"$py" -m pytest -ra -m controlplane "$@" tests e2e > "$log" 2>&1 &
second=$!
trap 'kill "$second" 2>/dev/null' INT TERM EXIT
"$py" -m pytest -ra -n "$workers" --dist load -m "not controlplane" "$@" tests e2e
first_rc=$?
wait "$second"
second_rc=$?
trap - INT TERM EXIT
echo "=================== control-plane tests (pass 2, ran beside pass 1) ==================="
cat "$log"
rm -f "$log"
echo "pass 1 (pytest -m 'not controlplane'): exit $first_rc; pass 2 (pytest -m controlplane): exit $second_rc"
[ "$first_rc" -eq 0 ] && [ "$second_rc" -eq 0 ]
