#!/usr/bin/env bash
# ansible-galaxy collection build, then prove the tarball ships the collection, its sanity ignore
# files (tests/sanity/) and nothing else of the test lab (tests/, molecule/, benchmarks/, .cache/)
# nor the checkout's ansible.cfg.
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
out=$CACHE_DIR/dist
rm -rf "$out"; mkdir -p "$out"
ansible-galaxy collection build --force --output-path "$out" "$REPO_ROOT"
tarball=$(ls "$out"/gpuhost-inference-*.tar.gz)
listing=$(tar -tzf "$tarball")
for must in MANIFEST.json FILES.json README.md meta/runtime.yml roles/nvidia_power/tasks/main.yml \
            roles/vllm_install/tasks/main.yml roles/vllm_service/tasks/main.yml roles/vllm_verify/tasks/main.yml \
            plugins/modules/nvidia_gpu_info.py plugins/modules/vllm_probe.py plugins/modules/vllm_verify_wait.py \
            plugins/module_utils/systemd_env.py playbooks/site.yml \
            tests/sanity/ignore-2.19.txt; do
  grep -qx "$must" <<<"$listing" || { echo "missing from $tarball: $must" >&2; exit 1; }
done
if grep -E '^(tests/|molecule/|benchmarks/|\.cache/|scripts/|reports/|ansible\.cfg$)' <<<"$listing" |
   grep -vE '^tests/(sanity/(ignore-[0-9.]+\.txt)?)?$'; then
  echo "test or lab files leaked into $tarball (above)" >&2; exit 1
fi
echo "$tarball: $(wc -l <<<"$listing") entries, of the tests only tests/sanity/ignore-*.txt"
# Installed as a user installs it (ansible-galaxy collection install -p), run from the user's own
# project directory: the verification reports' default directory is reports/ there, not a path inside
# the installed collection (sweep and tune stamp theirs under the same reports/).
user=$(mktemp -d)
trap 'rm -rf "$user"' EXIT
mkdir -p "$user/project"
(cd "$user/project" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$user/collections" \
   ansible-galaxy collection install --force -p "$user/collections" "$tarball" >/dev/null)
got=$(cd "$user/project" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$user/collections" \
      ansible localhost -i localhost, -c local -m ansible.builtin.debug \
      -a "msg={{ lookup('gpuhost.inference.role_default', 'vllm_verify_controller_report_dir') }}" | sed -n 's/.*"msg": "\(.*\)".*/\1/p')
if [ "$got" != "$user/project/reports" ]; then
  echo "installed collection: vllm_verify_controller_report_dir defaults to '$got', not reports/ of the directory ansible runs in ($user/project/reports)" >&2
  exit 1
fi
echo "installed collection: reports default to $got (the user's directory)"
