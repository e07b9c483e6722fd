#!/usr/bin/env bash
# First start of vLLM from a hub id in a lab box: weights pre-fetched by vllm_service's fetch vs vLLM
# downloading them itself at start, from the hub test double on the box's loopback. The box needs
# vLLM installed (gpuhost.inference.vllm_install, e.g. `make demo` or the e2e box) and the tiny model
# at /srv/models/tiny-qwen3 (lab-box.sh mounts it).
#   benchmarks/first_start_weights.sh BOX [--rounds N] [--rate BYTES_PER_S] [--keep] [--json]
# Prints one row per round and the means (benchmarks/first_start_weights.py runs inside the box).
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/../scripts/lab-env.sh"
box=${1:?usage: first_start_weights.sh BOX [--rounds N] [--rate BYTES_PER_S] [--keep] [--json]}
shift
dir=/var/tmp/gpuhost-bench-weights-code
podman exec "$box" mkdir -p "$dir"
podman cp "$REPO_ROOT/benchmarks/first_start_weights.py" "$box:$dir/first_start_weights.py"
podman cp "$REPO_ROOT/tests/doubles/hf_hub_double.py" "$box:$dir/hf_hub_double.py"
podman cp "$REPO_ROOT/roles/vllm_service/files/vllm_fetch_weights.py" "$box:$dir/vllm_fetch_weights.py"
step "first start of vLLM from a hub id in $box: pre-fetched vs downloaded at start"
status=0
podman exec "$box" python3 "$dir/first_start_weights.py" "$@" || status=$?
podman exec "$box" rm -rf "$dir"
exit "$status"
