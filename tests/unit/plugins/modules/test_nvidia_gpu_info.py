"""Module nvidia_gpu_info (data-driven, mocked run_command) and module_utils/nvidiasmi_utils.py.

Module cases live in tests/unit/data/nvidia_gpu_info.yaml and use the real H200 output.
module_utils is also run against the mocked nvidia-smi (a test double, tests/doubles/).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.module_utils import nvidia_smi as smi_utils
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import (
    GPU_INFO_FIELDS,
    NvidiaSmi,
    NvidiaSmiError,
    PowerSampler,
    parse_csv,
    parse_timestamp,
    parse_value,
)
from ansible_collections.gpuhost.inference.plugins.modules import nvidia_gpu_info
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json
from ansible_collections.gpuhost.inference.tests.unit.paths import DATA as DATA_DIR, SMI_MOCK as MOCK, load_cases
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES

FIXTURES = os.path.join(ALL_FIXTURES, "nvidia-smi", "h200-580.159.04")

DATA = load_cases("nvidia_gpu_info.yaml", directory=DATA_DIR)
CASES = DATA["cases"]


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def topo_capture(name):
    with open(os.path.join(ALL_FIXTURES, "nvidia-smi", "topo", name), encoding="utf-8") as handle:
        return handle.read()


def captured_section(command_start):
    """The captured output of exactly that command (its text after "### nvidia-smi ")."""
    for block in fixture("nvidia-smi-queries.txt").split("### nvidia-smi ")[1:]:
        command, _nl, rest = block.partition("\n")
        if command == command_start:
            return command, rest.rpartition("rc=")[0]
    raise KeyError(command_start)


def captured_compute_cap():
    """compute_cap of the captured H200 (nvidia-smi-compute-cap-topo-version.txt, a second real capture)."""
    text = fixture("nvidia-smi-compute-cap-topo-version.txt")
    block = text.split("$ nvidia-smi --query-gpu=compute_cap --format=csv,noheader\n", 1)[1]
    return block.splitlines()[0].strip()


def captured_row():
    """The module's columns of the captured H200: the first 14 of the big capture, then compute_cap."""
    _command, out = captured_section("--query-gpu=index,uuid,name,pci.bus_id,driver_version,persistence_mode,"
                                     "power.management,power.draw,power.limit,enforced.power.limit,"
                                     "power.default_limit,power.min_limit,power.max_limit,memory.total,memory.used,"
                                     "utilization.gpu,temperature.gpu,clocks.sm,clocks.max.sm --format=csv,noheader,nounits")
    return ", ".join(out.strip().split(", ")[:14] + [captured_compute_cap()]) + "\n"


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


def test_a_driver_without_compute_cap_is_asked_again_without_it():
    """nvidia-smi older than the field answers rc 2 "is not a valid field to query": asked again, compute_cap None."""
    calls = []
    row14 = ", ".join(captured_row().strip().split(", ")[:14]) + "\n"

    def runner(args):
        calls.append(args)
        if "compute_cap" in args[1]:
            return 2, 'Field "compute_cap" is not a valid field to query.\n', ""
        return 0, row14, ""

    gpus = smi_utils.NvidiaSmi("/usr/bin/nvidia-smi", runner=runner).gpu_info()
    assert len(calls) == 2 and "compute_cap" not in calls[1][1]
    assert gpus[0]["compute_cap"] is None and gpus[0]["name"] == "NVIDIA H200"


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


# ------------------------------------------------------------------ module_utils parsing

@pytest.mark.parametrize("text,field,value", [
    ("[N/A]", "power.draw", None),
    ("N/A", "power.limit", None),
    ("[Not Supported]", "power.management", None),
    ("[Unknown Error]", "temperature.gpu", None),
    ("80.75", "power.draw", 80.75),
    ("80.75 W", "power.draw", 80.75),
    ("143771 MiB", "memory.total", 143771),
    ("0 %", "utilization.gpu", 0),
    ("345 MHz", "clocks.sm", 345),
    ("41", "temperature.gpu", 41),
    ("580.159.04", "driver_version", "580.159.04"),
    ("9.0", "compute_cap", "9.0"),
    ("1653724049211", "serial", "1653724049211"),
    ("00000000:00:06.0", "pci.bus_id", "00000000:00:06.0"),
    ("Enabled", "persistence_mode", "Enabled"),
])
def test_parse_value(text, field, value):
    assert parse_value(text, field) == value
    assert type(parse_value(text, field)) is type(value)


