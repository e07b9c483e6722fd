#!/usr/bin/env bash
# The collection's profiles served by the real vLLM 0.28.0 CUDA build on this GPU host, at the seed's model size, and
# measured by the collection's own probes. Opt-in, not in CI; nothing here needs systemd, a hub or a network.
#   scripts/gpu-proof.sh WHEELHOUSE
# 1. install: WHEELHOUSE (`make wheelhouse VARIANT=cuda EXTRA_PACKAGES="ansible-core==2.19.14 pycountry"`, built for this
#    host's Python, PYTHON_VERSION=3.12 say) installed offline into the venv $GPU_PROOF_DIR/venv (pip resolves vllm and
#    ansible-core from it). GPU_PROOF_OVERLAY=1 instead installs every wheel of WHEELHOUSE as it is (no dependency
#    resolution) into $GPU_PROOF_DIR/site, laid over this host's own Python and its packages (a host image that already
#    has PyTorch and the CUDA libraries: carry only what it lacks); $GPU_PROOF_DIR/venv/bin/python is then a wrapper
#    that puts that folder first on PYTHONPATH.
# 2. model: tests/model/make_seed_model.py writes the seed's architecture at its full size (Qwen3.5-27B-shaped: hybrid
#    attention, an MTP layer, 262,144 positions; config and tokenizer only), served with load_format dummy (random
#    weights made on the GPU; nothing read from disk, so a cold start here lacks the weights' read of a real one).
# 3. render: playbooks/gpu_proof.yml (phase render) checks the profiles and renders every one and the launcher with
#    vllm_service's own filters and templates; the profile `seqs2` (the default with max-num-seqs 2, the seed's before)
#    is added through vllm_service_extra_profiles.
# 4. serve and measure, for each profile of GPU_PROOF_PROFILES: the launcher (vllm-start) starts vLLM, the server's
#    log is kept, /health and /v1/models are awaited (GPU_PROOF_START_TIMEOUT), then playbooks/gpu_proof.yml (phase
#    measure) runs vllm_verify's measurement and writes its report (JSON, Markdown) to $GPU_PROOF_DIR/reports/; while the
#    probe runs, /metrics and nvidia-smi are captured once under load (captures/). The server is stopped after each.
#    A profile written `NAME:start` is only started and stopped (a warm start after a first one: the compile cache).
# Environment: GPU_PROOF_DIR (~/gpu-proof), GPU_PROOF_PROFILES ("default seqs2 mtp long"), GPU_PROOF_PORT (8000),
#   GPU_PROOF_START_TIMEOUT (1500 s), GPU_PROOF_LOAD_FORMAT (dummy; `auto` with real weights in GPU_PROOF_MODEL),
#   GPU_PROOF_MODEL (a model dir to serve instead of the built one), GPU_PROOF_TP (the tensor-parallel size of the
#   multi-GPU profiles: the GPUs nvidia-smi lists, at most 2, the seed's), GPU_PROOF_VERIFY_ARGS (more -e for the
#   measure phase, e.g. '{"vllm_verify_agent": false}'), GPU_PROOF_NVIDIA_SMI (nvidia-smi), PYTHON (python3; 3.11 or
#   later, ansible-core 2.19's floor).
# A dry run without a GPU: a wheelhouse of the vLLM API test double (tests/doubles/vllm_double), ansible-core, openai,
# anthropic, transformers and tokenizers with GPU_PROOF_OVERLAY=1, tests/doubles/nvidia_smi_mock.py as nvidia-smi
# (NVIDIA_SMI_MOCK_STATE, --mock-init h200) and GPU_PROOF_MODEL set to any model dir (the tiny model).
# Nothing is changed outside GPU_PROOF_DIR; the card's settings are only read (nvidia-smi queries).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
wheelhouse=$(cd "${1:?usage: gpu-proof.sh WHEELHOUSE (a directory of wheels)}" && pwd)
dir=${GPU_PROOF_DIR:-$HOME/gpu-proof}
profiles=${GPU_PROOF_PROFILES-default seqs2 mtp long}
port=${GPU_PROOF_PORT:-8000}
start_timeout=${GPU_PROOF_START_TIMEOUT:-1500}
load_format=${GPU_PROOF_LOAD_FORMAT:-dummy}
PYTHON=${PYTHON:-python3}
mkdir -p "$dir"/logs "$dir"/captures
dir=$(cd "$dir" && pwd)
venv=$dir/venv
py=$venv/bin/python
step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
declare -a times=()
note() { times+=("$(printf '%-52s %7ss' "$1" "$2")"); }

