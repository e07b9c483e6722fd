#!/usr/bin/env bash
# vLLM's own client against the server in a lab box: `vllm bench serve` from the box's vLLM venv,
# random prompts, the server's default sampling (no temperature sent), exactly OUT tokens each.
#   scripts/lab-bench.sh BOX [CONCURRENCY] [PROMPTS] [IN] [OUT]     (defaults 4 16 96 256)
# Prints vLLM's summary (successful/failed requests, output tok/s, TTFT, TPOT). A server with an API key:
# export VLLM_API_KEY; it reaches the client as OPENAI_API_KEY (vllm bench's variable) through the environment.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
box=${1:?box}; conc=${2:-4}; prompts=${3:-16}; in_len=${4:-96}; out_len=${5:-256}
models=$(bash "$REPO_ROOT/scripts/lab-api.sh" "$box" /v1/models)
if ! read -r model root < <(python3 -c 'import json, sys; m = json.load(sys.stdin)["data"][0]; print(m["id"], m["root"])' \
    <<<"$models" 2>/dev/null); then
  echo "lab-bench.sh: $box's /v1/models answered: $models (a server with an API key: export VLLM_API_KEY)" >&2
  exit 1
fi
step "vllm bench serve in $box: model $model, $prompts prompts, concurrency $conc, random $in_len in / $out_len out, server-default sampling"
OPENAI_API_KEY=${VLLM_API_KEY:-} podman exec -i -w /tmp -e HF_HUB_OFFLINE=1 -e OPENAI_API_KEY -e TOKENIZERS_PARALLELISM=false "$box" \
  /opt/vllm/venv/bin/python - --backend openai --base-url http://127.0.0.1:8000 --endpoint /v1/completions \
  --model "$model" --tokenizer "$root" --dataset-name random --random-input-len "$in_len" \
  --random-output-len "$out_len" --num-prompts "$prompts" --max-concurrency "$conc" --request-rate inf \
  --ignore-eos --disable-tqdm --seed 1234 <"$REPO_ROOT/scripts/vllm_bench_serve.py"
