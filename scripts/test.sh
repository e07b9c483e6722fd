#!/usr/bin/env bash
# The stages of `make test`, each timed: `scripts/test.sh all` or a list of stage names
# (bootstrap image apt-pool wheelhouse model agents setup-start setup checks-start checks-wait molecule-start lint
# sanity unit build molecule molecule-default molecule-e2e). `all`: the lab's inputs are built in three lanes side by
# side (`setup`: mostly downloads and disk; the image's and the agents' start before bootstrap, `setup-start`); the
# checks (lint, sanity, unit, build) start after bootstrap in a lane of their own at a lower CPU priority; then both
# scenarios start at once: e2e (the real vLLM, the long pole) beside default (the test double, fault cases included);
# each one's log goes to reports/logs/molecule-<scenario>.log and is printed when it ends, then a summary; at the very
# end each failure is named once (the brief list).
set -uo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
# shellcheck source=scripts/brief.sh
. "$(dirname "$0")/brief.sh"
cd "$REPO_ROOT" || exit 1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(all)
if [ "${stages[0]}" = all ]; then
  stages=(setup-start bootstrap checks-start setup molecule-start molecule checks-wait)
fi
declare -a report=()
# `own_group NICENESS CMD...`: CMD in a session of its own at NICENESS (set on the session, /proc/self/autogroup, and
# on CMD), waited for: the kernel shares the CPU between sessions first (docs/development.md says why that matters).
# Its PID (the session's) goes to reports/logs/sessions.pids: an interrupted run ends each one (stop_sessions).
own_group() {
  local prio=$1 pid
  shift
  # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
  setsid nice -n "$prio" bash -c 'echo "$0" >/proc/self/autogroup 2>/dev/null; exec "$@"' "$prio" "$@" &
  pid=$!
  echo "$pid" >>"$REPO_ROOT/reports/logs/sessions.pids"
  wait "$pid"
}
# shellcheck disable=SC2329 # the trap below calls it
stop_sessions() {
  local pid
  [ -f "$REPO_ROOT/reports/logs/sessions.pids" ] || return 0
  while read -r pid; do
    kill -TERM -- "-$pid" 2>/dev/null
  done <"$REPO_ROOT/reports/logs/sessions.pids"
}
# One scenario, its output in a log file; prints the log and a one-line result when it ends.
# Each scenario's session at its niceness: e2e (the real vLLM, the long pole: 21 minutes alone, a serial path) at 0,
# default (the test double, which ended 100 s earlier at an equal share, ~120 s before e2e at 5, and has less to do
# since its matrix shares hosts) at 10.
declare -A scenario_nice=([e2e]=0 [default]=10)
scenario() {
  local s=$1 log=reports/logs/molecule-$1.log t0 rc
  t0=$(date +%s)
  own_group "${scenario_nice[$s]:-0}" molecule test -s "$s" >"$log" 2>&1
  rc=$?
  step "molecule $s: $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc") in $(( $(date +%s) - t0 )) s (log $log)"
  cat "$log"
  step "molecule $s: $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc") in $(( $(date +%s) - t0 )) s"
  echo "$s $rc $(( $(date +%s) - t0 ))" >>reports/logs/molecule-results.txt
  return $rc
}
# After all scenarios: each one's result and its playbook runs' times (profile_tasks); what failed is named
# once, in the brief list at the very end.
scenario_summary() {
  local s rc secs log
  step "molecule summary"
  while read -r s rc secs; do
    log=reports/logs/molecule-$s.log
    printf '  %-8s %s in %s s; per action (profile_tasks, pytest): %s\n' "$s" \
      "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED rc=$rc")" "$secs" "$(awk '
        { gsub(/\033\[[0-9;]*m/, "") }
        /^INFO .*: Executing/ { a = $0; sub(/: Executing.*/, "", a); sub(/.* /, "", a) }
        /TASKS RECAP/ { recap = 1; next }
        recap && /\+0000 \(/ { recap = 0; split($NF, t, ":"); printf "%s %d s, ", a, t[1] * 3600 + t[2] * 60 + t[3] }
        /=+ .*(passed|failed).* in [0-9.]+s/ { match($0, /in [0-9.]+s/); printf "%s pytest %s, ", a, substr($0, RSTART + 3, RLENGTH - 3) }
      ' "$log")"
  done <reports/logs/molecule-results.txt
}
# Both scenarios start as soon as their inputs exist, e2e (the real vLLM, the long pole) first, and run beside
# lint, sanity, the unit tests and the build check (which need neither); their results are waited for at the end.
declare -A bg_pid=()
molecule_start() {
  local s
  : >reports/logs/molecule-results.txt
  for s in e2e default; do
    step "molecule $s in the background (log reports/logs/molecule-$s.log); the other stages beside it"
    scenario "$s" >/dev/null &
    bg_pid[$s]=$!
  done
}
molecule_wait() {
  local rc=0 s r
  [ ${#bg_pid[@]} -gt 0 ] || return 0
  for s in default e2e; do
    [ -n "${bg_pid[$s]:-}" ] || continue
    step "waiting for molecule $s"
    r=0
    wait "${bg_pid[$s]}" || r=1
    unset "bg_pid[$s]"
    step "molecule $s: $([ $r -eq 0 ] && echo ok || echo FAILED) (its log: reports/logs/molecule-$s.log)"
    cat "reports/logs/molecule-$s.log"
    [ $r -eq 0 ] || rc=1
  done
  scenario_summary
  return $rc
}
# Lanes: stages run in order by a test.sh of their own in the background (its output in reports/logs/lane-<name>.log,
# printed when the lane is waited for, its stages' times added to this run's table).
declare -A lane_pid=() lane_stages=()
lane_start() {  # lane_start NAME NICENESS STAGE...
  local name=$1 prio=$2
  shift 2
  lane_stages[$name]="$*"
  step "lane $name in the background: $* (log reports/logs/lane-$name.log)"
  GPUHOST_TEST_LANE=$name own_group "$prio" bash "$REPO_ROOT/scripts/test.sh" "$@" >"reports/logs/lane-$name.log" 2>&1 &
  lane_pid[$name]=$!
}
lane_wait() {  # lane_wait NAME -> the lane's status
  local name=$1 log=reports/logs/lane-$1.log rc=0 line
  [ -n "${lane_pid[$name]:-}" ] || return 0
  wait "${lane_pid[$name]}" || rc=$?
  unset "lane_pid[$name]"
  step "lane $name (${lane_stages[$name]}): $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc"); its output"
  cat "$log"
  while IFS= read -r line; do
    report+=("  $line")
  done < <(sed -n 's/^==> \[[0-9:]*\] stage \([a-z-]* *[0-9]*s  .*\)$/\1/p' "$log")
  [ $rc -eq 0 ] || failed_stage_logs+=("lane-$name:$log")
  return $rc
}
# The set-up in three lanes side by side: the lab image and its apt pool; the wheelhouses, then the tiny model (built
# with the CPU wheelhouse's torch); the coding agents' CLIs. The image's and the agents' lanes need no tooling venv and
# start before bootstrap (`setup-start`; apt runs one at a time, apt_get in lab-env.sh); the wheelhouses' lane runs
# playbooks/wheelhouse.yml and starts after it. From scratch on the 2-core lab (a fresh GPUHOST_CACHE) one after the
# other they took 281 s with debootstrap and pip (image 106, apt-pool 10, wheelhouse 70, model 80, agents 15); the
# scenarios started 175 s after the run's start with the lanes after bootstrap.
setup_start() {
  [ -n "${lane_pid[image]:-}" ] || lane_start image 0 image apt-pool
  [ -n "${lane_pid[agents]:-}" ] || lane_start agents 0 agents
}
setup_parallel() {
  local rc=0
  setup_start
  lane_start wheels 0 wheelhouse model
  lane_wait image || rc=1
  lane_wait wheels || rc=1
  lane_wait agents || rc=1
  return $rc
}
molecule_parallel() {
  [ ${#bg_pid[@]} -gt 0 ] || molecule_start
  molecule_wait
}
# A stage's commands; the ones that end in a subshell (all but molecule-start, molecule, molecule-wait, which keep
# state in this shell) have their output copied to reports/logs/stage-<name>.log as well.
stage_commands() {
  local name=$1
  case $name in
    bootstrap) bash scripts/bootstrap.sh ;;
    image) bash scripts/lab-image.sh ;;
    apt-pool) bash scripts/apt-pool.sh ;;
    wheelhouse) bash scripts/wheelhouse.sh double "$WHEELHOUSE_DOUBLE" && bash scripts/wheelhouse.sh cpu "$WHEELHOUSE_CPU" &&
      bash scripts/wheelhouse.sh router "$WHEELHOUSE_ROUTER" ;;
    model) bash scripts/tiny-model.sh ;;
    # The coding agents' CLIs: only e2e runs them (molecule/e2e/side_effect_agents.yml).
    agents) bash scripts/agents.sh ;;
    lint) yamllint --strict . && ansible-lint --profile production && antsibull-changelog lint ;;
    sanity) bash scripts/ansible-test.sh sanity ;;
    unit) bash scripts/ansible-test.sh units ;;
    setup) setup_parallel ;;
    setup-start) setup_start ;;
    # lint, sanity, the unit tests and the build check need neither the lab nor its inputs: one lane beside the set-up
    # and the scenarios, at a lower CPU priority (the scenarios are the long pole), waited for at the end.
    checks-start) lane_start checks 15 lint sanity unit build ;;
    checks-wait) lane_wait checks ;;
    molecule-start) molecule_start ;;
    molecule) molecule_parallel ;;
    molecule-wait) molecule_wait ;;
    build) bash scripts/check-build.sh ;;
    molecule-*) molecule test -s "${name#molecule-}" ;;
    *) echo "unknown stage $name" >&2; return 2 ;;
  esac
}
failed_stage_logs=()
run_stage() {
  local name=$1 t0 rc log=reports/logs/stage-$1.log
  t0=$(date +%s)
  step "stage $name"
  case $name in
    setup|setup-start|checks-start|checks-wait|molecule-start|molecule|molecule-wait) stage_commands "$name" ;;
    *) stage_commands "$name" 2>&1 | tee "$log" ;;
  esac
  rc=$?
  [ $rc -eq 0 ] || [ ! -f "$log" ] || failed_stage_logs+=("$name:$log")
  # Each stage's time where it ends too (the table at the end repeats them): the log shows where the minutes go.
  report+=("$(printf '%-18s %4ss  %s' "$name" "$(( $(date +%s) - t0 ))" "$([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc")")")
  step "stage ${report[-1]}"
  return $rc
}
rc=0
# Every stage's log, the lanes' and the scenarios' go to reports/logs.
mkdir -p reports/logs
# The sessions (own_group) of an earlier run are gone with it; a run interrupted here (Ctrl-C, CI's timeout) ends its
# own, which its terminal's signal does not reach.
if [ -z "${GPUHOST_TEST_LANE:-}" ]; then
  : >reports/logs/sessions.pids
  trap 'stop_sessions; exit 130' INT TERM
fi
# A failed set-up stage stops the run; a failed check (lint, sanity, unit, build) does not: the
# molecule scenarios still run, so one CI run reports every failure.
for s in "${stages[@]}"; do
  if ! run_stage "$s"; then
    rc=1
    case $s in lint|sanity|unit|build) ;; *) break ;; esac
  fi