# 1. install (cached: the wheelhouse's file list is the stamp)
stamp=$( (echo "${GPU_PROOF_OVERLAY:-0}"; ls -1 "$wheelhouse") | sha256sum | cut -c1-16)
if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$stamp" ]; then
  t0=$(date +%s)
  rm -rf "$venv" "$dir/site"
  if [ "${GPU_PROOF_OVERLAY:-0}" = 1 ]; then
    step "install: every wheel of $wheelhouse over $("$PYTHON" -c 'import sys; print(sys.executable)')'s packages -> $dir/site"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dir/site" "$wheelhouse"/*.whl
    mkdir -p "$venv/bin"
    # A venv's python for the launcher and the agent probe: the host's interpreter with the wheels first.
    # shellcheck disable=SC2016  # $PYTHONPATH is the wrapper's own, expanded when it runs
    printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$dir/site" \
      "$("$PYTHON" -c 'import sys; print(sys.executable)')" >"$py"
    chmod 0755 "$py"
  else
    step "install: vllm==0.28.0 and ansible-core from $wheelhouse into $venv (offline)"
    "$PYTHON" -m venv "$venv"
    "$py" -m pip install -q --no-index --find-links "$wheelhouse" "vllm==0.28.0" ansible-core pycountry
  fi
  echo "$stamp" >"$dir/.installed"
  note "install" $(( $(date +%s) - t0 ))
fi
"$py" -c 'import vllm, torch, ansible; print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.version.cuda,
"ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "?")' 2>/dev/null | tail -1 || true
smi=${GPU_PROOF_NVIDIA_SMI:-nvidia-smi}
"$smi" --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv,noheader
gpus=$("$smi" --query-gpu=index --format=csv,noheader | wc -l)
smi_path=$(command -v "$smi")
tp=${GPU_PROOF_TP:-$(( gpus >= 2 ? 2 : 1 ))}

# 2. model (cached by the builder's content)
model=${GPU_PROOF_MODEL:-$dir/models/qwen3.5-27b-random}
if [ -z "${GPU_PROOF_MODEL:-}" ]; then
  mstamp=$(cat "$repo/tests/model/make_seed_model.py" "$repo/tests/model/make_tiny_model.py" \
    "$repo/tests/model/tiny_chat_template.jinja" | sha256sum | cut -c1-16)
  if [ "$(cat "$model.builder" 2>/dev/null)" != "$mstamp" ]; then
    step "model: the seed's architecture at full size (config and tokenizer) -> $model"
    rm -rf "$model"
    "$py" "$repo/tests/model/make_seed_model.py" "$model"
    echo "$mstamp" >"$model.builder"
  fi
fi

# The collection, as Ansible finds it (a link to this checkout).
mkdir -p "$dir/collections/ansible_collections/gpuhost"
ln -sfn "$repo" "$dir/collections/ansible_collections/gpuhost/inference"
printf '[defaults]\ncollections_path = %s\nstdout_callback = ansible.builtin.default\ncallback_result_format = yaml\nlocalhost_warning = false\n[inventory]\ninventory_unparsed_warning = false\n' \
  "$dir/collections" >"$dir/ansible.cfg"
export ANSIBLE_CONFIG=$dir/ansible.cfg
common=$("$py" - "$dir" "$model" "$port" "$tp" "$load_format" "$smi_path" <<'PY'
import json, sys
d, model, port, tp, load_format, smi = sys.argv[1:7]
print(json.dumps({
    "gpu_proof_dir": d, "ansible_python_interpreter": d + "/venv/bin/python", "ansible_become": False,
    "vllm_service_model": model, "vllm_service_served_model_name": "seed-27b", "vllm_service_host": "127.0.0.1",
    "vllm_service_port": int(port), "vllm_service_tensor_parallel_size": int(tp),
    "vllm_service_settings": {"load_format": load_format} if load_format != "auto" else {},
    "vllm_service_extra_profiles": {"seqs2": {
        "description": "The seed's before: the default profile with max-num-seqs 2 (gpu-proof.sh).",
        "settings": {"max_num_seqs": 2, "max_num_batched_tokens": 8192, "max_model_len": 131072}}},
    "vllm_service_config_dir": d, "vllm_service_state_dir": d + "/state", "vllm_service_profile_dir": d + "/profiles",
    "vllm_service_env_file": d + "/vllm.env", "vllm_service_venv": d + "/venv", "vllm_verify_venv": d + "/venv",
    "vllm_verify_api_key": "", "vllm_verify_controller_report_dir": d + "/reports", "vllm_verify_nvidia_smi_path": smi}))
PY
)
playbook() { "$py" -m ansible.cli.playbook -i localhost, "$repo/playbooks/gpu_proof.yml" -e "$common" "$@"; }

