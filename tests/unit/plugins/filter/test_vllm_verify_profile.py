"""Unit tests of plugins/filter/vllm_verify_profile.py (the served name, the rollback sentences of the profile and the release).

Data-driven: the cases are in tests/unit/data/vllm_verify_profile_cases.yaml.
"""
from __future__ import annotations


import pytest

from ansible_collections.gpuhost.inference.plugins.filter import vllm_verify_profile as vp

from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases

CASES = load_cases("vllm_verify_profile_cases.yaml")


@pytest.mark.parametrize("case", CASES["served_name"], ids=[c["id"] for c in CASES["served_name"]])
def test_served_name(case):
    assert vp.vllm_verify_served_name(case["settings"], "FALL") == case["expect"]


def test_served_name_refuses_a_non_dict():
    with pytest.raises(TypeError, match="as a dict"):
        vp.vllm_verify_served_name(["model"])
    assert vp.vllm_verify_served_name(None, "x") == "x"


@pytest.mark.parametrize("case", CASES["rollback_text"], ids=[c["id"] for c in CASES["rollback_text"]])
def test_rollback_text(case):
    text = vp.vllm_verify_rollback_text(case["rollback_to"], case.get("start"), case.get("enabled", True),
                                        case.get("last_good", ""), "/var/lib/vllm/last-good-profile")
    assert text == case["expect"]


@pytest.mark.parametrize("case", CASES["version_text"], ids=[c["id"] for c in CASES["version_text"]])
def test_version_text(case):
    assert vp.vllm_verify_version_text(case["venvs"], case["start"]) == case["expect"]


def test_filters_registered():
    assert set(vp.FilterModule().filters()) == {
        "vllm_verify_served_name", "vllm_verify_rollback_text", "vllm_verify_version_text"}
