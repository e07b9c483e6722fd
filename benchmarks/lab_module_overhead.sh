#!/usr/bin/env bash
# `benchmarks/lab_module_overhead.sh BOX [N]`: what one module run costs through the lab's connection
# (tests/lab/connection_plugins/lab_podman.py) on a running lab box, with the payloads' bytecode off and on
# (GPUHOST_LAB_BYTECODE=0/1): N pings and N stats (become), wall ms per module run and the CPU seconds of the
# whole ansible-playbook process tree (the box's python included: nsenter's children). Changes nothing on the box.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lab-env.sh
. scripts/lab-env.sh
box=${1:?usage: $0 BOX [N]}
n=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/inventory.yml" <<YML
all:
  hosts:
    $box: {ansible_connection: lab_podman, ansible_host: $box, ansible_python_interpreter: /usr/bin/python3}
YML
cat >"$work/play.yml" <<'YML'
- name: Module runs through the lab connection
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
      loop: "{{ range(n | int) | list }}"
    - name: Stat as root
      ansible.builtin.stat:
        path: /etc/passwd
      become: true
      loop: "{{ range(n | int) | list }}"
YML
printf '%-10s %12s %14s %12s\n' bytecode "wall s" "ms per module" "CPU s"
for setting in 0 1 0 1; do
  start=$(date +%s.%N)
  cpu=$( { GPUHOST_LAB_BYTECODE=$setting /usr/bin/time -f '%U %S' ansible-playbook -i "$work/inventory.yml" \
           "$work/play.yml" -e n="$n" >"$work/out" 2>"$work/time"; } && tail -1 "$work/time" | awk '{print $1 + $2}')
  end=$(date +%s.%N)
  awk -v s="$setting" -v a="$start" -v b="$end" -v n="$n" -v c="$cpu" \
    'BEGIN { printf "%-10s %12.1f %14.0f %12.2f\n", (s == 1 ? "on" : "off"), b - a, 1000 * (b - a) / (2 * n), c }'
done
