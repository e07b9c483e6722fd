#!/usr/bin/env bash
# The watchdog on the real server of a converged box (make demo, or the e2e box): time from a frozen engine
# (SIGSTOP of VLLM::EngineCore) to serving again for issue 32's four patterns, the loads that must not restart it,
# and the check's own CPU time and memory.
#   benchmarks/watchdog_recovery.sh BOX [--patterns retrying,long,idle,reader] [--false-alarms prefill,...]
#                                       [--trials N] [--set KEY=VALUE] [--cost-runs N] [--json]
# (benchmarks/watchdog_recovery.py runs inside the box, tests/integration/lab_checks.py beside it; it restores the box's watchdog config at the end).
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/../scripts/lab-env.sh"
box=${1:?usage: watchdog_recovery.sh BOX [--patterns P,...] [--false-alarms K,...] [--trials N] [--set KEY=VALUE] [--cost-runs N] [--json]}
shift
step "watchdog in $box: freeze -> serving again, and the check's cost"
run_in_box "$box" /var/tmp/gpuhost-bench-watchdog benchmarks/watchdog_recovery.py tests/integration/lab_checks.py -- "$@"
