"""Unit tests of the controller_command lookup (plugins/lookup/controller_command.py); cases in
tests/unit/data/controller_command_cases.yaml."""
from __future__ import annotations

import os
import sys

import pytest

from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import lookup_loader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.plugins.lookup import controller_command
from ansible_collections.gpuhost.inference.tests.unit.paths import DATA, case_ids, load_cases

CASES = load_cases("controller_command_cases.yaml")
PLACES = {"{python}": sys.executable, "{data}": os.path.join(DATA, "controller_command_cases.yaml")}


def _fill(value):
    """The case with {python} and {data} filled in."""
    if isinstance(value, dict):
        return {key: _fill(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item) for item in value]
    if isinstance(value, str):
        for place, path in PLACES.items():
            value = value.replace(place, path)
    return value


def _lookup():
    """The plugin as Ansible loads it (its options from its DOCUMENTATION)."""
    lookup = lookup_loader.get("gpuhost.inference.controller_command", loader=DataLoader(),
                               templar=Templar(loader=DataLoader(), variables={}))
    assert isinstance(lookup, controller_command.LookupModule)
    return lookup


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_controller_command(case):
    case = _fill(case)
    options = {"timeout": case["timeout"]} if "timeout" in case else {}
    [result] = _lookup().run([case["term"]], variables={}, **options)
    assert {key: result.get(key) for key in case["expect"]} == case["expect"]
    for key, fragment in case.get("expect_in", {}).items():
        assert fragment in result[key]
    assert result["item"] == case.get("expect_item", {k: v for k, v in case["term"].items() if k != "stdin"})
    assert "stdin" not in result["item"]


def test_one_result_per_term_in_order():
    terms = [{"argv": [sys.executable, "-c", "print(%d)" % n]} for n in range(3)]
    assert [r["stdout"] for r in _lookup().run(terms, variables={})] == ["0\n", "1\n", "2\n"]


@pytest.mark.parametrize("term", [{"argv": []}, {"argv": "promtool check config"}, "promtool", {"stdin": "x"}])
def test_a_term_without_argv_is_refused(term):
    with pytest.raises(AnsibleLookupError):
        _lookup().run([term], variables={})
