#!/usr/bin/env bash
# `make demo`: the main job, on an embedded default. Builds what it needs (tooling, lab image,
# the offline apt repository, CPU wheelhouse, tiny model; all cached), brings up the local container lab box
# `gpuhost-demo` (systemd, mocked 2x RTX 3090 nvidia-smi), runs site.yml against it with the
# real vLLM 0.28.0 CPU build, and leaves the server running.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cd "$REPO_ROOT"
box=gpuhost-demo
t0=$(date +%s)
# Where the seconds go: each step's time, printed at the end ("name seconds" lines).
times_file=$(mktemp)
shown=
trap '[ -n "$shown" ] || { echo "where the seconds went (until it stopped):"; cat "$times_file"; }; rm -f "$times_file" "${side_log:-}"' EXIT
timed() {
  local name=$1 t rc=0
  shift
  t=$(date +%s)
  "$@" || rc=$?
  printf '%-34s %4s s%s\n' "$name" "$(( $(date +%s) - t ))" "$([ $rc -eq 0 ] || echo " (FAILED rc=$rc)")" >>"$times_file"
  return "$rc"
}
timed "bootstrap (demo)" bash scripts/bootstrap.sh demo
# The lab image and its apt pool (apt, mmdebstrap) beside the CPU wheelhouse and the tiny model (pip): independent,
# mostly waiting on downloads and disks, so side by side the slower of the two sets the pace. The image's output is
# printed after the other's.
side_log=$(mktemp)
( timed "lab image (beside the next two)" bash scripts/lab-image.sh && timed "apt pool (beside)" bash scripts/apt-pool.sh ) \
  >"$side_log" 2>&1 &
side=$!
timed "wheelhouse cpu" bash scripts/wheelhouse.sh cpu "$WHEELHOUSE_CPU"
timed "tiny model" bash scripts/tiny-model.sh
side_rc=0
wait "$side" || side_rc=$?
cat "$side_log"
[ "$side_rc" -eq 0 ] || { echo "the lab image or its apt pool failed (rc $side_rc): its output above" >&2; exit "$side_rc"; }
step "lab box $box"
timed "lab box" bash scripts/lab-box.sh up "$box" rtx3090x2
step "ansible-playbook -i inventories/demo site.yml (installs vLLM 0.28.0 CPU build: a few minutes the first time)"
# profile_tasks: each task's time, and the slowest at the end of the run.
ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=15 \
  timed "site.yml (slowest tasks above)" ansible-playbook -i inventories/demo site.yml "$@"
# shellcheck disable=SC2012  # newest by mtime; the report names are ours (no odd characters)
latest=$(ls -t reports/"$box"/*.md 2>/dev/null | head -1 || true)
step "done in $(( $(date +%s) - t0 )) s; where the seconds went:"
cat "$times_file"
shown=1
if [ -n "$latest" ]; then
  echo "Verification report: $latest (JSON beside it)"
  echo
  cat "$latest"
fi
cat <<EOT

vLLM 0.28.0 is serving in the lab box $box on 127.0.0.1:8000 (the box has no network of its
own; reach the API from inside it; a server given vllm_service_api_key: export VLLM_API_KEY first):
  scripts/lab-api.sh $box /v1/models
  scripts/lab-api.sh $box /v1/completions '{"model": "tiny-qwen3", "prompt": "def add(a, b):", "max_tokens": 32}'
  scripts/lab-bench.sh $box 4 16     (vLLM's own client, vllm bench serve, server-default sampling)
  podman exec $box journalctl -u vllm -n 30        (with: . scripts/lab-env.sh)
Switch profile: set vllm_service_profile (lab | lab_seqs2 | ...) in inventories/demo/group_vars/gpu_servers.yml
and run 'make demo' again, or on the box:
  podman exec $box sh -c "sed -i 's/^VLLM_PROFILE=.*/VLLM_PROFILE=lab_seqs2/' /etc/default/vllm && systemctl restart vllm"
Monitoring (docs/monitoring.md): node exporter with the GPU and verification textfiles and Prometheus run in the
box (127.0.0.1:9100, 127.0.0.1:9090); ask Prometheus with its own promtool:
  podman exec $box promtool query instant http://127.0.0.1:9090 'up'
  podman exec $box promtool query instant http://127.0.0.1:9090 'ALERTS'
  podman exec $box promtool query instant http://127.0.0.1:9090 'gpuhost_verify_aggregate_tokens_per_second'
  podman exec $box cat /var/lib/prometheus/node-exporter/gpuhost_gpu.prom
Grafana dashboards to import: roles/fleet_prometheus/files/dashboards/*.json
Coding agents (docs/agents.md): configs sized to the served profile, written by the verification, in
  reports/$box/agents/ (Claude Code settings.json and env, Codex config.toml, opencode.json, openai.env); the
  pinned CLIs of Claude Code and Codex: bash scripts/agents.sh (npm, about 760 MB, not needed by the demo). An
  agent's first request is 12k-35k tokens: serve the 32k profile first (bash scripts/demo.sh -e
  vllm_service_profile=lab_agents). The box has no network of its own: run the agent here in its network
  namespace (the files name 127.0.0.1:8000), e.g. (a server with a key: export VLLM_API_KEY first)
  (. reports/$box/agents/claude-code.env; \
   nsenter -t "\$(podman inspect -f '{{.State.Pid}}' $box)" -n $GPUHOST_CACHE/agents/node_modules/.bin/claude -p 'hello' --settings reports/$box/agents/claude-code.settings.json)
Stop it: make demo-down
EOT
