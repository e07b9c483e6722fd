"""Unit tests of the agent level's pure parts (plugins/module_utils/vllm_agent.py): sizing a session to
the context, the prefix-cache counters of /metrics, the judgement of a forced tool call, the summary.

The requests themselves are sent by the real OpenAI SDK against the real vLLM CPU build in molecule e2e.
"""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_agent as va
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

METRICS = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-qwen3"} 4096.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny-qwen3"} 1024.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny-qwen3"} 1024.0
vllm:num_requests_running{engine="0",model_name="tiny-qwen3"} 0.0
"""


def test_prefix_cache_counters_sum_the_engines():
    assert va.prefix_cache_counters(METRICS) == {"hits": 2048.0, "queries": 4096.0}
    assert va.prefix_cache_counters("vllm:num_requests_running 0\n") is None
    assert va.prefix_cache_counters(None) is None


@pytest.mark.parametrize("before, after, rate", [
    ({"hits": 0, "queries": 0}, {"hits": 750, "queries": 1000}, 0.75),
    ({"hits": 100, "queries": 200}, {"hits": 100, "queries": 200}, None),   # no query in the window
    (None, {"hits": 1, "queries": 2}, None),
])
def test_hit_rate_is_the_window_delta(before, after, rate):
    assert va.hit_rate(before, after) == rate


def _measure(per_section, base):
    return lambda sections: base + per_section * sections


@pytest.mark.parametrize("max_model_len, turns, max_tokens, system_tokens, want_tokens", [
    (131072, 4, 128, 1500, 128),   # a real box: the asked size
    (2048, 4, 128, 1500, 64),      # the lab profile: a third of the context for the system prompt, replies halved
    (1024, 4, 128, 1500, 16),      # too small: the replies are halved, the forced call gets what is left
])
def test_plan_fits_the_context(max_model_len, turns, max_tokens, system_tokens, want_tokens):
    plan = va.plan_session(max_model_len, turns, max_tokens, system_tokens, _measure(40, 300))
    assert plan["fits"] is True
    assert plan["budget_tokens"] <= max_model_len
    assert plan["max_tokens"] == want_tokens
    assert plan["system_tokens"] <= max(system_tokens, 300)
    assert max_tokens >= plan["tool_max_tokens"] >= 16 or plan["tool_max_tokens"] <= va.TOOL_TURN_MIN_TOKENS
    if max_model_len >= 100000:
        assert plan["system_tokens"] > system_tokens - 40  # as close to the asked size as a section allows
        assert plan["tool_max_tokens"] == va.TOOL_TURN_MIN_TOKENS


def test_plan_without_tokenize_estimates():
    plan = va.plan_session(4096, 4, 128, 1500, lambda sections: None)
    assert plan["fits"] is True and plan["sections"] > 0


def test_system_prompt_grows_with_sections():
    assert len(va.system_prompt(3)) > len(va.system_prompt(1)) > len(va.system_prompt(0)) > 100


def _rec(**kw):
    rec = {"error": None, "message": None, "text": "", "tool_calls": []}
    rec.update(kw)
    return rec


NAMED = {"type": "function", "function": {"name": "read_file"}}


@pytest.mark.parametrize("rec, choice, ok, detail", [
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}]), "required", True, "read_file(path)"),
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}]), NAMED, True, "read_file(path)"),
    (_rec(tool_calls=[{"name": "run_command", "arguments": '{"command": "ls"}'}]), NAMED, False, "named read_file"),
    (_rec(tool_calls=[{"name": "rm_rf", "arguments": "{}"}]), "required", False, "not an offered tool"),
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": '}]), "required", False, "are not JSON"),
    (_rec(tool_calls=[{"name": "read_file", "arguments": "[1]"}]), "required", False, "not a JSON object"),
    # Cut at the turn's budget (the demo's messages turn: a 1,010-character path, vLLM's closing of the cut JSON
    # invalid): the server forced the call, the model wrote past the budget.
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": "x  ", "'}], completion_tokens=512, max_tokens=512),
     NAMED, True, "read_file(cut at the 512-token budget"),
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": "x  ", "'}], completion_tokens=511, max_tokens=512),
     NAMED, False, "are not JSON"),
    (_rec(tool_calls=[{"name": "read_file", "arguments": '{"path": '}], completion_tokens=512), "required", False,
     "are not JSON"),
    (_rec(tool_calls=[{"name": "run_command", "arguments": '{"command": '}], completion_tokens=64, max_tokens=64), NAMED,
     False, "named read_file"),
    (_rec(text="I will read it"), "required", False, "no tool_calls in the answer"),
    (_rec(error="400", message='"auto" tool choice requires --enable-auto-tool-choice'), "required", False,
     "the request failed (400)"),
])
def test_judge_forced(rec, choice, ok, detail):
    got_ok, got_detail = va._judge_forced(rec, choice)  # pylint: disable=protected-access
    assert got_ok is ok
    assert detail in got_detail


SESSIONS = load_cases("vllm_agent_session_cases.yaml", "sessions")


@pytest.mark.parametrize("case", SESSIONS, ids=case_ids(SESSIONS))
def test_session_log_records_the_turns_and_judges_the_forced_one(case):
    log = va.SessionLog(1, {"turns": case["turns"], "tool_turn": case["tool_turn"]}, va._judge_forced)  # pylint: disable=protected-access
    sent = [_rec(error=turn.get("error"), message="boom" if turn.get("error") else None,
                 tool_calls=turn.get("tool_calls", [])) for turn in case["sent"]]
    goes_on = [log.add(rec, n, turn["choice"]) for n, (rec, turn) in enumerate(zip(sent, case["sent"]))]
    result = log.result()
    want = case["expect"]
    assert goes_on == want["goes_on"]
    assert [t["tool_choice"] for t in result["turns"]] == want["labels"]
    assert [(t["session"], t["turn"]) for t in result["turns"]] == [(1, n + 1) for n in range(len(sent))]
    if want["forced"] is None:
        assert result["forced"] is None
    else:
        forced = dict(result["forced"])
        assert want["forced"]["detail"] in forced.pop("detail"), result["forced"]
        assert forced == dict({"session": 1}, **{k: v for k, v in want["forced"].items() if k != "detail"})


def _turn(session, turn, ttft, error=None, prompt=100):
    return {"session": session, "turn": turn, "ttft_s": ttft, "error": error, "message": "boom" if error else None,
            "prompt_tokens": prompt, "completion_tokens": 10, "reasoning_chars": 0}


def test_summary_splits_first_and_later_turns_and_keeps_the_server_text():
    out = {
        0: {"turns": [_turn(0, 1, 0.2), _turn(0, 2, 0.1, prompt=300)],
            "forced": {"session": 0, "ok": True, "detail": "read_file(path)"}},
        1: {"turns": [_turn(1, 1, 0.4), _turn(1, 2, None, error="400")],
            "forced": {"session": 1, "ok": False, "detail": "the request failed"}},
    }
    conf = {"turns": 2, "max_tokens": 64, "temperature": 0.7, "top_p": 0.95}
    res = va.summarize_agent(out, {"system_tokens": 50}, {"hits": 0, "queries": 0}, {"hits": 30, "queries": 60}, 1.5, conf)
    assert (res["requests"], res["ok"], res["errors_total"], res["errors"]) == (4, 3, 1, {"400": 1})
    assert res["error_messages"] == ["HTTP 400: boom"]
    assert res["ttft_first_s"]["n"] == 2 and res["ttft_first_s"]["p50"] == pytest.approx(0.3)
    assert res["ttft_later_s"]["n"] == 1 and res["ttft_later_s"]["p50"] == pytest.approx(0.1)
    assert res["prompt_tokens_last_turn"] == 300
    assert res["forced_ok"] == 1
    assert res["prefix_cache"]["hit_rate"] == 0.5


class FakeSDK:
    """Stands in for the openai / anthropic module: their exception classes (APITimeoutError is an
    APIConnectionError in both SDKs)."""

    class APIStatusError(Exception):
        pass

    class APIConnectionError(Exception):
        pass

    class APITimeoutError(APIConnectionError):
        pass


RETRY_CASES = load_cases("vllm_agent_retry_cases.yaml", "cases")
_RAISE = {"connection": FakeSDK.APIConnectionError("Connection error."),
          "timeout": FakeSDK.APITimeoutError("Request timed out."), "status": FakeSDK.APIStatusError("HTTP 500")}


@pytest.mark.parametrize("case", RETRY_CASES, ids=case_ids(RETRY_CASES))
def test_open_stream_retries_hiccups_only(case):
    outcomes = iter(case["raises"])
    calls = []
    pauses = []

    def create(**kwargs):
        calls.append(kwargs)
        outcome = next(outcomes)
        if outcome != "ok":
            raise _RAISE[outcome]
        return "stream"

    rec = {"retries": 0}
    expect = case["expect"]
    if expect["error"] is None:
        stream, t0 = va.open_stream(create, {"stream": True}, FakeSDK, rec, sleep=pauses.append)
        assert stream == "stream" and t0 > 0
    else:
        with pytest.raises(getattr(FakeSDK, expect["error"])) as info:
            va.open_stream(create, {"stream": True}, FakeSDK, rec, sleep=pauses.append)
        assert type(info.value).__name__ == expect["error"]
    assert rec["retries"] == expect["retries"] and len(calls) == expect["calls"]
    assert calls == [{"stream": True}] * len(calls)  # the same request each time
    # the SDKs' pauses, less up to 25 % jitter
    assert len(pauses) == len(expect["pauses"])
    for got, full in zip(pauses, expect["pauses"]):
        assert 0.75 * full <= got <= full


def test_summary_counts_the_retries_apart_from_the_errors():
    turns = [dict(_turn(0, 1, 0.2), retries=1), dict(_turn(0, 2, 0.1), retries=0), dict(_turn(0, 3, None, error="connection"), retries=2)]
    conf = {"turns": 3, "max_tokens": 64, "temperature": 0.7, "top_p": 0.95}
    res = va.summarize_agent({0: {"turns": turns, "forced": None}}, {}, None, None, 1.0, conf)
    assert (res["requests"], res["errors_total"], res["retries"]) == (3, 1, 3)
