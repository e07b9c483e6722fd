"""Unit tests of the vllm_verify filters (plugins/filter/vllm_verify.py): gates, power section, the
profile's GPUs, the platform and the sampled-level input checks.

Data-driven: the cases are in tests/unit/data/vllm_verify_cases.yaml.
"""
from __future__ import annotations

import copy
import os

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.inference.plugins.filter import vllm_verify as vf

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, load_cases, case_ids
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases

CASES = load_cases("vllm_verify_cases.yaml")


@pytest.mark.parametrize("case", CASES["gates"], ids=case_ids(CASES["gates"]))
def test_gates(case):
    inputs = copy.deepcopy(CASES["base_inputs"])
    inputs.update(copy.deepcopy(case["inputs"]))
    gates = vf.vllm_verify_gates(inputs)
    by_name = {g["name"]: g for g in gates}
    assert len(by_name) == len(gates), "a gate is there twice"
    for gate in gates:
        assert set(gate) == {"name", "ok", "value", "threshold", "detail"}
        assert isinstance(gate["ok"], bool)
    for name, want in case.get("expect", {}).items():
        assert name in by_name, (name, gates)
        gate = by_name[name]
        assert gate["ok"] is want["ok"], gate
        for key in ("value", "threshold"):
            if key in want:
                assert gate[key] == want[key], gate
        if "detail_contains" in want:
            assert want["detail_contains"] in gate["detail"], gate
    for name in case.get("absent", []):
        assert name not in by_name, by_name[name]


def test_gates_keep_their_order_and_can_be_extended(monkeypatch):
    names = [g["name"] for g in vf.vllm_verify_gates(dict(CASES["base_inputs"], min_single_stream_tps=1,
                                                          min_aggregate_tps=1, soak_seconds=5))]
    assert names == ["min_full_context_concurrency", "min_single_stream_tps", "min_aggregate_tps", "max_errors",
                     "sampled", "context", "stability", "soak"]
    names = [g["name"] for g in vf.vllm_verify_gates(dict(CASES["base_inputs"], agent_enabled=True))]
    assert names == ["min_full_context_concurrency", "max_errors", "sampled", "context", "agent", "stability"]
    monkeypatch.setattr(vf, "GATES", vf.GATES + (lambda i: vf._gate("health", i.get("healthy") is True,  # pylint: disable=protected-access
                                                                    i.get("healthy"), True, "after the probe"),))
    gates = vf.vllm_verify_gates(dict(CASES["base_inputs"], healthy=False))
    assert gates[-1] == {"name": "health", "ok": False, "value": False, "threshold": True, "detail": "after the probe"}


def test_gates_refuse_a_non_dict():
    with pytest.raises(AnsibleFilterError, match="vllm_verify_gates expects probe as a dict"):
        vf.vllm_verify_gates(dict(CASES["base_inputs"], probe="x"))


@pytest.mark.parametrize("case", CASES["power"]["cases"], ids=case_ids(CASES["power"]["cases"]))
def test_power(case):
    inputs = copy.deepcopy(CASES["power"]["base"])
    inputs.update(copy.deepcopy(case["inputs"]))
    power = vf.vllm_verify_power(inputs)
    assert power["power_source"] in vf.POWER_SOURCES
    for key, value in case["expect"].items():
        assert power[key] == value, (key, power)
    if "reason_contains" in case:
        assert case["reason_contains"] in power["reason"], power["reason"]
    assert power["cap_applied"] is (power["reason"] is None)


@pytest.mark.parametrize("case", CASES["gpu_indices"], ids=case_ids(CASES["gpu_indices"]))
def test_gpu_indices(case):
    args = [case["settings"], case["env"]]
    if "present" in case:
        args.append(case["present"])
    assert vf.vllm_verify_gpu_indices(*args) == case["expect"]


@pytest.mark.parametrize("case", CASES["platform"], ids=case_ids(CASES["platform"]))
def test_platform(case):
    assert vf.vllm_verify_platform(case["text"]) == case["expect"]


def test_platform_of_the_real_cpu_capture():
    path = os.path.join(FIXTURES, "vllm-0.28.0", "startup.log")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    # the capture starts after the platform line; the filter must not invent one
    assert vf.vllm_verify_platform(text) in (None, "cpu")


@pytest.mark.parametrize("case", CASES["sampling_errors"], ids=case_ids(CASES["sampling_errors"]))
def test_sampling_errors(case):
    errors = vf.vllm_verify_sampling_errors(case["values"])
    if "expect" in case:
        assert errors == case["expect"]
    for fragment in case.get("contains", []):
        assert any(fragment in e for e in errors), (fragment, errors)
    if "count" in case:
        assert len(errors) == case["count"], errors


