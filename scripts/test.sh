#!/usr/bin/env bash
# The stages of `make test`, each timed: `scripts/test.sh all` or a list of stage names
# (bootstrap image apt-pool wheelhouse model lint sanity unit build molecule-default molecule-e2e molecule-faults).
set -uo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cd "$REPO_ROOT" || exit 1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(all)
if [ "${stages[0]}" = all ]; then
  stages=(bootstrap image apt-pool wheelhouse model lint sanity unit build molecule-default molecule-e2e molecule-faults)
fi
declare -a report=()
run_stage() {
  local name=$1 t0 rc
  t0=$(date +%s)
  step "stage $name"
  case $name in
    bootstrap) bash scripts/bootstrap.sh ;;
    image) bash scripts/lab-image.sh ;;
    apt-pool) bash scripts/apt-pool.sh ;;
    wheelhouse) bash scripts/wheelhouse.sh double "$WHEELHOUSE_DOUBLE" && bash scripts/wheelhouse.sh cpu "$WHEELHOUSE_CPU" ;;
    model) bash scripts/tiny-model.sh ;;
    lint) yamllint --strict . && ansible-lint --profile production && antsibull-changelog lint ;;
    sanity) bash scripts/ansible-test.sh sanity ;;
    unit) python -m pytest -q tests/unit ;;
    build) bash scripts/check-build.sh ;;
    molecule-*) molecule test -s "${name#molecule-}" ;;
    *) echo "unknown stage $name" >&2; return 2 ;;
  esac
  rc=$?
  report+=("$(printf '%-18s %4ss  %s' "$name" "$(( $(date +%s) - t0 ))" "$([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc")")")
  return $rc
}
rc=0
for s in "${stages[@]}"; do
  if ! run_stage "$s"; then rc=1; break; fi
done
step "stage times"
printf '  %s\n' "${report[@]}"
exit $rc
