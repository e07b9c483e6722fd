#!/usr/bin/env bash
# Build (once) the local Debian bookworm image with systemd as PID 1 that every lab box and
# molecule instance runs: no registry is reachable, so the root file system comes from
# mmdebstrap (Debian's faster debootstrap: one apt run, not one dpkg call per package) against the
# Debian mirror this machine's apt already uses, and `podman import` turns it into an image.
# Idempotent: an existing image is reused; FORCE=1 rebuilds.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"

need=()
for bin in podman runc mmdebstrap; do command -v "$bin" >/dev/null 2>&1 || need+=("$bin"); done
if [ ${#need[@]} -gt 0 ]; then
  step "apt-get install ${need[*]} (missing on this host)"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq podman runc mmdebstrap >/dev/null
fi

mkdir -p "$LAB_STATE"/{cfg/networks,home,logs,podtmp}
cat >"$LAB_STATE/cfg/storage.conf" <<EOC
[storage]
driver = "overlay"
graphroot = "$LAB_STATE/storage"
runroot = "$LAB_STATE/run"
EOC
# rlimits must stay within the host's hard limits (nproc 65536 failed here; 32768 works);
# runc, not crun: Debian's crun 1.8.1 refuses the cgroup v1 hybrid layout.
cat >"$LAB_STATE/cfg/containers.conf" <<EOC
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
netns = "none"
# vLLM's engine and its workers talk through shared-memory ring buffers (160 MiB and more):
# podman's default 64 MiB /dev/shm fails the engine's start.
shm_size = "2g"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$LAB_STATE/podtmp"
[network]
network_config_dir = "$LAB_STATE/cfg/networks"
EOC

if [ "${FORCE:-0}" != 1 ] && podman image exists "$LAB_IMAGE"; then
  step "lab image $LAB_IMAGE already built (FORCE=1 rebuilds)"
  exit 0
fi

# The Debian mirror this machine's apt already uses (debian_mirror in lab-env.sh; never a hard-coded host).
MIRROR=$(debian_mirror) || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }

ROOTFS=$LAB_STATE/rootfs
# python3(-venv) for Ansible and the venvs, systemd-sysv for /sbin/init, dbus so systemctl
# reports 'running', procps for testinfra, sudo for become, libnuma1 for the vLLM CPU build.
PKGS=systemd-sysv,python3,python3-venv,dbus,procps,sudo,libnuma1,ca-certificates
if [ ! -x "$ROOTFS/sbin/init" ]; then
  # The same packages as `debootstrap --variant=minbase` (merged /usr set up by mmdebstrap's hook, as debootstrap
  # does, rather than the usrmerge package); 20-30 s where debootstrap took 100.
  step "mmdebstrap bookworm ($PKGS) from the host's apt mirror (about half a minute)"
  rm -rf "$ROOTFS"
  mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --include="$PKGS" \
    bookworm "$ROOTFS" "$MIRROR" >"$LAB_STATE/logs/mmdebstrap.log" 2>&1 \
    || { tail -20 "$LAB_STATE/logs/mmdebstrap.log" >&2; rm -rf "$ROOTFS"; exit 1; }
fi
step "podman import -> $LAB_IMAGE"
# 'podman import' takes STOPSIGNAL (docker import does not); systemd stops on SIGRTMIN+3.
tar -C "$ROOTFS" -c . | podman import -q --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' - "$LAB_IMAGE" >/dev/null
podman run --rm "$LAB_IMAGE" true
step "lab image ready"
