"""ansible-playbook on localhost, for the unit tests that run a role's or a playbook's tasks as Ansible runs them.

    from ansible_collections.gpuhost.inference.tests.unit.playbook_run import run_playbook

The play is written into the test's tmp_path with its own ansible.cfg; the collection is found where this checkout is
(tests/unit/conftest.py links it as ansible_collections/gpuhost/inference), and the modules run under this Python.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT


def run_playbook(tmp_path, tasks, extra_vars, check=False, name="unit test"):
    """Run `tasks` in one play on localhost with `extra_vars` (-e @file); the CompletedProcess (stdout, rc)."""
    play = [{"name": name, "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump(play), encoding="utf-8")
    evars = tmp_path / "vars.json"
    evars.write_text(json.dumps(extra_vars), encoding="utf-8")
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n", encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(ROOT))),
               ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_CONFIG=str(cfg), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(tmp_path / "tmp"), ANSIBLE_STDOUT_CALLBACK="default")
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local", str(book),
            "-e", "@" + str(evars)] + (["--check"] if check else [])
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
