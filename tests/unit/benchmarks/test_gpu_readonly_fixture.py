"""The read-only capture from a real H200 (tests/fixtures/gpu-readonly/, benchmarks/gpu_readonly.sh).

The captured nvidia-smi output is fed back through module_utils' parsing (NvidiaSmi with a fake
runner, the nvidia_gpu_info module with a mocked run_command, summarize()) and the script's own
parser, and the figures in the JSON are checked against each other: every number the report
states must follow from the raw readings stored beside it.
"""
from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_power_sampler import PowerSampler, summarize
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import GPU_INFO_FIELDS, NvidiaSmi
from ansible_collections.gpuhost.inference.plugins.modules import nvidia_gpu_info
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, exit_json, fail_json
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, load_script

FIXTURES = os.path.join(ALL_FIXTURES, "gpu-readonly")
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_readonly.py")


GR = load_script("gpu_readonly", SCRIPT)
with open(os.path.join(FIXTURES, "gpu_readonly.json"), encoding="utf-8") as _handle:
    DATA = json.load(_handle)
with open(os.path.join(FIXTURES, "gpu_readonly.txt"), encoding="utf-8") as _handle:
    TEXT = _handle.read()
FACTS = DATA["module"]["result"]
TOL = DATA["settings"]["tolerance"]
PHASES = ("idle", "load")
RATE_KEYS = ("samples_per_s_wall", "samples_per_s_stamps")


def assert_same_facts(parsed, captured):
    """The raw query and the module's own query were two nvidia-smi calls a moment apart: every
    fact is the same except the live power draw, which may move within nvidia-smi's +/- 5 W."""
    assert len(parsed) == len(captured)
    for mine, theirs in zip(parsed, captured):
        assert sorted(mine) == sorted(theirs)
        for key in mine:
            if key == "power_draw_w":
                assert mine[key] == pytest.approx(theirs[key], abs=5.0)
            else:
                assert mine[key] == theirs[key], key
                assert type(mine[key]) is type(theirs[key]), key


# ------------------------------------------------------------------ facts, re-parsed

def test_capture_is_from_a_real_h200_not_the_test_double():
    assert DATA["settings"]["load"] == "torch"
    assert DATA["load_process"]["ready"]["device"] == "NVIDIA H200"
    assert DATA["load_process"]["done"]["matmuls"] > 0
    assert "NVIDIA H200" in DATA["environment"]["nvidia_smi_list"]
    assert DATA["module"]["rc"] == 0 and not FACTS.get("failed")


def test_facts_follow_from_the_captured_query_through_module_utils():
    calls = []

    def runner(args):
        calls.append(list(args))
        return DATA["raw_query"]["rc"], DATA["raw_query"]["stdout"], DATA["raw_query"]["stderr"]

    gpus = NvidiaSmi("nvidia-smi", runner=runner).gpu_info()
    assert_same_facts(gpus, FACTS["gpus"])
    # the capture used exactly today's query (a changed field list makes the fixture stale)
    assert calls == [["nvidia-smi"] + DATA["raw_query"]["argv_tail"]]
    assert calls[0][1] == "--query-gpu=" + ",".join(f for f, _k in GPU_INFO_FIELDS)


def test_module_returns_the_same_facts_from_the_captured_query():
    answer = (DATA["raw_query"]["rc"], DATA["raw_query"]["stdout"], DATA["raw_query"]["stderr"])
    with patch_module_args({}), mock.patch.multiple(
            basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json,
            run_command=lambda self, argv, *a, **kw: answer,
            get_bin_path=lambda self, *a, **kw: FACTS["nvidia_smi_path"]):
        with pytest.raises(ExitJson) as info:
            nvidia_gpu_info.main()
    result = info.value.args[0]
    assert_same_facts(result["gpus"], FACTS["gpus"])
    for key in ("gpu_count", "driver_version", "nvidia_smi_path", "changed"):
        assert result[key] == FACTS[key], key


def test_facts_describe_an_h200_at_its_default_limit():
    assert FACTS["gpu_count"] == len(FACTS["gpus"]) == 1
    gpu = FACTS["gpus"][0]
    assert sorted(gpu) == sorted(k for _f, k in GPU_INFO_FIELDS)
    assert gpu["name"] == "NVIDIA H200" and gpu["memory_total_mib"] == 143771
    assert gpu["min_power_limit_w"] <= gpu["enforced_power_limit_w"] <= gpu["max_power_limit_w"]
    assert gpu["power_limit_w"] == gpu["default_power_limit_w"]
    assert 0 < gpu["power_draw_w"] < gpu["enforced_power_limit_w"]
    assert FACTS["driver_version"] == gpu["driver_version"]