def test_parse_csv_with_and_without_units_agree():
    fields = ("index,uuid,name,pci.bus_id,driver_version,persistence_mode,power.management,power.draw,power.limit,"
              "enforced.power.limit,power.default_limit,power.min_limit,power.max_limit,memory.total,memory.used,"
              "utilization.gpu,temperature.gpu,clocks.sm,clocks.max.sm").split(",")
    _c, with_units = captured_section("--query-gpu=index,uuid,name,pci.bus_id,driver_version,persistence_mode,"
                                      "power.management,power.draw,power.limit,enforced.power.limit,power.default_limit,"
                                      "power.min_limit,power.max_limit,memory.total,memory.used,utilization.gpu,"
                                      "temperature.gpu,clocks.sm,clocks.max.sm --format=csv")
    _c, nounits = captured_section("--query-gpu=index,uuid,name,pci.bus_id,driver_version,persistence_mode,"
                                   "power.management,power.draw,power.limit,enforced.power.limit,power.default_limit,"
                                   "power.min_limit,power.max_limit,memory.total,memory.used,utilization.gpu,"
                                   "temperature.gpu,clocks.sm,clocks.max.sm --format=csv,noheader,nounits")
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


def test_command_lines():
    smi = NvidiaSmi("/usr/bin/nvidia-smi", runner=lambda a: (0, "", ""))
    assert smi.query_cmd(["index", "power.draw"], gpus=[0, 1]) == [
        "/usr/bin/nvidia-smi", "-i", "0,1", "--query-gpu=index,power.draw", "--format=csv,noheader,nounits"]
    assert smi.query_cmd(["index"], units=True, header=True, loop_ms=200) == [
        "/usr/bin/nvidia-smi", "--query-gpu=index", "--format=csv", "-lms", "200"]
    assert smi.power_limit_cmd(250, [0, 1]) == ["/usr/bin/nvidia-smi", "-i", "0,1", "-pl", "250"]
    assert smi.power_limit_cmd(262.5, 1) == ["/usr/bin/nvidia-smi", "-i", "1", "-pl", "262.5"]
    assert smi.power_limit_cmd("275.0", []) == ["/usr/bin/nvidia-smi", "-pl", "275"]
    assert smi.persistence_mode_cmd(True) == ["/usr/bin/nvidia-smi", "-pm", "1"]
    assert smi.persistence_mode_cmd(False, [0]) == ["/usr/bin/nvidia-smi", "-i", "0", "-pm", "0"]


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

@pytest.fixture
def mock_box():
    directory = tempfile.mkdtemp(prefix="smi-utils-")
    env = {"NVIDIA_SMI_MOCK_STATE": os.path.join(directory, "state.json")}

    def init(profile):
        subprocess.run([MOCK, "--mock-init", profile], env=dict(os.environ, **env), check=True)

    with mock.patch.dict(os.environ, env):
        yield init, env
    shutil.rmtree(directory)


def test_gpu_info_standalone_against_the_mock(mock_box):
    init, _env = mock_box
    init("h200")
    gpus = NvidiaSmi(MOCK).gpu_info()
    assert len(gpus) == 1
    gpu = gpus[0]
    assert 79.0 < gpu.pop("power_draw_w") <= 700.0
    case = next(c for c in CASES if c["id"] == "h200_capture")
    want = dict(case["expected"]["gpus"][0])
    want.pop("power_draw_w")
    assert gpu == want


@pytest.mark.parametrize("link,nvlink", [(None, False), ("NV4", True), ("SYS", False)])
def test_module_topology_against_the_mock(mock_box, link, nvlink):
    init, env = mock_box
    init("rtx3090x2")
    if link:
        subprocess.run([MOCK, "--mock-set", "link=" + link], env=dict(os.environ, **env), check=True)

    def run_command(self, argv, *_a, **_kw):  # pylint: disable=unused-argument
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    with patch_module_args({"nvidia_smi_path": MOCK}), \
            mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json, run_command=run_command):
        with pytest.raises(ExitJson) as info:
            nvidia_gpu_info.main()
    topology = info.value.args[0]["topology"]
    assert topology["available"] is True and topology["gpus"] == [0, 1]
    assert topology["pairs"][0]["link"] == (link or "PHB")
    assert topology["nvlink"] is nvlink
    assert topology["affinity"]["0"] == {"cpu_affinity": "0-63", "numa_affinity": "0", "gpu_numa_id": None}


