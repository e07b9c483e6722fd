"""Module nvidia_gpu_info: data-driven with a mocked run_command, and against the mocked nvidia-smi.

Module cases live in tests/unit/data/nvidia_gpu_info.yaml and use the real H200 output. What the module
builds on is tested beside its module_utils: tests/unit/plugins/module_utils/test_nvidia_smi.py and
test_nvidia_topology.py.
"""
from __future__ import annotations

import json
import subprocess
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import GPU_INFO_FIELDS
from ansible_collections.gpuhost.inference.plugins.modules import nvidia_gpu_info
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json
from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import (
    SmiMock,
    captured_row,
    smi_mock,
    topo_capture,
)
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases

MOCK = SmiMock.path
DATA = load_cases("nvidia_gpu_info.yaml")
CASES = DATA["cases"]


def run_module(args, bin_path, answer, topo=None):
    """Run the module; ``answer`` answers --query-gpu, ``topo`` answers `topo -m` (None: must not be run)."""
    calls = []

    def run_command(self, argv, *_a, **_kw):  # pylint: disable=unused-argument
        calls.append(list(argv))
        this = topo if list(argv[1:]) == ["topo", "-m"] else answer
        if this is None:
            raise AssertionError("run_command must not be called with %r" % (argv,))
        if isinstance(this, str):
            this = {"rc": 0, "out": topo_capture(this), "err": ""}
        return this["rc"], this["out"], this["err"]

    with patch_module_args(args), \
            mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json,
                                run_command=run_command,
                                get_bin_path=lambda self, *a, **kw: bin_path):
        with pytest.raises((ExitJson, FailJson)) as info:
            nvidia_gpu_info.main()
    return info.type is FailJson, info.value.args[0], calls


# ------------------------------------------------------------------ the module, data-driven

@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_module_cases(case):
    failed, result, calls = run_module(case["args"], case["bin_path"], case["run_command"], case.get("topo"))
    expected = case["expected"]
    assert failed is bool(expected.get("failed", False)), result
    if failed:
        for fragment in expected["msg"]:
            assert fragment in result["msg"], (fragment, result["msg"])
        if "rc" in expected:
            assert result["rc"] == expected["rc"]
    else:
        for key, value in expected.items():
            assert result[key] == value, key
        assert result["changed"] is False
        for gpu in result["gpus"]:
            assert sorted(gpu) == sorted(k for _f, k in GPU_INFO_FIELDS)
        topology = result["topology"]
        for key, value in case.get("expected_topology", {}).items():
            if key == "reason_has":
                assert value in topology["reason"], topology["reason"]
            else:
                assert topology[key] == value, (key, topology)
    if "expected_argv" in case:
        fields = DATA["command_fields"]
        assert calls == [[a.replace("FIELDS", fields) for a in argv] for argv in case["expected_argv"]]


def test_module_field_list_is_the_one_in_the_data():
    assert DATA["command_fields"] == ",".join(f for f, _k in GPU_INFO_FIELDS)


def test_module_types_from_the_capture():
    failed, result, _calls = run_module({}, "/usr/bin/nvidia-smi", {"rc": 0, "out": captured_row(), "err": ""})
    assert not failed
    gpu = result["gpus"][0]
    assert gpu["compute_cap"] == "9.0"
    assert isinstance(gpu["index"], int) and isinstance(gpu["memory_total_mib"], int)
    assert all(isinstance(gpu[k], float) for k in ("power_draw_w", "power_limit_w", "enforced_power_limit_w",
                                                   "default_power_limit_w", "min_power_limit_w", "max_power_limit_w"))
    assert json.loads(json.dumps(result["gpus"])) == result["gpus"]


def test_module_resolves_a_relative_name_with_extra_dirs():
    seen = {}

    def get_bin_path(self, name, required=False, opt_dirs=None):  # pylint: disable=unused-argument
        seen.update(name=name, required=required, opt_dirs=opt_dirs)
        return "/usr/local/bin/nvidia-smi"

    with patch_module_args({}), mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json,
                                                    get_bin_path=get_bin_path,
                                                    run_command=lambda self, argv, **kw: (6, "No devices were found\n", "")):
        with pytest.raises(FailJson):
            nvidia_gpu_info.main()
    assert seen == {"name": "nvidia-smi", "required": False, "opt_dirs": ["/usr/bin", "/usr/local/bin"]}


# ------------------------------------------------------------------ against the mocked nvidia-smi

@pytest.mark.parametrize("link,nvlink", [(None, False), ("NV4", True), ("SYS", False)])
def test_module_topology_against_the_mock(link, nvlink):
    def run_command(self, argv, *_a, **_kw):  # pylint: disable=unused-argument
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    with smi_mock("rtx3090x2") as box:
        if link:
            box.set("link=" + link)
        with patch_module_args({"nvidia_smi_path": MOCK}), \
                mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json, run_command=run_command):
            with pytest.raises(ExitJson) as info:
                nvidia_gpu_info.main()
    topology = info.value.args[0]["topology"]
    assert topology["available"] is True and topology["gpus"] == [0, 1]
    assert topology["pairs"][0]["link"] == (link or "PHB")
    assert topology["nvlink"] is nvlink
    assert topology["affinity"]["0"] == {"cpu_affinity": "0-63", "numa_affinity": "0", "gpu_numa_id": None}


def test_module_says_when_nvidia_smi_is_a_test_double():
    row = captured_row()
    failed, result, _calls = run_module({"nvidia_smi_path": MOCK}, MOCK, {"rc": 0, "out": row, "err": ""})
    assert not failed, result
    assert result["nvidia_smi_path"] == MOCK
    assert result["power_source"] == "test double"