def test_settings_read_again_at_the_end_are_unchanged():
    after = DATA["settings_after"]
    assert after["unchanged"] is True
    for before, again in zip(FACTS["gpus"], after["gpus"]):
        for key in GR.SETTING_KEYS:
            assert before[key] == again[key], key


# ------------------------------------------------------------------ sampler figures

@pytest.mark.parametrize("phase", PHASES)
def test_phase_summary_is_summarize_of_its_samples(phase):
    record = DATA[phase]
    recomputed = summarize(record["samples"])
    stored = {i: {k: v for k, v in s.items() if k not in RATE_KEYS} for i, s in record["per_gpu"].items()}
    assert recomputed == stored
    assert record["rows"] == len(record["samples"])
    assert record["error"] is None


@pytest.mark.parametrize("phase", PHASES)
def test_samples_per_second_near_five(phase):
    record = DATA[phase]
    expected = 1000.0 / DATA["settings"]["interval_ms"]
    for stats in record["per_gpu"].values():
        assert stats["samples_per_s_wall"] == pytest.approx(stats["samples"] / record["wall_s"], abs=1e-3)
        assert stats["samples_per_s_stamps"] == pytest.approx((stats["samples"] - 1) / stats["duration_s"], abs=1e-3)
        assert stats["samples_per_s_wall"] == pytest.approx(expected, rel=0.1)
        assert stats["samples_per_s_stamps"] == pytest.approx(expected, rel=0.1)
    assert record["wall_s"] == pytest.approx(DATA["settings"][phase + "_s"], abs=1.0)


def test_load_draws_far_more_than_idle_and_stays_near_the_limit():
    limit = FACTS["gpus"][0]["enforced_power_limit_w"]
    for index, load in DATA["load"]["per_gpu"].items():
        idle = DATA["idle"]["per_gpu"][index]
        assert load["mean_w"] > 3 * idle["mean_w"]
        assert idle["max_w"] < load["mean_w"]
        assert load["max_w"] <= limit  # power.draw (1 s average) stays under the cap
    assert DATA["verdict"]["load_mean_above_idle_mean"] is True


def test_averaged_power_draw_lags_the_instant_reading_at_load_start():
    """A finding of the capture: power.draw is a 1 s average, so the first load rows ramp up."""
    first = DATA["load"]["samples"][0]
    assert first["power.draw"] < first["power.draw.instant"] / 2
    late = [s for s in DATA["load"]["samples"] if s["t"] >= DATA["load"]["samples"][0]["t"] + 2.0]
    assert min(s["power.draw"] for s in late) > 0.9 * DATA["load"]["per_gpu"]["0"]["mean_w"]


# ------------------------------------------------------------------ nvidia-smi -q -d POWER

@pytest.mark.parametrize("when", ["at_load_end", "after_load"])
def test_q_power_parsed_from_its_captured_text(when):
    read = DATA["q_power"][when]
    assert read["rc"] == 0
    parsed = GR.parse_q_power(read["stdout"])
    assert parsed == read["parsed"]
    assert parsed["driver_version"] == FACTS["driver_version"]
    samples = GR.power_samples(parsed, FACTS["gpus"][0]["pci_bus_id"])
    assert isinstance(samples["Duration"], float) and isinstance(samples["Number of Samples"], int)
    assert samples["Min"] <= samples["Avg"] <= samples["Max"]
    readings = parsed["gpus"][FACTS["gpus"][0]["pci_bus_id"]]["GPU Power Readings"]
    assert readings["Current Power Limit"] == FACTS["gpus"][0]["enforced_power_limit_w"]


def test_q_power_read_at_load_end_is_inside_the_load():
    q_end = DATA["q_power"]["at_load_end"]
    last = DATA["load"]["samples"][-1]["t"]
    assert 0 <= q_end["t_start"] - last < 1.0
    assert q_end["t_end"] <= DATA["q_power"]["after_load"]["t_start"]


# ------------------------------------------------------------------ comparisons and verdict

