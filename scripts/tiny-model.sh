#!/usr/bin/env bash
# Build (once, cached) the tiny random-weight Qwen3-shaped model the e2e run serves. The builder
# venv takes torch/transformers/tokenizers from the CPU wheelhouse, so nothing else is fetched.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
# The builder and its chat template, by content: a model built by another version is built again.
stamp=$(cat "$REPO_ROOT/tests/model/make_tiny_model.py" "$REPO_ROOT/tests/model/tiny_chat_template.jinja" | sha256sum | cut -c1-16)
if [ -f "$TINY_MODEL/model.safetensors" ] && [ -f "$TINY_MODEL/tokenizer.json" ] \
   && [ "$(cat "$TINY_MODEL.builder" 2>/dev/null)" = "$stamp" ]; then
  step "tiny model cached at $TINY_MODEL"; exit 0
fi
[ -n "$(ls "$WHEELHOUSE_CPU"/torch-*.whl 2>/dev/null)" ] || { echo "CPU wheelhouse missing: make wheelhouse-cpu" >&2; exit 1; }
bv=$GPUHOST_CACHE/model-builder
if [ ! -x "$bv/bin/python" ] || ! "$bv/bin/python" -c 'import torch, transformers, tokenizers' 2>/dev/null; then
  step "model-builder venv from the CPU wheelhouse (torch, transformers, tokenizers)"
  rm -rf "$bv"
  python3 -m venv "$bv"
  # uv (vLLM's documented installer, in the wheelhouse beside vLLM): 7 s where pip took 50 for torch and the rest.
  "$bv/bin/python" -m pip install -q --no-index --find-links "$WHEELHOUSE_CPU" uv
  "$bv/bin/uv" pip install -q --no-cache --python "$bv/bin/python" --no-index --find-links "$WHEELHOUSE_CPU" \
    torch transformers tokenizers safetensors
fi
step "building the tiny Qwen3-shaped model (seed 0) -> $TINY_MODEL"
rm -rf "$TINY_MODEL.tmp"
"$bv/bin/python" "$REPO_ROOT/tests/model/make_tiny_model.py" "$TINY_MODEL.tmp" --arch qwen3 --seed 0
chmod -R a+rX "$TINY_MODEL.tmp"
rm -rf "$TINY_MODEL"; mv "$TINY_MODEL.tmp" "$TINY_MODEL"
# Beside the model, not in it (the model directory is also the hub double's repository in the unit tests).
echo "$stamp" > "$TINY_MODEL.builder"