@pytest.mark.parametrize("case", CASES["var_errors"], ids=case_ids(CASES["var_errors"]))
def test_var_errors(case):
    assert_errors_match(vf.vllm_verify_var_errors(dict(CASES["var_errors_base"], **case["values"])), case["expect_errors"])


@pytest.mark.parametrize("name", ["verify_base_url_ipv6_unbracketed", "verify_concurrency_absurd"])
def test_var_errors_matrix_case_gets_the_message_it_looks_for(name):
    bad, expected = matrix_cases()[name]
    errors = vf.vllm_verify_var_errors(dict(CASES["var_errors_base"], **bad))
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "matrix case %s looks for %r, the message is %r" % (name, missing, errors[0])


@pytest.mark.parametrize("case", CASES["agent_errors"], ids=case_ids(CASES["agent_errors"]))
def test_agent_errors(case):
    errors = vf.vllm_verify_agent_errors(case["values"])
    if "expect" in case:
        assert errors == case["expect"]
    for fragment in case.get("contains", []):
        assert any(fragment in e for e in errors), (fragment, errors)


def test_agent_report_of_a_level():
    agent = {"sessions": 4, "turns": 4, "requests": 16, "errors_total": 0, "errors": {}, "error_messages": [],
             "ttft_first_s": {"p50": 0.12, "p95": 0.2, "max": 0.21, "n": 4},
             "ttft_later_s": {"p50": 0.08, "p95": 0.1, "max": 0.1, "n": 12},
             "forced_tool_calls": [{"session": 0, "ok": True}, {"session": 1, "ok": False}],
             "prefix_cache": {"hit_rate": 0.75}, "prompt_tokens_last_turn": 1500, "plan": {"system_tokens": 600}}
    report = vf.vllm_verify_agent_report(agent, True)
    assert report["ran"] is True
    assert report["ttft_first_ms"] == {"p50": 120.0, "p95": 200.0, "max": 210.0, "n": 4}
    assert report["ttft_later_ms"]["p95"] == 100.0
    assert (report["forced"], report["forced_ok"]) == (2, 1)
    assert report["prefix_cache_hit_rate"] == 0.75
    assert report["system_tokens"] == 600
    assert vf.vllm_verify_agent_report(agent, False) == {"enabled": False}
    assert vf.vllm_verify_agent_report({"failed": True, "msg": "no SDK"}, True)["ran"] is False


def test_filters_are_registered():
    assert set(vf.FilterModule().filters()) == {
        "vllm_verify_gates", "vllm_verify_power", "vllm_verify_platform", "vllm_verify_gpu_indices",
        "vllm_verify_sampling_errors", "vllm_verify_agent_errors", "vllm_verify_agent_report", "vllm_verify_var_errors",
        "vllm_verify_agent_by_surface", "vllm_verify_agent_surfaces_report"}


def test_agent_results_by_surface_from_the_loop():
    results = [{"item": "chat", "requests": 16}, {"item": "messages", "failed": True, "msg": "no SDK"},
               {"item": "bogus"}, "not a dict"]
    assert vf.vllm_verify_agent_by_surface(results) == {
        "chat": {"item": "chat", "requests": 16}, "messages": {"item": "messages", "failed": True, "msg": "no SDK"}}
    assert vf.vllm_verify_agent_by_surface(None) == {}


def test_agent_surfaces_report_a_row_per_enabled_surface_in_order():
    results = {"messages": {"surface": "messages", "requests": 16, "sdk": "anthropic", "sdk_version": "2.17.0",
                            "path": "/v1/messages?beta=true", "checks": {"auth": {"accepted": ["bearer"]}},
                            "problems": ["count_tokens failed: 404"]},
               "chat": {"requests": 16, "openai_version": "3.63.0", "reasoning_field": "reasoning"}}
    rows = vf.vllm_verify_agent_surfaces_report(results, ["messages", "responses", "chat"], True)
    assert [r["surface"] for r in rows] == ["chat", "responses", "messages"]
    assert [r["gate"] for r in rows] == ["agent", "agent_responses", "agent_messages"]
    assert rows[0]["sdk_version"] == "3.63.0" and rows[0]["reasoning_field"] == "reasoning"
    assert rows[1]["ran"] is False and rows[1]["requests"] == 0
    assert rows[2]["ran"] is True and rows[2]["checks"]["auth"]["accepted"] == ["bearer"]
    assert rows[2]["problems"] == ["count_tokens failed: 404"] and rows[2]["path"] == "/v1/messages?beta=true"
    assert vf.vllm_verify_agent_surfaces_report(results, ["chat"], False) == []