def test_module_topology_when_the_mock_has_no_topo(mock_box):
    init, env = mock_box
    init("rtx3090x2")
    subprocess.run([MOCK, "--mock-set", "link=none"], env=dict(os.environ, **env), check=True)
    facts = smi_utils.read_topology(NvidiaSmi(MOCK), 2)
    assert facts["available"] is False
    assert "Invalid combination of input arguments" in facts["reason"]


def test_gpu_info_filter_and_set_power_limit_against_the_mock(mock_box):
    init, _env = mock_box
    init("rtx3090x2")
    smi = NvidiaSmi(MOCK)
    _rc, out, _err = smi.set_power_limit(250, gpus=[1])
    assert out.endswith("All done.\n")
    assert [g["index"] for g in smi.gpu_info(gpus=[1])] == [1]
    assert [g["power_limit_w"] for g in smi.gpu_info()] == [350.0, 250.0]
    with pytest.raises(NvidiaSmiError, match="between 100.00 W and 350.00 W") as info:
        smi.set_power_limit(50)
    assert info.value.rc == 2
    smi.set_persistence_mode(True)
    assert {g["persistence_mode"] for g in smi.gpu_info()} == {"Enabled"}


# ------------------------------------------------------------------ PowerSampler

class FakeProcess:
    """Stands in for subprocess.Popen: prints fixed lines and then ends (or waits to be killed)."""

    def __init__(self, lines, rc=None, stderr=""):
        self.stdout = io.StringIO("".join(lines))
        self.stderr = None if not stderr else _Stream(stderr)
        self.rc = rc
        self.terminated = False

    def poll(self):
        return self.rc

    def terminate(self):
        self.terminated = True
        self.rc = -15

    def kill(self):
        self.rc = -9

    def wait(self, timeout=None):  # pylint: disable=unused-argument
        return self.rc


class _Stream:
    def __init__(self, text):
        self.text = text

    def read(self):
        return self.text

    def close(self):
        pass


def fake_sampler(lines, rc=None, stderr=""):
    procs = []

    def popen(args, **kwargs):  # pylint: disable=unused-argument
        procs.append((args, FakeProcess(lines, rc, stderr)))
        return procs[-1][1]

    sampler = PowerSampler(NvidiaSmi("/usr/bin/nvidia-smi"), interval_ms=500, gpus=[0], popen=popen)
    return sampler, procs


def test_sampler_trapezoid_energy():
    sampler, procs = fake_sampler([
        "2026/12/02 14:00:00.000, 0, 100.00\n",
        "2026/12/02 14:00:00.000, 1, 50.00\n",
        "2026/12/02 14:00:01.000, 0, 200.00\n",
        "2026/12/02 14:00:01.000, 1, [N/A]\n",
        "2026/12/02 14:00:02.000, 0, 100.00\n",
        "2026/12/02 14:00:02.000, 1, 50.00\n",
    ])
    sampler.start()
    sampler._thread.join(5)  # pylint: disable=protected-access
    samples = sampler.stop()
    assert procs[0][0] == ["/usr/bin/nvidia-smi", "-i", "0", "--query-gpu=timestamp,index,power.draw",
                           "--format=csv,noheader,nounits", "-lms", "500"]
    assert procs[0][1].terminated
    assert len(samples) == 6
    summary = sampler.summary()
    assert summary["0"] == {"mean_w": 133.333, "max_w": 200.0, "min_w": 100.0, "samples": 3,
                            "duration_s": 2.0, "energy_j": 300.0}
    assert summary["1"] == {"mean_w": 50.0, "max_w": 50.0, "min_w": 50.0, "samples": 2,
                            "duration_s": 2.0, "energy_j": 100.0}
    assert sampler.error is None


def test_sampler_on_the_captured_lms_rows():
    sampler, _procs = fake_sampler(fixture("nvidia-smi-lms.txt").splitlines(True))
    sampler.start()
    sampler._thread.join(5)  # pylint: disable=protected-access
    sampler.stop()
    result = sampler.summary()["0"]
    assert result["samples"] == 10 and result["max_w"] == 80.78 and result["min_w"] == 80.72
    assert result["duration_s"] == 4.505
    assert 80.72 * 4.505 < result["energy_j"] < 80.78 * 4.505


def test_sampler_reports_an_nvidia_smi_error():
    sampler, _procs = fake_sampler(["No devices were found\n"], rc=6)
    with sampler:
        sampler._thread.join(5)  # pylint: disable=protected-access
    assert sampler.samples == [] and sampler.summary() == {}
    assert "reports no GPUs" in sampler.error and "No devices were found" in sampler.error


