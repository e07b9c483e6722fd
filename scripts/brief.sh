#!/usr/bin/env bash
# `brief LOG MAX`: what failed in a stage's or a scenario's log, a line each, at most MAX (the last ones): failed Ansible
# tasks with their msg, pytest's FAILED node ids (joined back where molecule folded them), the first assertion line
# of each failure, pytest's count, molecule's CRITICAL lines, ansible-test / yamllint / ansible-lint findings; the
# log's last lines when nothing is recognized. Sourced by scripts/test.sh (its closing "failures in brief" list);
# `bash scripts/brief.sh LOG [MAX]` prints one log's (tests/unit/scripts/test_brief.py).
brief() {
  local found
  found=$(brief_lines "$@")
  if [ -n "$found" ]; then
    echo "$found"
  else
    # nothing recognized: the end of the log as it is
    echo "    (no failed task or test recognized; the last lines of $1:)"
    sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -v '^[ │]*$' | tail -n 15 | sed 's/^/    /' | cut -c1-300
  fi
}
brief_lines() {
  awk '
    function flush() { printf "%s", buf; buf = "" }
    function out(text) { buf = buf text "\n" }
    function done_acc() {
      if (acc ~ /^_/) { head = acc; gsub(/(^_+ *| *_+$)/, "", head) } else if (acc ~ /::/) out("    " acc)
      acc = ""
    }
    { gsub(/\033\]8;;[^\033]*\033\\/, ""); gsub(/\033\[[0-9;]*m/, "") }
    # molecule actions: "INFO     <scenario> ➜ <action>: Executing", "... Executed: Successful"; what an action
    # runs is framed, each line behind "  │ " (long lines folded onto "  │   ").
    /^INFO +.*: Executing *$/ { flush(); next }
    /^INFO +.*: Executed: Successful/ { buf = ""; next }
    # pytest "FAILED <node id>" lines and "____ test_name ____" failure headings folded by molecule onto continuation
    # lines ("  │   "): joined back (a fold right after the word FAILED or an underscore was a space, others not).
    acc != "" && /^ *│   [^ ]/ { c = $0; sub(/^ *│   /, "", c); acc = acc (acc ~ /^(FAILED|ERROR|_+)$/ ? " " : "") c; next }
    acc != "" { done_acc() }
    { sub(/^ *│ ?/, "") }
    /^(FAILED|ERROR)( [^ -]|$)/ && !/::.* - / && !/^[^ ]+ [^ ]+::[^ ]*\]$/ { acc = $0; next }
    /^_+( [^ _]|$)/ { acc = $0; next }
    /^CRITICAL / { out("    " $0); next }
    # the first "E   ..." line (the assertion) under the heading of each failure
    head != "" && /^E  +[^ ]/ { e = $0; sub(/^E +/, "", e); out("    " head ": " e); head = ""; next }
    /^=+ .*[0-9]+ (failed|errors?)[ ,].* in [0-9.]+s/ { s = $0; gsub(/=+ ?/, "", s); out("    pytest: " s); next }
    /^TASK \[/ { task = $0; sub(/ \*+$/, "", task) }
    # a failed task: its result as JSON on the line, or as YAML below it (callback_result_format yaml): the msg line
    pending == 2 { why = $0; sub(/^ +/, "", why); out("    " task " msg: " why); pending = 0; next }
    pending && /^ +msg: [|>][-+]?$/ { pending = 2; next }
    pending && /^ +msg: / { why = $0; sub(/^ +/, "", why); out("    " task " " why); pending = 0; next }
    pending && /^[^ ]/ { out("    " task); pending = 0 }
    /^(fatal|failed): \[.*FAILED!/ {
      line = $0; sub(/^[^{]*/, "", line); why = line
      if (line == "") { pending = 1; next }
      if (match(line, /"msg": "([^"\\]|\\.)*"/)) why = substr(line, RSTART, RLENGTH)
      if (match(line, /"stderr": "([^"\\]|\\.)+"/)) why = why " " substr(line, RSTART, 160)
      out("    " task " " why); next
    }
    /^FAILED [^ ]+::/ || /^ERROR [^ ]+::/ { out("    " $0); next }
    /^ERROR: / || /^[^ ]+:[0-9]+:[0-9]+: / { out("    " $0); next }
    # yamllint: the file on a line of its own, then "  LINE:COL  error  message  (rule)".
    /^[^ :]+\.ya?ml$/ { yfile = $0; next }
    /^  [0-9]+:[0-9]+ +error / { sub(/^ +/, ""); out("    " yfile ":" $0); next }
    # ansible-lint: "rule[tag]: message", then "path:LINE[:COL] ...".
    /^[a-z][a-z0-9-]*(\[[a-z0-9-]+\])?: / { rule = $0; next }
    rule != "" && /^[^ ]+:[0-9]+(:[0-9]+)?( |$)/ { split($0, where, " "); out("    " where[1] " " rule); rule = ""; next }
    { rule = "" }
    END { done_acc(); flush() }
  ' "$1" | awk '!seen[$0]++' | awk -v max="$2" -v src="$1" '
    { line[NR] = $0 }
    END { if (NR > max) printf "    (%d more in %s)\n", NR - max, src; for (i = (NR > max ? NR - max + 1 : 1); i <= NR; i++) print line[i] }
  ' | cut -c1-300
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  [ $# -ge 1 ] || { echo "usage: $0 LOG [MAX]" >&2; exit 2; }
  brief "$1" "${2:-20}"
fi
