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
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

CASES = load_cases("site_preflight_cases.yaml")


def load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def typed_check_task():
    """The typed check of site.yml's first play: its task file, imported once per kind of refusal."""
    tasks = load("playbooks", "tasks", "site_preflight.yml")
    return next(t for t in tasks if t["name"] == "Check the variables against each role's argument specs")


def test_the_first_play_checks_types_before_the_preflights():
    play = load("playbooks", "site.yml")[0]
    imports = [t for t in play["tasks"] if t.get("ansible.builtin.import_tasks") == "tasks/site_preflight.yml"]
    assert len(imports) == 2 and [t.get("any_errors_fatal", False) for t in imports] == [False, True]
    names = [t["name"] for t in load("playbooks", "tasks", "site_preflight.yml")]
    assert names.index("Check the variables against each role's argument specs") < names.index("Run each role's read-only preflight")
    task = typed_check_task()
    assert task["ansible.builtin.assert"]["fail_msg"].startswith("site.yml: bad input (nothing was changed on the host): ")


@pytest.mark.parametrize("case", CASES["typed"], ids=case_ids(CASES["typed"]))
def test_site_typed_check(case):
    """The pattern of the names is built from the role list (every listed role here, as on a host of every group)."""
    task = typed_check_task()
    roles = [entry["role"] for entry in load("playbooks", "vars", "roles.yml")["gpuhost_roles"]]
    variables = dict(trusted(task["vars"]), __site_roles=roles, **case["vars"])
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


@pytest.mark.parametrize("case", CASES["lines"], ids=case_ids(CASES["lines"]))
def test_line_errors(case):
    """Filter line_errors (every role's preflight runs it over the role's variables, taken by prefix)."""
    errors = Templar(loader=DataLoader(), variables={"v": case["vars"]}).template(
        trusted("{{ v | gpuhost.inference.line_errors }}"))
    assert_errors_match(list(errors), case["expect_errors"])


@pytest.mark.parametrize("name", ["profile_setting_cr", "verify_unit_name_lf", "model_line_break"])
def test_matrix_line_break_case_gets_the_message_it_looks_for(name):
    """The bad-input matrix's line-break cases (molecule default, faults) look for what line_errors says."""
    bad, expected = matrix_cases()[name]
    errors = Templar(loader=DataLoader(), variables={"v": bad}).template(trusted("{{ v | gpuhost.inference.line_errors }}"))
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "matrix case %s looks for %r, the message is %r" % (name, missing, errors[0])
