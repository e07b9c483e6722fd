"""The fleet Prometheus's targets from the inventory and its binds (plugins/filter/fleet_prometheus.py); cases in
tests/unit/data/fleet_prometheus_cases.yaml."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.inference.plugins.filter.fleet_prometheus import (
    FilterModule,
    fleet_prometheus_bind_errors,
    fleet_prometheus_check_errors,
    fleet_prometheus_check_skipped,
    fleet_prometheus_config_errors,
    fleet_prometheus_targets,
)
from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("fleet_prometheus_cases.yaml")


@pytest.mark.parametrize("case", CASES["targets"], ids=case_ids(CASES["targets"]))
def test_targets(case):
    got = fleet_prometheus_targets(case["groups"], case["hostvars"], case["monitoring_host"], "gpu_servers",
                                   "vllm_routers", CASES["defaults"])
    assert got == case["expect"]


@pytest.mark.parametrize("case", CASES["binds"], ids=case_ids(CASES["binds"]))
def test_binds(case):
    assert fleet_prometheus_bind_errors(case["values"]) == case["expect"]


def test_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError):
        fleet_prometheus_targets(["gpu_servers"], {}, "x")
    with pytest.raises(AnsibleFilterError):
        fleet_prometheus_bind_errors("0.0.0.0")
    with pytest.raises(AnsibleFilterError):
        fleet_prometheus_config_errors([])
    assert set(FilterModule().filters()) == {"fleet_prometheus_targets", "fleet_prometheus_bind_errors",
                                             "fleet_prometheus_config_errors", "fleet_prometheus_check_errors",
                                             "fleet_prometheus_check_skipped"}


@pytest.mark.parametrize("case", CASES["config"], ids=case_ids(CASES["config"]))
def test_config_inputs(case):
    assert_errors_match(fleet_prometheus_config_errors(case["values"]), case["expect_errors"])


@pytest.mark.parametrize("case", CASES["checks"], ids=case_ids(CASES["checks"]))
def test_file_checks(case):
    result = dict(case["result"], item=case["item"])
    errors = fleet_prometheus_check_errors(result)
    assert_errors_match(errors, case["expect_errors"])
    assert not [s for s in case.get("expect_absent", []) for e in errors if s in e]
    skipped = fleet_prometheus_check_skipped(result)
    assert_errors_match([skipped] if skipped else [], [case["expect_skipped"]] if case["expect_skipped"] else [])


def test_file_checks_refuse_what_is_not_a_loop_result():
    for function in (fleet_prometheus_check_errors, fleet_prometheus_check_skipped):
        with pytest.raises(AnsibleFilterError):
            function({"rc": 1})
        with pytest.raises(AnsibleFilterError):
            function("FAILED")
