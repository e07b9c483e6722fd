"""roles/vllm_verify: the default of vllm_verify_restart, rendered by Ansible's own templar from the role's
defaults/main.yml: a venv vllm_install built or switched in this run is served (restart), unless vllm_service's handler
restarted the server since (its fact vllm_service_restarted): a first install then starts the model once. The handler
that sets the fact and the task that clears it at each run's start are checked against the role's files."""
from __future__ import annotations

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

# (facts the earlier roles left, expected restart)
CASES = [
    ({}, False),  # vllm_verify alone: start the unit only when it is not running
    ({"vllm_install_venv_changed": False}, False),
    ({"vllm_install_venv_changed": True}, True),  # an upgrade that changed no setting: serve the new venv
    ({"vllm_install_venv_changed": True, "vllm_service_restarted": False}, True),
    ({"vllm_install_venv_changed": True, "vllm_service_restarted": True}, False),  # first install: started once
    ({"vllm_install_venv_changed": False, "vllm_service_restarted": True}, False),
]


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.mark.parametrize("facts,expected", CASES, ids=[str(c[0]) for c in CASES])
def test_the_default_restart(facts, expected):
    default = load("vllm_verify", "defaults", "main.yml")["vllm_verify_restart"]
    got = Templar(loader=DataLoader(), variables=dict(facts)).template(trusted(default))
    assert got is expected


def test_vllm_service_sets_the_fact_after_its_restart_and_clears_it_first():
    handlers = load("vllm_service", "handlers", "main.yml")
    names = [h["name"] for h in handlers]
    restart = names.index("Restart the vLLM unit")
    note = handlers[restart + 1]
    assert note["ansible.builtin.set_fact"] == {"vllm_service_restarted": True}
    assert note["listen"] == handlers[restart]["listen"] and note["when"] == handlers[restart]["when"]
    first = load("vllm_service", "tasks", "configure.yml")[0]
    assert first["ansible.builtin.set_fact"] == {"vllm_service_restarted": False}


def _flat(role, filename):
    """The tasks of roles/<role>/tasks/<filename> in the order they run, import_tasks and include_tasks opened."""
    for task in load(role, "tasks", filename) or []:
        imported = task.get("ansible.builtin.import_tasks") or task.get("ansible.builtin.include_tasks")
        if isinstance(imported, dict):
            imported = imported.get("file")
        if imported:
            yield from _flat(role, imported)
        else:
            yield task


def test_vllm_service_notifies_every_restart_before_its_flush():
    """vllm_verify measures the server vllm_service leaves: a restart notice after vllm_service's flush_handlers waits
    for the next flush (another role's, or the play's end) and restarts the server after it was verified."""
    tasks = list(_flat("vllm_service", "main.yml"))
    flushes = [i for i, t in enumerate(tasks) if t.get("ansible.builtin.meta") == "flush_handlers"]
    assert len(flushes) == 1, flushes
    notices = [i for i, t in enumerate(tasks) if "vllm_service restart" in (t.get("notify") or [])
               or t.get("notify") == "vllm_service restart"]
    assert notices, "no task notifies vllm_service restart"
    late = [tasks[i]["name"] for i in notices if i > flushes[0]]
    assert late == [], late
    names = [tasks[i]["name"] for i in notices]
    assert "Restart on the venv vllm_install switched to, out of the routers first" in names
