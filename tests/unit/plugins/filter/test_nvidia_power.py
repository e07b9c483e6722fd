"""Unit tests of the nvidia_power filters (plugins/filter/nvidia_power.py).

Data-driven: the cases are in tests/unit/data/nvidia_power_cases.yaml. The last tests tie the
messages to the bad-input matrix of the fault checks of molecule's default scenario (molecule/default/faults/tests/test_bad_inputs.py).
"""
from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuhost.inference.plugins.filter import nvidia_power as np

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases, case_ids
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases

CASES = load_cases("nvidia_power_cases.yaml")


def _gpus(rows):
    return [dict(copy.deepcopy(CASES["gpu"]), **row) for row in rows]


@pytest.mark.parametrize("case", CASES["plan"], ids=case_ids(CASES["plan"]))
def test_plan(case):
    out = np.nvidia_power_plan(_gpus(case["gpus"]), case["managed"], case["limit_w"], case["gpu_limits_w"])
    assert set(out) == {"errors", "plan", "managed", "present"}
    assert out["present"] == [g["index"] for g in case["gpus"]]
    assert_errors_match(out["errors"], case["expect_errors"])
    if "expect_plan" in case:
        assert [[p["index"], p["limit_w"], p["variable"]] for p in out["plan"]] == case["expect_plan"]
    if "expect_managed" in case:
        assert out["managed"] == case["expect_managed"]


def test_plan_rows_carry_the_gpu():
    out = np.nvidia_power_plan(_gpus([{"index": 3, "uuid": "GPU-3", "name": "N"}]), None, 250, None)
    assert out["plan"] == [{"index": 3, "uuid": "GPU-3", "name": "N", "limit_w": 250, "variable": "nvidia_power_limit_w"}]


@pytest.mark.parametrize("case", CASES["groups"], ids=case_ids(CASES["groups"]))
def test_groups(case):
    assert [[g["limit_w"], g["gpus"]] for g in np.nvidia_power_groups(case["plan"])] == case["expect"]


@pytest.mark.parametrize("case", CASES["drift"], ids=case_ids(CASES["drift"]))
def test_drift(case):
    assert np.nvidia_power_drift(case["plan"], _gpus(case["gpus"]), case["persistence_mode"]) == case["expect"]


@pytest.mark.parametrize("case", CASES["result"], ids=case_ids(CASES["result"]))
def test_result(case):
    out = np.nvidia_power_result(case["plan"], _gpus(case["gpus_after"]), case["persistence_mode"], "gpu-power-limit.service",
                                 unit_state=case["unit_state"], start_error=case.get("start_error"),
                                 read_error=case.get("read_error", "no GPU reported"))
    assert out["unit"] == "gpu-power-limit.service"
    for key, value in case["expect"].items():
        assert out[key] == value, (key, out)
    assert out["applied"] is (not out["mismatches"])
    assert len(out["gpus"]) == case["expect_rows"]
    for row in out["gpus"]:
        assert set(row) == {"index", "name", "uuid", "requested_w", "power_limit_w", "enforced_power_limit_w", "persistence_mode"}


@pytest.mark.parametrize("case", CASES["restore"], ids=case_ids(CASES["restore"]))
def test_restore(case):
    rows = np.nvidia_power_restore_plan(_gpus(case["gpus"]), case["recorded"])
    assert [[r["index"], r["default_w"], r["recorded"]] for r in rows] == case["expect"]
    assert np.nvidia_power_restore_left(rows, _gpus(case["gpus_after"])) == case["expect_left"]


def test_defaults_record():
    info = {"driver_version": "580.1", "gpus": _gpus([{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1"}])}
    record = np.nvidia_power_defaults_record(info)
    assert record["recorded_by"] == "gpuhost.inference.nvidia_power"
    assert record["driver_version"] == "580.1"
    assert sorted(record["gpus"]) == ["GPU-0", "GPU-1"]
    assert record["gpus"]["GPU-1"] == {"index": 1, "name": "NVIDIA H200", "pci_bus_id": "00000000:18:00.0",
                                       "default_power_limit_w": 350.0, "power_limit_w": 250.0, "persistence_mode": "Disabled"}
    json.dumps(record)


def test_a_mapping_is_not_a_gpu_list():
    with pytest.raises(TypeError, match="list of nvidia_gpu_info's gpus"):
        np.nvidia_power_plan({"index": 0}, [], 250, {})


@pytest.mark.parametrize("case", CASES["unit"], ids=case_ids(CASES["unit"]))
def test_unit_errors(case):
    assert_errors_match(np.nvidia_power_unit_errors(case["unit_name"], case["before_units"], case["model_unit_name"]),
                        case["expect_errors"])


def test_filters_registered():
    assert set(np.FilterModule().filters()) == {
        "nvidia_power_plan", "nvidia_power_groups", "nvidia_power_drift", "nvidia_power_result",
        "nvidia_power_defaults_record", "nvidia_power_restore_plan", "nvidia_power_restore_left",
        "nvidia_power_unit_errors"}


# --- the bad-input matrix: the lab box has GPUs 0 and 1, 100-350 W (tests/doubles/nvidia_smi_mock.py) ---
MATRIX = ["limit_above_max", "limit_below_min", "gpu_limit_above_max", "gpu_index_absent", "gpus_index_absent",
          "gpus_scalar_absent"]


@pytest.mark.parametrize("name", MATRIX)
def test_matrix_case_gets_the_message_it_looks_for(name):
    bad, expected = matrix_cases()[name]
    inputs = {"nvidia_power_gpus": [], "nvidia_power_limit_w": 250, "nvidia_power_gpu_limits_w": {}}
    inputs.update(bad)
    errors = np.nvidia_power_plan(_gpus([{"index": 0}, {"index": 1}]), inputs["nvidia_power_gpus"],
                                  inputs["nvidia_power_limit_w"], inputs["nvidia_power_gpu_limits_w"])["errors"]
    assert errors
    message = "nvidia_power: %s." % "; ".join(errors)
    missing = [s for s in expected if s not in message]
    assert not missing, "matrix case %s looks for %r, the message is %r" % (name, missing, message)
