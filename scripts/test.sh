#!/usr/bin/env bash
# The stages of `make test`, each timed: `scripts/test.sh all` or a list of stage names
# (bootstrap image apt-pool wheelhouse model lint sanity unit build molecule molecule-default molecule-e2e
# molecule-faults). `molecule` runs the three scenarios at once on the 2 cores: e2e (the real vLLM,
# mostly one core) beside default then faults (the test double); each one's log goes to
# reports/logs/molecule-<scenario>.log and is printed when it ends.
set -uo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cd "$REPO_ROOT" || exit 1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(all)
if [ "${stages[0]}" = all ]; then
  stages=(bootstrap image apt-pool wheelhouse model lint sanity unit build molecule)
fi
declare -a report=()
# One scenario, its output in a log file; prints the log and a one-line result when it ends.
scenario() {
  local s=$1 log=reports/logs/molecule-$1.log t0 rc
  t0=$(date +%s)
  molecule test -s "$s" >"$log" 2>&1
  rc=$?
  step "molecule $s: $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc") in $(( $(date +%s) - t0 )) s (log $log)"
  cat "$log"
  step "molecule $s: $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc") in $(( $(date +%s) - t0 )) s"
  return $rc
}
molecule_parallel() {
  local e2e_pid rc=0
  mkdir -p reports/logs
  step "molecule e2e in the background; default, then faults beside it (logs in reports/logs/)"
  scenario e2e &
  e2e_pid=$!
  scenario default || rc=1
  scenario faults || rc=1
  wait "$e2e_pid" || rc=1
  return $rc
}
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
    unit) bash scripts/ansible-test.sh units ;;
    molecule) molecule_parallel ;;
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
