#!/usr/bin/env bash
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Read-only proof of nvidia_gpu_info and the power sampler on a real NVIDIA GPU (issue 10).
# Only reads the card: never -pl, -pm, -r, -ac, -lgc, -c or any other setting.
#
#   benchmarks/gpu_readonly.sh [--idle-s 5] [--load-s 20] [--load torch|sleep] [--out DIR] ...
#
# Environment:
#   PYTHON                   interpreter (default python3; needs PyTorch for --load torch)
#   GPU_READONLY_NVIDIA_SMI  nvidia-smi to read (default: nvidia-smi on PATH), e.g. the mock:
#                            NVIDIA_SMI_MOCK_STATE=/tmp/x.json tests/doubles/nvidia_smi_mock.py --mock-init h200
#                            GPU_READONLY_NVIDIA_SMI=tests/doubles/nvidia_smi_mock.py \
#                              benchmarks/gpu_readonly.sh --load sleep --idle-s 2 --load-s 4
#   GPU_READONLY_WHEELS      folder holding an ansible_core-*.whl, installed into a temporary
#                            folder when ansible-core is not importable (default: <repo>/.whl)
#   OUT                      when set (and no --out), the report goes to $OUT/gpu_readonly.txt
#                            and the figures to $OUT/gpu_readonly.json
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ansible_collections.gpuhost.inference -> this repo
mkdir -p "$tmp/tree/ansible_collections/gpuhost"
ln -s "$repo" "$tmp/tree/ansible_collections/gpuhost/inference"

if ! "$python" -c 'import ansible.module_utils.basic' 2>/dev/null; then
  wheels=${GPU_READONLY_WHEELS:-$repo/.whl}
  shopt -s nullglob
  found=("$wheels"/ansible_core-*.whl)
  shopt -u nullglob
  if [ "${#found[@]}" -eq 0 ]; then
    echo "gpu_readonly.sh: ansible-core is not importable by $python and no ansible_core-*.whl is in $wheels" >&2
    exit 2
  fi
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --target "$tmp/site" "${found[@]}"
  PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$tmp/tree${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

"$python" "$repo/benchmarks/gpu_readonly.py" "$@"
