"""The power sampler: module_utils/nvidia_power_sampler.py (PowerSampler, summarize, power_draw_field, LevelPower).

Data-driven cases in tests/unit/data/nvidia_power_sampler_cases.yaml; the sampler reads a stand-in for
the nvidia-smi process, the captured `-lms` rows of the H200 (tests/fixtures/nvidia-smi/h200-580.159.04/)
and the mocked nvidia-smi (a test double, tests/doubles/nvidia_smi_mock.py).
"""
from __future__ import annotations

import io
import time

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import nvidia_power_sampler
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_power_sampler import (
    LevelPower,
    PowerSampler,
    power_draw_field,
    summarize,
)
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import NvidiaSmi, NvidiaSmiError
from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import (
    SmiMock,
    ansible_imports,
    h200_capture,
    smi_mock,
)
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

DATA = load_cases("nvidia_power_sampler_cases.yaml")


# ------------------------------------------------------------------ PowerSampler on a stand-in process

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
    sampler, _procs = fake_sampler(h200_capture("nvidia-smi-lms.txt").splitlines(True))
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


# ------------------------------------------------------------------ PowerSampler against the mocked nvidia-smi

def test_sampler_against_the_mock():
    with smi_mock("rtx3090x2"):
        smi = NvidiaSmi(SmiMock.path)
        smi.set_power_limit(250)
        sampler = PowerSampler(smi, interval_ms=50)
        assert not sampler.running
        sampler.start()
        assert sampler.wait_for_reading(0.0, 30) and sampler.running
        # A reading taken after now: the next one the mock prints (50 ms apart).
        after = time.time()
        assert sampler.wait_for_reading(after, 30)
        assert any(row["t"] >= after for row in list(sampler.samples))
        deadline = time.monotonic() + 60
        while len(sampler.samples) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        samples = sampler.stop()
    assert not sampler.running
    # Ended: no wait for a reading that cannot come.
    started = time.monotonic()
    assert not sampler.wait_for_reading(time.time() + 3600, 30)
    assert time.monotonic() - started < 5
    assert len(samples) >= 8
    summary = sampler.summary()
    assert sorted(summary) == ["0", "1"]
    for item in summary.values():
        assert item["samples"] >= 4 and 0 < item["mean_w"] <= item["max_w"] <= 250.0
        assert item["energy_j"] > 0 and item["duration_s"] > 0


def test_sampler_against_a_failing_mock():
    with smi_mock("h200") as box:
        box.set("fault=fail")
        sampler = PowerSampler(NvidiaSmi(SmiMock.path), interval_ms=50)
        sampler.start()
        sampler._thread.join(10)  # pylint: disable=protected-access
        sampler.stop()
    assert sampler.summary() == {}
    assert "cannot talk to the NVIDIA driver" in sampler.error


# ------------------------------------------------------------------ summarize over the load window

@pytest.mark.parametrize("case", DATA["summarize"], ids=case_ids(DATA["summarize"]))
def test_power_summary_over_the_load_window(case):
    got = summarize(case["rows"], case["field"], case["window"])
    assert set(got) == set(case["expect"])
    for index, want in case["expect"].items():
        for key, value in want.items():
            assert got[index][key] == (pytest.approx(value) if isinstance(value, float) else value), (index, key, got)


# ------------------------------------------------------------------ which power field

def _answering(rc, out):
    calls = []

    def runner(args):
        calls.append(list(args))
        return rc, out, ""
    return runner, calls


@pytest.mark.parametrize("case", DATA["power_draw_field"], ids=case_ids(DATA["power_draw_field"]))
def test_power_draw_field_asks_once_and_falls_back(case):
    runner, calls = _answering(case["rc"], case["out"])
    got, why = power_draw_field(NvidiaSmi("/usr/bin/nvidia-smi", runner=runner), [0, 1])
    assert got == case["field"]
    assert (why is None) if case["note"] is None else (case["note"] in why)
    assert calls == [["/usr/bin/nvidia-smi", "-i", "0,1", "--query-gpu=index,power.draw.instant",
                      "--format=csv,noheader,nounits"]]


def test_power_draw_field_other_failures_raise():
    runner, _calls = _answering(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    with pytest.raises(NvidiaSmiError, match="cannot talk to the NVIDIA driver"):
        power_draw_field(NvidiaSmi("/usr/bin/nvidia-smi", runner=runner))


# ------------------------------------------------------------------ LevelPower

def test_level_power_never_raises_when_nvidia_smi_cannot_start():
    power = LevelPower(NvidiaSmi("/nonexistent/nvidia-smi"), 50, "power.draw")
    power.start()
    power.stop()
    level = power.figures({"output_tokens": 10, "aggregate_tps": 5.0}, (0.0, 1.0))
    assert "cannot be started" in power.error
    assert "power" not in level and "power_w" not in level


def test_a_level_shorter_than_the_interval_gets_figures_from_the_readings_around_it():
    """A 20 ms level sampled every 500 ms (the e2e's short verification levels on a loaded host): the load starts
    after a first reading and the sampler runs on until one after it, so the window lies between two readings."""
    with smi_mock("rtx3090x2"):
        power = LevelPower(NvidiaSmi(SmiMock.path), 500, "power.draw")
        power.start()
        assert power.error is None and power.sampler.samples, power.error  # the reading before the load
        start = time.perf_counter()
        time.sleep(0.02)
        end = time.perf_counter()
        power.stop()
    level = power.figures({"output_tokens": 10, "aggregate_tps": 500.0}, (start, end))
    assert power.error is None, power.error
    assert level["power_w"] > 0 and level["tps_per_w"] > 0 and level["j_per_token"] > 0, level
    for index in ("0", "1"):
        item = level["power"][index]
        # Descheduled for half a second, the test may see a reading inside its window: then it counts as one.
        assert item["samples"] >= 1 or item["between"][0] < item["between"][1], item
        assert item["mean_w"] > 0 and item["energy_j"] > 0, item
    if not all(item["samples"] for item in level["power"].values()):
        assert "the line between the readings around it" in level["power_note"], level


def test_level_power_says_when_nvidia_smi_prints_no_reading(monkeypatch):
    monkeypatch.setattr(nvidia_power_sampler, "FIRST_SAMPLE_WAIT_S", 0.5)
    with smi_mock("h200") as box:
        box.set("fault=slow")
        box.set("slow_seconds=30")
        power = LevelPower(NvidiaSmi(SmiMock.path), 100, "power.draw")
        power.start()
        power.stop()
    level = power.figures({"output_tokens": 10, "aggregate_tps": 5.0}, (0.0, 1.0))
    assert "nvidia-smi printed no power.draw reading within 0.5 s of its start" in power.error, power.error
    assert power.sampler is None and "power_w" not in level


def test_module_utils_needs_only_nvidia_smi():
    assert ansible_imports(nvidia_power_sampler) == {"ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi"}