@pytest.mark.parametrize("key,when", [("load_window", "at_load_end"), ("matched_window", "at_load_end"),
                                      ("after_load", "after_load")])
def test_comparison_figures_follow_from_the_readings(key, when):
    for index, entry in DATA["comparison"].items():
        cmp_ = entry[key]
        bus = FACTS["gpus"][int(index)]["pci_bus_id"]
        assert cmp_["nvidia_smi_w"] == GR.power_samples(DATA["q_power"][when]["parsed"], bus)["Avg"]
        if key == "matched_window":
            window = [s["power.draw"] for s in DATA["load"]["samples"]
                      if str(s["index"]) == index and s["t"] >= cmp_["window_end_t"] - cmp_["window_s"]]
            assert cmp_["samples"] == len(window)
            assert cmp_["sampler_w"] == pytest.approx(sum(window) / len(window), abs=1e-3)
            assert cmp_["window_s"] == entry["nvidia_smi_power_samples_at_load_end"]["Duration"]
        else:
            assert cmp_["sampler_w"] == DATA["load"]["per_gpu"][index]["mean_w"]
        assert cmp_["ratio"] == pytest.approx(cmp_["sampler_w"] / cmp_["nvidia_smi_w"], abs=1e-4)
        assert cmp_["agree"] is (round(abs(cmp_["ratio"] - 1.0), 4) <= TOL)


def test_verdict_matches_the_comparisons():
    assert GR.verdict(DATA) == DATA["verdict"]
    assert DATA["verdict"]["agree_load_window"] is DATA["comparison"]["0"]["load_window"]["agree"]


@pytest.mark.parametrize("ratio,agree", [(1.0, True), (1.1, True), (0.9, True), (1.1001, False), (0.8999, False)])
def test_compare_flags_by_the_tolerance(ratio, agree):
    assert GR.compare(ratio * 500.0, 500.0)["agree"] is agree
    assert GR.compare(None, 500.0)["agree"] is None


# ------------------------------------------------------------------ the printed report

def test_text_report_states_the_json_figures():
    assert json.dumps(FACTS, indent=2, sort_keys=True) in TEXT
    for index, entry in DATA["comparison"].items():
        for label, key in (("A load_window", "load_window"), ("B matched_window", "matched_window"),
                           ("C after_load", "after_load")):
            cmp_ = entry[key]
            line = "GPU %s %s: sampler %.2f W, nvidia-smi Avg %.2f W, ratio %.3f -> %s" % (
                index, label, cmp_["sampler_w"], cmp_["nvidia_smi_w"], cmp_["ratio"],
                "agree within 10%" if cmp_["agree"] else "DISAGREE")
            assert line in TEXT
        load = DATA["load"]["per_gpu"][index]
        assert "GPU %s load: mean %.1f W, max %.1f W" % (index, load["mean_w"], load["max_w"]) in TEXT
    assert "within 10%%: %s" % DATA["verdict"]["agree_load_window"] in TEXT


# ------------------------------------------------------------------ read-only guard

@pytest.mark.parametrize("argv", [
    ["nvidia-smi", "-pl", "250"], ["nvidia-smi", "-i", "0", "-pm", "1"], ["nvidia-smi", "-r"],
    ["nvidia-smi", "-ac", "2619,1980"], ["nvidia-smi", "-lgc", "1500"], ["nvidia-smi", "-c", "3"],
    ["nvidia-smi", "--power-limit=250"],
])
def test_read_only_guard_refuses_writes(argv):
    with pytest.raises(ValueError, match="only reads"):
        GR.check_read_only(argv)
    with mock.patch.object(GR.subprocess, "Popen") as popen, pytest.raises(ValueError):
        GR.read_only_popen(argv)
    popen.assert_not_called()


def test_every_command_of_the_run_passes_the_guard():
    smi = NvidiaSmi("nvidia-smi")
    commands = [
        ["nvidia-smi"] + DATA["raw_query"]["argv_tail"],
        ["nvidia-smi", "-q", "-d", "POWER"], ["nvidia-smi", "--version"], smi.list_cmd(),
        PowerSampler(smi, fields=DATA["settings"]["sampler_fields"], interval_ms=200).command,
    ]
    for argv in commands:
        assert GR.check_read_only(argv) == argv
    assert DATA["q_power"]["at_load_end"]["command"] == "nvidia-smi -q -d POWER"
