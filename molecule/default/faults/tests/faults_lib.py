"""Helpers for the fault checks of the default scenario (box lab-faults): run ansible-playbook against lab boxes.

A plain module, not conftest.py: pytest collects these tests beside tests/integration/ (another conftest)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BOX = "lab-faults"
BIN = os.path.dirname(sys.executable)


def playbook_env() -> dict:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
        ANSIBLE_INJECT_FACT_VARS="false",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    return env


def run_playbook(inventory: str, *args: str, timeout: int = 900, playbook: str = "",
                 env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory, playbook or os.path.join(REPO, "site.yml"), *args]
    return subprocess.run(cmd, cwd=REPO, env={**playbook_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def inventory(tmp_path, *names: str) -> str:
    """An inventory of the named boxes, each with the faults box's variables (the scenario's group vars, then its host
    vars)."""
    with open(f"{REPO}/molecule/default/inventory/group_vars/gpu_servers.yml", encoding="utf-8") as fh:
        fleet = yaml.safe_load(fh)
    with open(f"{REPO}/molecule/default/inventory/host_vars/{BOX}.yml", encoding="utf-8") as fh:
        box_vars = yaml.safe_load(fh)
    hosts = {name: {"ansible_connection": "lab_podman", "ansible_host": name, "ansible_python_interpreter": "/usr/bin/python3"}
             for name in names}
    inv = {"gpu_servers": {"hosts": hosts, "vars": {**fleet, **box_vars}}}
    path = tmp_path / f"{'-'.join(names)}.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def host_snapshot(host) -> str:
    """Everything the roles may change on the box, as one text to compare."""
    return host.check_output(
        "cd / && { sha256sum etc/systemd/system/*.service etc/default/vllm usr/local/bin/vllm-start "
        "etc/vllm/secrets.env etc/vllm/profiles/* var/lib/gpuhost/* 2>/dev/null; readlink opt/vllm/venv; "
        "ls opt/vllm/venvs; nvidia-smi --query-gpu=index,power.limit,persistence_mode --format=csv,noheader; "
        "systemctl show -p ActiveState -p NRestarts -p InvocationID vllm.service gpu-power-limit.service; } | sort"
    )


def molecule_vars_file(tmp_path, extra: dict) -> str:
    path = tmp_path / "vars.json"
    path.write_text(json.dumps(extra))
    return str(path)
