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
step "first start of vLLM from a hub id in $box: pre-fetched vs downloaded at start"
run_in_box "$box" /var/tmp/gpuhost-bench-weights-code benchmarks/first_start_weights.py tests/doubles/hf_hub_double.py \
  roles/vllm_service/files/vllm_fetch_weights.py -- "$@"
