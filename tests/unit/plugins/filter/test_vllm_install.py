"""Unit tests of the vllm_install filter vllm_install_cpu_runtime_errors (plugins/filter/vllm_install.py)
and of the role data it guards: the cpu variant's default OS packages and the lab's apt pool.

Data-driven cases in tests/unit/data/vllm_install_cpu_runtime_cases.yaml.
"""
from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.plugins.filter.vllm_install import (
    FilterModule,
    vllm_install_cpu_runtime_errors,
    vllm_install_cuda_errors,
)

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, load_cases

ROLE = os.path.join(ROOT, "roles", "vllm_install")

CASES = load_cases("vllm_install_cpu_runtime_cases.yaml", "cases")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_cpu_runtime_errors(case):
    errors = vllm_install_cpu_runtime_errors(
        case["variant"], case["packages"], case["found"], managed_python=case.get("managed_python", False))
    assert_errors_match(errors, case["expect_errors"])


def test_errors_name_the_variable_and_why():
    for error in vllm_install_cpu_runtime_errors("cpu", [], {"cxx": None, "python_h": False}):
        assert "vllm_install_system_packages" in error
        assert "compiled_random_sample" in error


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="list of package names"):
        vllm_install_cpu_runtime_errors("cpu", "g++ python3-dev", {"cxx": None, "python_h": False})
    with pytest.raises(TypeError, match="found must be a mapping"):
        vllm_install_cpu_runtime_errors("cpu", [], None)


def test_filter_registered():
    assert FilterModule().filters()["vllm_install_cpu_runtime_errors"] is vllm_install_cpu_runtime_errors
    assert FilterModule().filters()["vllm_install_cuda_errors"] is vllm_install_cuda_errors


with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as _fh:
    CUDA_NEEDS = yaml.safe_load(_fh)["_vllm_install_cuda_needs"]
with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as _fh:
    PINNED = yaml.safe_load(_fh)["vllm_install_version"]
CUDA_CASES = load_cases("vllm_install_cuda_cases.yaml", "cases")


@pytest.mark.parametrize("case", CUDA_CASES, ids=[c["id"] for c in CUDA_CASES])
def test_cuda_errors(case):
    assert_errors_match(vllm_install_cuda_errors(case["gpu_info"], CUDA_NEEDS[PINNED], "/usr/bin/nvidia-smi"),
                        case["expect_errors"])


def test_the_pinned_release_has_its_cuda_row():
    """The minimum driver and capability live in one row per release; the pinned one has it."""
    row = CUDA_NEEDS[PINNED]
    assert row["version"] == PINNED and row["cuda"] == "13.0" and row["min_driver"] == "580"
    assert row["min_compute_cap"] == "7.5"


def _default_system_packages(variant, os_family):
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as fh:
        defaults = yaml.safe_load(fh)
    variables = {key: trust_as_template(v) if isinstance(v, str) else v for key, v in defaults.items()}
    variables.update(vllm_install_variant=variant, ansible_facts={"os_family": os_family})
    return Templar(loader=DataLoader(), variables=variables).template(variables["vllm_install_system_packages"])


def test_role_default_brings_the_compiler_on_debian_for_both_variants():
    cpu = _default_system_packages("cpu", "Debian")
    assert cpu == ["python3-venv", "g++", "python3-dev"]
    assert vllm_install_cpu_runtime_errors("cpu", cpu, {"cxx": None, "python_h": False}) == []
    cuda = _default_system_packages("cuda", "Debian")
    assert cuda == ["python3-venv", "g++", "python3-dev"]
    assert vllm_install_cpu_runtime_errors("cuda", cuda, {"cxx": None, "python_h": False}) == []
    assert _default_system_packages("cpu", "RedHat") == []


def test_lab_apt_pool_holds_the_role_default():
    # scripts/apt-pool.sh serves the lab boxes (no network) the packages the role installs.
    with open(os.path.join(ROOT, "scripts", "apt-pool.sh"), encoding="utf-8") as fh:
        found = re.search(r"^PACKAGES=\$\{APT_POOL_PACKAGES:-([^}]*)\}$", fh.read(), re.M)
    assert found, "no PACKAGES=${APT_POOL_PACKAGES:-...} line in scripts/apt-pool.sh"
    pool = found.group(1).split()
    assert set(_default_system_packages("cpu", "Debian")) <= set(pool)
    assert "python3-apt" in pool  # ansible.builtin.apt installs it with apt-get when it is missing
