#!/usr/bin/env bash
# Sourced by the Makefile's recipes and by scripts/*: one place for the lab's paths and the
# podman settings this kind of host needs (cgroup v1 hybrid, no CAP_SYS_RESOURCE: runc, cgroupfs,
# ulimits within the host's hard limits). Everything lives under LAB_STATE (default .cache/lab).
# shellcheck disable=SC2034
# The checkout is always the one this file is in: a shell that sourced another clone's lab-env.sh exported that
# clone's REPO_ROOT and the paths inside it (CACHE_DIR, VENV, WHEELHOUSE_DOUBLE), which would run that clone's code
# here; they are dropped (the shared GPUHOST_CACHE paths and explicit overrides within this checkout stay).
__lab_here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${REPO_ROOT:-}" ] && [ "$REPO_ROOT" != "$__lab_here" ]; then
  unset CACHE_DIR VENV WHEELHOUSE_DOUBLE
fi
REPO_ROOT=$__lab_here
CACHE_DIR=${CACHE_DIR:-$REPO_ROOT/.cache}
# The heavy artefacts (the lab image's podman storage, the wheelhouses, the tiny model, ansible-test's venvs) are kept
# outside the checkout so that every clone on this machine (CI's fresh clones too) reuses them;
# each is rebuilt when absent. GPUHOST_CACHE moves them.
GPUHOST_CACHE=${GPUHOST_CACHE:-/var/tmp/gpuhost-cache}
LAB_STATE=${LAB_STATE:-$GPUHOST_CACHE/lab}
LAB_IMAGE=${LAB_IMAGE:-localhost/gpuhost-lab:bookworm}
VENV=${VENV:-$CACHE_DIR/venv}
WHEELHOUSE_CPU=${WHEELHOUSE_CPU:-$GPUHOST_CACHE/wheelhouse/cpu}
WHEELHOUSE_DOUBLE=${WHEELHOUSE_DOUBLE:-$CACHE_DIR/wheelhouse/double}
WHEELHOUSE_ROUTER=${WHEELHOUSE_ROUTER:-$GPUHOST_CACHE/wheelhouse/router}
TINY_MODEL=${TINY_MODEL:-$GPUHOST_CACHE/models/tiny-qwen3}
# The lab's offline Debian repository (scripts/apt-pool.sh), mounted at /srv/apt/lab in the boxes.
APT_POOL=${APT_POOL:-$GPUHOST_CACHE/apt/lab}
export CONTAINERS_CONF=$LAB_STATE/cfg/containers.conf
export CONTAINERS_STORAGE_CONF=$LAB_STATE/cfg/storage.conf
export ANSIBLE_CONFIG=$REPO_ROOT/ansible.cfg
export ANSIBLE_INJECT_FACT_VARS=false
# Bytecode for what the controller imports from source files: Ansible loads the collection's filter and lookup
# plugins in every forked worker, once per task, and without bytecode compiles them there each time (a tenth of
# the bad-input matrix's CPU). An environment that turns bytecode off (PYTHONDONTWRITEBYTECODE) gets it back here,
# written under CACHE_DIR, not beside the sources.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=$CACHE_DIR/pycache
# promtool and amtool (scripts/bootstrap.sh): play 1 checks the files fleet_prometheus would write with them.
export PATH=$VENV/bin:$CACHE_DIR/prometheus/usr/bin:$PATH
export REPO_ROOT CACHE_DIR GPUHOST_CACHE LAB_STATE LAB_IMAGE VENV WHEELHOUSE_CPU WHEELHOUSE_DOUBLE WHEELHOUSE_ROUTER TINY_MODEL APT_POOL
# apt-get one at a time: the set-up lanes of `make test` and `make demo` (the image, the agents' Node, bootstrap's
# promtool) may each need apt at once, and a second apt-get fails on the first one's lock instead of waiting.
apt_get() { flock "${TMPDIR:-/tmp}/gpuhost-apt.lock" apt-get "$@"; }
# The Debian mirror this machine's apt already uses (never a hard-coded host): the first URIs of a deb822 .sources
# file, else the first `deb` line of sources.list; fails when there is none (lab-image.sh, apt-pool.sh).
debian_mirror() {
  local m
  m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$m" ] && printf '%s\n' "$m"
}
step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# A step of a proof script, timed: `timed LABEL CMD...` prints the step and adds "LABEL SECONDS" to the array `times`,
# which the script prints at its end (cuda-proof.sh, upgrade-proof.sh; demo.sh keeps a file of its own, for the
# steps it runs in the background).
declare -a times=()
timed() {
  local label=$1 t0 rc=0
  shift
  t0=$(date +%s)
  step "$label"
  # The command's status is returned (the step's time is kept either way): called as `timed ... || rc=$?`, set -e does
  # not stop at a failing command inside, and the status was the array assignment's (always 0).
  "$@" || rc=$?
  times+=("$(printf '%-58s %5ss' "$label" "$(( $(date +%s) - t0 ))")")
  return "$rc"
}
# A script run inside a lab box (the benchmarks that measure on the box): `run_in_box BOX DIR SCRIPT [FILE...] --
# ARGS...` copies SCRIPT and every FILE (paths in the checkout) into DIR in the box, runs `python3 DIR/SCRIPT ARGS...`
# there, removes DIR and returns the script's status.
run_in_box() {
  local box=$1 dir=$2 script=$3 status=0
  shift 2
  podman exec "$box" mkdir -p "$dir"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    podman cp "$REPO_ROOT/$1" "$box:$dir/$(basename "$1")"
    shift
  done
  [ $# -eq 0 ] || shift
  podman exec "$box" python3 "$dir/$(basename "$script")" "$@" || status=$?
  podman exec "$box" rm -rf "$dir"
  return "$status"
}
