#!/usr/bin/env bash
# Tooling for `make test` and `make demo`, idempotent: the venv with the pinned dev requirements,
# the containers.podman and ansible.posix collections taken from the 'ansible' package on PyPI (Galaxy is not
# reachable), and the link that lets Ansible find this checkout as gpuhost.inference.
#   bash scripts/bootstrap.sh        everything `make test` runs
#   bash scripts/bootstrap.sh demo   only what `make demo` runs: ansible-core and its pinned neighbours (the lines of
#                                    requirements-dev.txt marked `# demo`), the collections; no test tooling
#                                    (molecule, linters, pytest: a later full bootstrap adds them); promtool and amtool
#                                    (play 1 checks the monitoring host's files with them)
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
mode=${1:-all}
req=$REPO_ROOT/requirements-dev.txt
stamp=$VENV/.requirements.sha256
sum=$(sha256sum "$req" | cut -d' ' -f1)
demo_sum=$(grep -E '# demo$' "$req" | sha256sum | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
if [ -x "$VENV/bin/python" ] && { [ "$have" = "$sum" ] || { [ "$mode" = demo ] && [ "$have" = "demo $demo_sum" ]; }; }; then
  step "tooling venv up to date"
elif [ "$mode" = demo ]; then
  step "tooling venv $VENV for the demo (ansible-core and the lines of requirements-dev.txt marked # demo)"
  python3 -m venv "$VENV"
  grep -E '# demo$' "$req" | sed 's/ *#.*//' | xargs "$VENV/bin/python" -m pip install -q --progress-bar off
  echo "demo $demo_sum" >"$stamp"
else
  step "tooling venv $VENV (pip install -r requirements-dev.txt; a minute or two the first time)"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q --progress-bar off -r "$req"
  echo "$sum" >"$stamp"
fi
coll=$CACHE_DIR/collections/ansible_collections
mkdir -p "$coll/gpuhost"
ln -sfn "$REPO_ROOT" "$coll/gpuhost/inference"
if [ ! -f "$coll/containers/podman/MANIFEST.json" ] || [ ! -f "$coll/ansible/posix/MANIFEST.json" ]; then
  step "containers.podman and ansible.posix (profile_tasks: per-task times in the molecule logs) from the 'ansible' package on PyPI (no Galaxy here)"
  tmp=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" 'ansible==12.*'
  "$VENV/bin/python" - "$tmp" "$coll" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/ansible-*.whl")[0]
prefixes = ("ansible_collections/containers/podman/", "ansible_collections/ansible/posix/")
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(prefixes):
            z.extract(n, sys.argv[2].rsplit("ansible_collections", 1)[0])
PY
  rm -rf "$tmp"
fi
# promtool and amtool from Debian's prometheus and prometheus-alertmanager packages, unpacked into the cache, never
# installed (no service starts on this machine): play 1 of site.yml checks the files fleet_prometheus would write with
# both (the demo's box is a monitoring host too; lab-env.sh puts them on the PATH), tests/unit/prometheus runs
# `promtool check/test rules`.
prom=$CACHE_DIR/prometheus
if [ ! -x "$prom/usr/bin/promtool" ] || [ ! -x "$prom/usr/bin/amtool" ]; then
  step "promtool and amtool from Debian's prometheus and prometheus-alertmanager packages (apt-get download + dpkg -x into $prom)"
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt_get download -qq prometheus prometheus-alertmanager 2>/dev/null \
    || { apt_get update -qq && apt_get download -qq prometheus prometheus-alertmanager; }; })
  rm -rf "$prom" && mkdir -p "$prom"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$prom"; done
  rm -rf "$tmp"
fi
if [ "$mode" = demo ]; then
  step "bootstrap (demo) done"
  exit 0
fi
# molecule/resources/create.yml imports molecule-plugins' podman create playbook by this fixed path.
ln -sfn "$("$VENV/bin/python" -c 'import os, molecule_plugins.podman as m; print(os.path.dirname(m.__file__))')/playbooks" \
  "$CACHE_DIR/molecule-podman-playbooks"
# The coding agents' CLIs (npm) are not here: only the e2e scenario runs them (scripts/agents.sh, its own stage).
step "bootstrap done"
