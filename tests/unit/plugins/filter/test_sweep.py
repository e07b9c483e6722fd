"""Unit tests of the playbooks/sweep.yml filters (plugins/filter/sweep.py).

Data-driven: the cases are in tests/unit/data/sweep_cases.yaml.
"""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.filter import sweep

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases, case_ids

CASES = load_cases("sweep_cases.yaml")


@pytest.mark.parametrize("case", CASES["setting_errors"], ids=case_ids(CASES["setting_errors"]))
def test_setting_errors(case):
    settings = dict(CASES["base_settings"], **case["settings"])
    gpus = case["gpus"]
    gpus = CASES["gpus"] if gpus is True else (gpus or [])
    errors = sweep.sweep_setting_errors(settings, CASES["rendered"], gpus, nvidia_smi="/usr/bin/nvidia-smi",
                                        gpus_msg=case.get("gpus_msg", "no GPU"), profile_dir="/etc/vllm/profiles")
    assert_errors_match(errors, case["expect_errors"])


def test_nothing_rendered_says_none():
    errors = sweep.sweep_setting_errors(dict(CASES["base_settings"]), [], CASES["gpus"])
    assert errors and errors[0].endswith("allowed: none")


def test_original_limits_round_to_whole_watts():
    gpus = CASES["gpus"] + [{"index": 2, "power_limit_w": None}]
    assert sweep.sweep_original_limits(gpus) == {0: 250, 1: 300}
    assert sweep.sweep_original_limits(None) == {}


@pytest.mark.parametrize("case", CASES["weight"], ids=case_ids(CASES["weight"]))
def test_weight(case):
    out = sweep.sweep_weight(case["files"], case.get("links", []), weight_bytes=case.get("weight_bytes"),
                             model=case.get("model", "/m"))
    assert out == case["expect"]


def test_filters_registered():
    assert set(sweep.FilterModule().filters()) == {"sweep_setting_errors", "sweep_original_limits", "sweep_weight"}
