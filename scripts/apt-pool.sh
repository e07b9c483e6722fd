#!/usr/bin/env bash
# Build (once) the lab's offline Debian repository at $APT_POOL (default
# $GPUHOST_CACHE/apt/lab): a flat repository (`deb [trusted=yes] file:/srv/apt/lab ./`) holding
# the .debs that the lab image lacks for the OS packages roles/vllm_install installs on a Debian
# box (its vllm_install_system_packages default for the cpu variant: python3-venv, g++ and
# python3-dev) plus python3-apt (Ansible's apt module installs it when it is missing).
# The lab boxes have no network: the boxes mount this read-only at /srv/apt/lab and
# molecule/resources/prepare.yml (scripts/lab-box.sh for the demo box) makes it their only apt
# source - the lab's stand-in for a box whose apt works. The lab image itself stays without a
# compiler, so that the role's install path is what puts one there.
#   scripts/apt-pool.sh            Environment: APT_POOL_PACKAGES (the list), FORCE=1 (rebuild).
# The closure is computed against the image's root file system ($LAB_STATE/rootfs, its dpkg
# status) by this machine's apt-get (--download-only, its own state and cache directories; the
# root file system is only read), from the Debian mirror this machine's apt already uses.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"

# Keep in step with roles/vllm_install/defaults/main.yml (tests/unit/plugins/filter/test_vllm_install.py checks)
# and with the monitoring roles' packages (node_metrics, fleet_prometheus with Alertmanager; tests/unit/prometheus checks); nginx for
# roles/front_door (its unit tests unpack nginx from here when it is not installed).
PACKAGES=${APT_POOL_PACKAGES:-python3-venv g++ python3-dev python3-apt prometheus-node-exporter prometheus prometheus-alertmanager nginx}
ROOTFS=$LAB_STATE/rootfs
dest=$APT_POOL
stamp=$dest/.gpuhost-apt-pool

if [ ! -f "$ROOTFS/var/lib/dpkg/status" ]; then
  bash "$REPO_ROOT/scripts/lab-image.sh"
fi
[ -f "$ROOTFS/var/lib/dpkg/status" ] || { echo "no lab root file system at $ROOTFS (run scripts/lab-image.sh)" >&2; exit 1; }

# What the pool was built from: the package list and the image's installed packages.
want=$(printf '%s\n' "packages: $PACKAGES" "rootfs: $(sha256sum <"$ROOTFS/var/lib/dpkg/status" | cut -d' ' -f1)")
if [ "${FORCE:-0}" != 1 ] && [ -f "$dest/Packages" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  step "apt pool $dest already built ($(find "$dest" -maxdepth 1 -name '*.deb' | wc -l) debs; FORCE=1 rebuilds)"
  exit 0
fi

if ! command -v dpkg-scanpackages >/dev/null 2>&1; then
  step "apt-get install dpkg-dev (dpkg-scanpackages, missing on this host)"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends dpkg-dev >/dev/null
fi

# The Debian mirror this machine's apt already uses (debian_mirror in lab-env.sh; never a hard-coded host).
MIRROR=$(debian_mirror) || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }
# The suite and components the image was bootstrapped from (mmdebstrap wrote them there).
read -r SUITE COMPONENTS < <(awk '$1=="deb"{s=$3; c=""; for (i=4; i<=NF; i++) c=c" "$i; print s, c; exit}' \
  "$ROOTFS/etc/apt/sources.list" 2>/dev/null || true)
SUITE=${SUITE:-bookworm}
COMPONENTS=${COMPONENTS:-main}
KEYRING=$ROOTFS/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$KEYRING" ] || KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{state/lists/partial,cache/archives/partial,etc/none}
echo "deb [signed-by=$KEYRING] $MIRROR $SUITE $COMPONENTS" >"$work/etc/sources.list"
arch=$(dpkg --print-architecture --admindir "$ROOTFS/var/lib/dpkg" 2>/dev/null || dpkg --print-architecture)
apt_opts=(
  -o "Dir::State=$work/state" -o "Dir::State::status=$ROOTFS/var/lib/dpkg/status"
  -o "Dir::Cache=$work/cache" -o "Dir::Etc::SourceList=$work/etc/sources.list"
  -o "Dir::Etc::SourceParts=$work/etc/none" -o "Dir::Etc::Preferences=$work/etc/none"
  -o "Dir::Etc::PreferencesParts=$work/etc/none" -o "APT::Architecture=$arch"
  -o "APT::Architectures::=$arch" -o APT::Install-Recommends=false -o APT::Install-Suggests=false
  -o Debug::NoLocking=true -o APT::Sandbox::User=root
)
step "apt pool: the closure of [$PACKAGES] against the lab image ($SUITE $COMPONENTS from $MIRROR)"
# shellcheck disable=SC2086
apt-get "${apt_opts[@]}" -qq update
# shellcheck disable=SC2086
apt-get "${apt_opts[@]}" -y -q install --download-only $PACKAGES | grep -E '^(Need to get|[0-9]+ upgraded)' || true

mkdir -p "$dest"
rm -f "$dest"/*.deb "$dest"/Packages "$dest"/Packages.gz "$stamp"
debs=("$work"/cache/archives/*.deb)
if [ -e "${debs[0]}" ]; then cp "${debs[@]}" "$dest/"; fi
step "apt pool: index $(find "$dest" -maxdepth 1 -name '*.deb' | wc -l) debs -> $dest/Packages"
(cd "$dest" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages && gzip -9nk Packages)
echo "$want" >"$stamp"
find "$dest" -maxdepth 1 -name '*.deb' -printf '%f\n' | sort | sed 's/_.*//' | tr '\n' ' '
echo