done
# A stage that failed before `molecule` leaves the scenarios and the checks running: wait for them (their results are
# reported too).
if [ ${#bg_pid[@]} -gt 0 ]; then
  run_stage molecule-wait || rc=1
fi
if [ -n "${lane_pid[checks]:-}" ]; then
  run_stage checks-wait || rc=1
fi
# A set-up lane still running when bootstrap failed: waited for too (its output and result reported).
for lane in "${!lane_pid[@]}"; do
  lane_wait "$lane" || rc=1
done
step "stage times"
printf '  %s\n' "${report[@]}"
# Last, one line per failure (CI shows only the end of the output): a failed task with the task's name, a
# failed test's id, a lint error; each once (the stage's own output above has the details), at most $2 a log. In a
# molecule log only the actions that failed count: a failure inside an action molecule reports `Executed: Successful`
# was meant (the faults scenario's cases, a rescued block) and is dropped with that action's lines.
if [ $rc -ne 0 ]; then
  step "failures in brief"
  for entry in "${failed_stage_logs[@]}"; do
    echo "  stage ${entry%%:*} (log ${entry#*:}):"
    brief "${entry#*:}" 20
  done
  if [ -f reports/logs/molecule-results.txt ]; then
    while read -r s mrc _secs; do
      [ "$mrc" -eq 0 ] && continue
      echo "  molecule $s (log reports/logs/molecule-$s.log):"
      brief "reports/logs/molecule-$s.log" 20
    done <reports/logs/molecule-results.txt
  fi
fi
exit $rc