def test_sampler_against_the_mock(mock_box):
    init, _env = mock_box
    init("rtx3090x2")
    smi = NvidiaSmi(MOCK)
    smi.set_power_limit(250)
    sampler = smi.sampler(interval_ms=50)
    sampler.start()
    deadline = time.monotonic() + 10
    while len(sampler.samples) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    samples = sampler.stop()
    assert sampler._proc.poll() is not None  # pylint: disable=protected-access
    assert len(samples) >= 8
    summary = sampler.summary()
    assert sorted(summary) == ["0", "1"]
    for item in summary.values():
        assert item["samples"] >= 4 and 0 < item["mean_w"] <= item["max_w"] <= 250.0
        assert item["energy_j"] > 0 and item["duration_s"] > 0


def test_sampler_against_a_failing_mock(mock_box):
    init, env = mock_box
    init("h200")
    subprocess.run([MOCK, "--mock-set", "fault=fail"], env=dict(os.environ, **env), check=True)
    sampler = NvidiaSmi(MOCK).sampler(interval_ms=50)
    sampler.start()
    sampler._thread.join(10)  # pylint: disable=protected-access
    sampler.stop()
    assert sampler.summary() == {}
    assert "cannot talk to the NVIDIA driver" in sampler.error


def test_module_utils_needs_no_ansible():
    source = open(smi_utils.__file__, encoding="utf-8").read()  # pylint: disable=consider-using-with
    assert "import ansible" not in source and "from ansible" not in source


# ------------------------------------------------------------------ power: window, field, source
WINDOW_CASES = load_cases("power_window.yaml", "cases", directory=DATA_DIR)


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c["id"] for c in WINDOW_CASES])
def test_power_summary_over_the_load_window(case):
    got = smi_utils.summarize(case["rows"], case["field"], case["window"])
    assert set(got) == set(case["expect"])
    for index, want in case["expect"].items():
        for key, value in want.items():
            assert got[index][key] == (pytest.approx(value) if isinstance(value, float) else value), (index, key, got)


def _answering(rc, out):
    calls = []

    def runner(args):
        calls.append(list(args))
        return rc, out, ""
    return runner, calls


@pytest.mark.parametrize("rc,out,field,note", [
    (0, "0, 714.25\n1, 80.10\n", "power.draw.instant", None),
    (2, 'Field "power.draw.instant" is not a valid field to query.\n\n', "power.draw", "does not know"),
    (0, "0, [N/A]\n", "power.draw", "no power.draw.instant value"),
    (0, "0, [Not Supported]\n", "power.draw", "no power.draw.instant value"),
])
def test_power_draw_field_asks_once_and_falls_back(rc, out, field, note):
    runner, calls = _answering(rc, out)
    got, why = smi_utils.power_draw_field(NvidiaSmi("/usr/bin/nvidia-smi", runner=runner), [0, 1])
    assert got == field
    assert (why is None) if note is None else (note in why)
    assert calls == [["/usr/bin/nvidia-smi", "-i", "0,1", "--query-gpu=index,power.draw.instant",
                      "--format=csv,noheader,nounits"]]


def test_power_draw_field_other_failures_raise():
    runner, _calls = _answering(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    with pytest.raises(NvidiaSmiError, match="cannot talk to the NVIDIA driver"):
        smi_utils.power_draw_field(NvidiaSmi("/usr/bin/nvidia-smi", runner=runner))


def test_power_source_tells_the_real_tool_from_a_double(tmp_path):
    elf = tmp_path / "nvidia-smi"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    script = tmp_path / "nvidia-smi-mock"
    script.write_text("#!/usr/bin/python3\nprint('hi')\n", encoding="utf-8")
    assert smi_utils.power_source(str(elf)) == "nvidia-smi"
    assert smi_utils.power_source(str(script)) == "test double"
    assert smi_utils.power_source(MOCK) == "test double"
    assert smi_utils.power_source(None) == "none"
    assert smi_utils.power_source("") == "none"


def test_module_says_when_nvidia_smi_is_a_test_double():
    row = captured_row()
    failed, result, _calls = run_module({"nvidia_smi_path": MOCK}, MOCK, {"rc": 0, "out": row, "err": ""})
    assert not failed, result
    assert result["nvidia_smi_path"] == MOCK
    assert result["power_source"] == "test double"
