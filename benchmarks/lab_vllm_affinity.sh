#!/usr/bin/env bash
# The real vLLM's CPU cost on a converged lab box (make demo, or the e2e box), its unit as rendered and confined to
# one core (CPUAffinity=, a runtime drop-in removed at the end): the start, then a fixed load at each concurrency.
#   benchmarks/lab_vllm_affinity.sh BOX [--cpus 0] [--requests 64] [--concurrency 4 1] [--tokens 256] [--json]
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/../scripts/lab-env.sh"
box=${1:?usage: lab_vllm_affinity.sh BOX [--cpus 0] [--requests N] [--concurrency C...] [--tokens T] [--json]}
shift
step "vLLM in $box: CPU of a start and of a fixed load, as rendered and on one core"
run_in_box "$box" /var/tmp/gpuhost-bench-affinity benchmarks/lab_vllm_affinity.py tests/integration/lab_checks.py -- "$@"
