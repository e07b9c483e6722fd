#!/usr/bin/env bash
# `make cuda-proof` (opt-in, not in CI: about 4 GB of wheels and an 8 GB venv): the CUDA path as far as it goes
# without a GPU. Builds the cp311 CUDA wheelhouse (scripts/wheelhouse.sh cuda, cached), brings up the lab box
# `cuda-proof` (mocked 2x RTX 3090 on driver 580.159.04 / CUDA 13.0, the wheelhouse mounted read-only), runs
# site.yml's install and service roles with vllm_install_variant=cuda offline from it (the server is left
# stopped: there is no GPU to start it on), then shows what a user's first start depends on:
#   - the venv imports vLLM and torch, and torch is the CUDA build the wheels pin;
#   - the unit's profile environment carries VLLM_USE_FLASHINFER_SAMPLER=0 (vllm_service_flashinfer_sampler);
#   - gcc and Python.h are there for Triton's launcher, and the service user compiles a C extension;
#   - the opt-in toolkit (vllm_install_cuda_toolkit): the venv's nvcc is CUDA 13.0 like its runtime, libcudart.so is
#     linked, and it compiles a kernel for the RTX 3090's sm_86;
#   - preflight refuses the same box's cards reported on driver 570 and at compute capability 6.1.
# It prints the time of each step and the sizes (wheelhouse, venv, uv cache) at the end, as a benchmark does.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cd "$REPO_ROOT"
box=${CUDA_PROOF_BOX:-cuda-proof}
WHEELHOUSE_CUDA=${WHEELHOUSE_CUDA:-$GPUHOST_CACHE/wheelhouse/cuda}
export WHEELHOUSE_CUDA
inv=$(mktemp -d)/hosts.yml
trap 'rm -rf "$(dirname "$inv")"' EXIT
cat >"$inv" <<EOF
gpu_servers:
  hosts:
    $box:
      ansible_connection: lab_podman
      ansible_python_interpreter: /usr/bin/python3
      lab_gpu_profile: rtx3090x2
      vllm_install_variant: cuda
      vllm_install_wheelhouse: /srv/wheelhouse/cuda
      vllm_install_cuda_toolkit: true
      vllm_service_model: Qwen/Qwen3-0.6B
      vllm_service_state: stopped
      vllm_service_prefetch: false
EOF

timed "bootstrap" bash scripts/bootstrap.sh
timed "lab image and apt pool" bash -c 'bash scripts/lab-image.sh && bash scripts/apt-pool.sh'
# The opt-in toolkit's packages too (vllm_install_cuda_toolkit: nvcc, its headers and NVVM at CUDA 13.0).
# (The wheelhouse's cache check looks at the vllm and uv wheels only: FORCE=1 while the toolkit's are missing.)
force=0
compgen -G "$WHEELHOUSE_CUDA/nvidia_cuda_nvcc-13.0.*.whl" >/dev/null || force=1
timed "CUDA wheelhouse (cp311; cached)" env FORCE=$force \
  EXTRA_PACKAGES="nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.*" \
  bash scripts/wheelhouse.sh cuda "$WHEELHOUSE_CUDA"
timed "lab box $box" bash scripts/lab-box.sh up "$box" rtx3090x2
timed "prepare the box" ansible-playbook -i "$inv" molecule/resources/prepare.yml
timed "site.yml: nvidia_power, vllm_install (cuda), vllm_service" \
  ansible-playbook -i "$inv" playbooks/site.yml --tags preflight,nvidia_power,vllm_install,vllm_service

step "what the first start depends on"
podman exec "$box" sh -c '
  set -e
  /opt/vllm/venv/bin/python -c "import torch, vllm; print(\"vllm\", vllm.__version__, \"torch\", torch.__version__, \"cuda\", torch.version.cuda)"
  grep -h "^VLLM_USE_FLASHINFER_SAMPLER=" /etc/vllm/profiles/*.env | sort -u
  command -v gcc g++
  ls /usr/include/python3*/Python.h
  cd /tmp && printf "#include <Python.h>\nint f(void){return 0;}\n" >proof.c &&
    runuser -u vllm -- gcc -shared -fPIC $(python3-config --includes) -o /tmp/proof.so /tmp/proof.c && echo "vllm compiles a C extension"
  toolkit=$(ls -d /opt/vllm/venv/lib/python3*/site-packages/nvidia/cu13)
  ls -l "$toolkit/lib/libcudart.so"
  "$toolkit/bin/nvcc" --version | tail -2
  printf "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n" >/tmp/proof.cu &&
    runuser -u vllm -- "$toolkit/bin/nvcc" -arch=sm_86 -c -o /tmp/proof.o /tmp/proof.cu && echo "the venv nvcc compiles a kernel for sm_86"
'

step "preflight on driver 570 and on compute capability 6.1 (the mocked nvidia-smi's state, changed and put back)"
podman exec "$box" cp /etc/nvidia-smi-mock/state.json /etc/nvidia-smi-mock/state.json.proof
for change in '{"driver_version": "570.172.08", "nvml_version": "570.172", "cuda_version": "12.8"}' '{"compute_cap": "6.1"}'; do
  podman exec "$box" python3 -c 'import json, sys
state = json.load(open("/etc/nvidia-smi-mock/state.json.proof"))
for key, value in json.loads(sys.argv[1]).items():
    for item in (state["gpus"] if key == "compute_cap" else [state]):
        item[key] = value
json.dump(state, open("/etc/nvidia-smi-mock/state.json", "w"))' "$change"
  if ansible-playbook -i "$inv" playbooks/site.yml --tags preflight >"$(dirname "$inv")/refused.log" 2>&1; then
    echo "preflight did NOT refuse ($change)" >&2
    podman exec "$box" mv /etc/nvidia-smi-mock/state.json.proof /etc/nvidia-smi-mock/state.json
    exit 1
  fi
  echo "refused ($change):"
  grep -o 'vllm_install_variant=cuda: [^"]*' "$(dirname "$inv")/refused.log" | head -1 | cut -c1-300
done
podman exec "$box" mv /etc/nvidia-smi-mock/state.json.proof /etc/nvidia-smi-mock/state.json

step "figures"
printf '  %s\n' "${times[@]}"
echo "  wheelhouse: $(du -sh "$WHEELHOUSE_CUDA" | cut -f1) in $(find "$WHEELHOUSE_CUDA" -name '*.whl' | wc -l) wheels"
podman exec "$box" sh -c 'echo "  venv: $(du -sh "$(readlink -f /opt/vllm/venv)" | cut -f1); /opt/vllm in all: $(du -sh /opt/vllm | cut -f1)"'
echo "Remove the box: bash scripts/lab-box.sh down $box"
