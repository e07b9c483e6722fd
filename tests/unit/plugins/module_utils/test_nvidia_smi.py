"""The nvidia-smi command and its CSV: module_utils/nvidia_smi.py.

Data-driven cases in tests/unit/data/nvidia_smi_cases.yaml; parsing against the real H200 capture
(tests/fixtures/nvidia-smi/h200-580.159.04/), running against the mocked nvidia-smi (a test double,
tests/doubles/nvidia_smi_mock.py).
"""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import nvidia_smi
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import (
    NvidiaSmi,
    NvidiaSmiError,
    parse_csv,
    parse_timestamp,
    parse_value,
    power_source,
)
from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import (
    SmiMock,
    ansible_imports,
    captured_row,
    captured_section,
    smi_mock,
)
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

DATA = load_cases("nvidia_smi_cases.yaml")
# the H200 of the module's cases: what gpu_info() of the mock's h200 profile must give
H200_FACTS = next(c for c in load_cases("nvidia_gpu_info.yaml", "cases") if c["id"] == "h200_capture")["expected"]["gpus"][0]
QUERY = ("--query-gpu=index,uuid,name,pci.bus_id,driver_version,persistence_mode,power.management,power.draw,"
         "power.limit,enforced.power.limit,power.default_limit,power.min_limit,power.max_limit,memory.total,"
         "memory.used,utilization.gpu,temperature.gpu,clocks.sm,clocks.max.sm")


# ------------------------------------------------------------------ parsing

@pytest.mark.parametrize("case", DATA["parse_value"], ids=case_ids(DATA["parse_value"]))
def test_parse_value(case):
    got = parse_value(case["text"], case["field"])
    assert got == case["value"]
    assert type(got) is type(case["value"])


def test_parse_csv_with_and_without_units_agree():
    fields = QUERY.partition("=")[2].split(",")
    _c, with_units = captured_section(QUERY + " --format=csv")
    _c, nounits = captured_section(QUERY + " --format=csv,noheader,nounits")
    a = parse_csv(with_units, fields, header=True)
    b = parse_csv(nounits, fields)
    assert len(a) == len(b) == 1
    assert a[0].pop("power.draw") == 80.76 and b[0].pop("power.draw") == 80.75
    assert a == b
    assert b[0]["clocks.sm"] == 345 and b[0]["memory.total"] == 143771 and b[0]["name"] == "NVIDIA H200"


def test_parse_csv_quoted_and_wrong_width():
    assert parse_csv('0, "A, B"\n', ["index", "name"]) == [{"index": 0, "name": "A, B"}]
    with pytest.raises(NvidiaSmiError, match="2 values for 3 fields"):
        parse_csv("0, x\n", ["index", "name", "uuid"])


def test_parse_timestamp():
    stamp = parse_timestamp("2026/12/02 14:39:51.056")
    assert stamp is not None and abs((stamp - parse_timestamp("2026/12/02 14:39:50.556")) - 0.5) < 1e-6
    assert parse_timestamp("[N/A]") is None


# ------------------------------------------------------------------ command lines and running

@pytest.mark.parametrize("case", DATA["command_lines"], ids=case_ids(DATA["command_lines"]))
def test_command_lines(case):
    smi = NvidiaSmi("/usr/bin/nvidia-smi", runner=lambda a: (0, "", ""))
    assert getattr(smi, case["call"])(**case["args"]) == case["argv"]


def test_a_driver_without_compute_cap_is_asked_again_without_it():
    """nvidia-smi older than the field answers rc 2 "is not a valid field to query": asked again, compute_cap None."""
    calls = []
    row14 = ", ".join(captured_row().strip().split(", ")[:14]) + "\n"

    def runner(args):
        calls.append(args)
        if "compute_cap" in args[1]:
            return 2, 'Field "compute_cap" is not a valid field to query.\n', ""
        return 0, row14, ""

    gpus = NvidiaSmi("/usr/bin/nvidia-smi", runner=runner).gpu_info()
    assert len(calls) == 2 and "compute_cap" not in calls[1][1]
    assert gpus[0]["compute_cap"] is None and gpus[0]["name"] == "NVIDIA H200"


def test_runner_errors():
    smi = NvidiaSmi("nvidia-smi", runner=lambda a: (6, "No devices were found\n", ""))
    with pytest.raises(NvidiaSmiError) as info:
        smi.query(["index"], gpus=[7])
    assert info.value.rc == 6 and info.value.no_devices
    assert "nvidia-smi -i 7 --query-gpu=index" in info.value.msg
    smi = NvidiaSmi("nvidia-smi", runner=lambda a: (9, "NVIDIA-SMI has failed because ...\n", ""))
    with pytest.raises(NvidiaSmiError, match="cannot talk to the NVIDIA driver") as info:
        smi.gpu_info()
    assert not info.value.no_devices and info.value.to_dict()["rc"] == 9


def test_subprocess_runner_missing_binary():
    with pytest.raises(NvidiaSmiError, match="not found") as info:
        NvidiaSmi("/nonexistent/nvidia-smi").query(["index"])
    assert info.value.rc is None


# ------------------------------------------------------------------ against the mocked nvidia-smi

def test_gpu_info_standalone_against_the_mock():
    with smi_mock("h200"):
        gpus = NvidiaSmi(SmiMock.path).gpu_info()
    assert len(gpus) == 1
    gpu = gpus[0]
    assert 79.0 < gpu.pop("power_draw_w") <= 700.0
    want = dict(H200_FACTS)
    want.pop("power_draw_w")
    assert gpu == want


def test_gpu_info_filter_and_set_power_limit_against_the_mock():
    with smi_mock("rtx3090x2"):
        smi = NvidiaSmi(SmiMock.path)
        _rc, out, _err = smi.set_power_limit(250, gpus=[1])
        assert out.endswith("All done.\n")
        assert [g["index"] for g in smi.gpu_info(gpus=[1])] == [1]
        assert [g["power_limit_w"] for g in smi.gpu_info()] == [350.0, 250.0]
        with pytest.raises(NvidiaSmiError, match="between 100.00 W and 350.00 W") as info:
            smi.set_power_limit(50)
        assert info.value.rc == 2
        smi.set_persistence_mode(True)
        assert {g["persistence_mode"] for g in smi.gpu_info()} == {"Enabled"}


# ------------------------------------------------------------------ what the nvidia-smi at a path is

def test_power_source_tells_the_real_tool_from_a_double(tmp_path):
    elf = tmp_path / "nvidia-smi"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    script = tmp_path / "nvidia-smi-mock"
    script.write_text("#!/usr/bin/python3\nprint('hi')\n", encoding="utf-8")
    assert power_source(str(elf)) == "nvidia-smi"
    assert power_source(str(script)) == "test double"
    assert power_source(SmiMock.path) == "test double"
    assert power_source(None) == "none"
    assert power_source("") == "none"


def test_module_utils_needs_no_ansible():
    """nvidia_smi.py needs nothing but the standard library (the sampler and the topology reader add only it)."""
    assert ansible_imports(nvidia_smi) == set()
