"""site.yml's first play and the roles' typed names (issue 21): values as operators give them are typed by the
collection's one typing path (filters typed and typed_errors, module_utils/gpuhost_values.py), rendered by
Ansible's own templar from playbooks/site.yml and the roles' defaults and vars (cases in data/site_preflight_cases.yaml)."""
from __future__ import annotations

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

CASES = load_cases("site_preflight_cases.yaml")


def load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def typed_check_task():
    play = load("playbooks", "site.yml")[0]
    return next(t for t in play["tasks"] if t["name"] == "Check the variables against each role's argument specs")


def test_the_first_play_checks_types_before_the_preflights():
    names = [t["name"] for t in load("playbooks", "site.yml")[0]["tasks"]]
    assert names.index("Check the variables against each role's argument specs") < names.index("Run each role's read-only preflight")
    task = typed_check_task()
    assert "Nothing was changed on the host" in task["ansible.builtin.assert"]["fail_msg"]


@pytest.mark.parametrize("case", CASES["typed"], ids=case_ids(CASES["typed"]))
def test_site_typed_check(case):
    task = typed_check_task()
    variables = dict(trusted(task["vars"]), **case["vars"])
    errors = Templar(loader=DataLoader(), variables=variables).template(variables["__site_typed_errors"])
    assert_errors_match(list(errors), case["expect_errors"])


@pytest.mark.parametrize("case", CASES["roles"], ids=case_ids(CASES["roles"]))
def test_role_typed_names(case):
    role = case["role"]
    variables = {"ansible_facts": {}, "playbook_dir": os.path.join(ROOT, "playbooks")}
    for part in ("defaults", "vars"):
        variables.update(trusted(load("roles", role, part, "main.yml") or {}))
    variables.update(case["vars"])
    templar = Templar(loader=DataLoader(), variables=variables)
    assert {name: templar.template(variables[name]) for name in case["expect"]} == case["expect"]
