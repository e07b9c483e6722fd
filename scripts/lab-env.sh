#!/usr/bin/env bash
# Sourced by the Makefile's recipes and by scripts/*: one place for the lab's paths and the
# podman settings this kind of host needs (cgroup v1 hybrid, no CAP_SYS_RESOURCE: runc, cgroupfs,
# ulimits within the host's hard limits). Everything lives under LAB_STATE (default .cache/lab).
# shellcheck disable=SC2034
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CACHE_DIR=${CACHE_DIR:-$REPO_ROOT/.cache}
LAB_STATE=${LAB_STATE:-$CACHE_DIR/lab}
LAB_IMAGE=${LAB_IMAGE:-localhost/gpuhost-lab:bookworm}
VENV=${VENV:-$CACHE_DIR/venv}
WHEELHOUSE_CPU=${WHEELHOUSE_CPU:-$CACHE_DIR/wheelhouse/cpu}
WHEELHOUSE_DOUBLE=${WHEELHOUSE_DOUBLE:-$CACHE_DIR/wheelhouse/double}
TINY_MODEL=${TINY_MODEL:-$CACHE_DIR/models/tiny-qwen3}
export CONTAINERS_CONF=$LAB_STATE/cfg/containers.conf
export CONTAINERS_STORAGE_CONF=$LAB_STATE/cfg/storage.conf
export ANSIBLE_CONFIG=$REPO_ROOT/ansible.cfg
export ANSIBLE_INJECT_FACT_VARS=false
export PATH=$VENV/bin:$PATH
export REPO_ROOT CACHE_DIR LAB_STATE LAB_IMAGE VENV WHEELHOUSE_CPU WHEELHOUSE_DOUBLE TINY_MODEL
step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