# 3. render
step "render: the profiles and the launcher (playbooks/gpu_proof.yml, vllm_service's filters and templates)"
playbook -e gpu_proof_phase=render >"$dir/logs/render.log" 2>&1 || { cat "$dir/logs/render.log"; exit 1; }
grep -A3 '"msg"\|msg:' "$dir/logs/render.log" | grep -v '^--' | tail -4
ls "$dir/profiles"

health() {
  "$py" - "$port" <<'PY'
import json, sys, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
try:
    urllib.request.urlopen(base + "/health", timeout=5).read()
    models = json.load(urllib.request.urlopen(base + "/v1/models", timeout=5))
    sys.exit(0 if models.get("data") else 1)
except Exception:
    sys.exit(1)
PY
}

capture_under_load() {  # once, while the probe's levels run: /metrics and nvidia-smi
  local name=$1
  sleep "${GPU_PROOF_CAPTURE_AFTER:-40}"
  "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' \
    "$port" >"$dir/captures/$name-metrics-load.txt" 2>/dev/null || true
  "$smi" --query-gpu=timestamp,index,power.draw,power.draw.instant,power.limit,enforced.power.limit,utilization.gpu,memory.used,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv >"$dir/captures/$name-nvidia-smi-load.csv" 2>&1 || true
  "$smi" >"$dir/captures/$name-nvidia-smi-load.txt" 2>&1 || true
}

stop_server() {
  local pid=$1 _
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# 4. serve and measure each profile (a server an interrupted run left is stopped first)
if [ -s "$dir/server.pid" ]; then stop_server "$(cat "$dir/server.pid")"; rm -f "$dir/server.pid"; fi
failed=
n=$(find "$dir/logs" -name '*.log' ! -name '*-measure.log' ! -name render.log | wc -l)
for entry in $profiles; do
  p=${entry%%:*}
  n=$((n + 1))
  log=$dir/logs/$n-$p.log
  step "serve: profile '$p' ($("$py" -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); print(", ".join("%s %s" % kv for kv in sorted(c.items()) if kv[0] in ("max-num-seqs", "max-model-len", "speculative-config", "tensor-parallel-size", "load-format", "gpu-memory-utilization")))' "$dir/profiles/$p.yaml"))"
  t0=$(date +%s%3N)
  VLLM_PROFILE=$p VLLM_PROFILE_DIR=$dir/profiles VLLM_VENV=$venv setsid "$dir/vllm-start" >"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/server.pid"
  up=0
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "the server of '$p' exited:"; tail -40 "$log"; break; fi
    if health; then up=1; break; fi
    if [ $(( $(date +%s%3N) - t0 )) -gt $(( start_timeout * 1000 )) ]; then echo "no /health in $start_timeout s:"; tail -40 "$log"; break; fi
    sleep 2
  done
  ms=$(( $(date +%s%3N) - t0 ))
  healthy=$((ms / 1000)).$(( ms % 1000 / 100 ))
  note "profile $p: serving after (launch to /health, /v1/models)" "$healthy"
  if [ "$up" = 1 ] && [ "$entry" = "$p" ]; then
    capture_under_load "$n-$p" &
    cap=$!
    t1=$(date +%s)
    # shellcheck disable=SC2086
    playbook -e gpu_proof_phase=measure -e gpu_proof_profile="$p" -e vllm_service_profile="$p" -e gpu_proof_log="$log" -e gpu_proof_pid="$pid" \
      -e gpu_proof_healthy_after_s="$healthy" ${GPU_PROOF_VERIFY_ARGS:+-e "$GPU_PROOF_VERIFY_ARGS"} \
      >"$dir/logs/$n-$p-measure.log" 2>&1 || { tail -60 "$dir/logs/$n-$p-measure.log"; }
    note "profile $p: measure (vllm_verify's probes)" $(( $(date +%s) - t1 ))
    kill "$cap" 2>/dev/null || true
    sed -n '/Print the summary/,/PLAY RECAP/p' "$dir/logs/$n-$p-measure.log" | grep -v '^\s*$' | sed 's/^ *- //' | head -40
  fi
  stop_server "$pid"
  rm -f "$dir/server.pid"
  [ "$up" = 1 ] || failed="$failed $p"
done

step "figures"
printf '  %s\n' "${times[@]}"
find "$dir/reports" -maxdepth 1 -name '*.md' 2>/dev/null | sort | tail -n 8
if [ -n "$failed" ]; then echo "did not serve:$failed (their logs: $dir/logs/)"; exit 1; fi
