"""Unit tests of the agent level's surfaces (plugins/module_utils/vllm_agent_surfaces.py): the request shapes,
the parsing of vLLM 0.28.0's real event streams (tests/fixtures/vllm-0.28.0/agent_surfaces.json, replayed by a
stand-in SDK client that yields the captured events), what is fed back, the custom tool's outcome and the
surface's own checks. Data-driven: tests/unit/data/vllm_agent_surfaces_cases.yaml.

The requests themselves are sent by the real SDKs against the real vLLM CPU build in molecule e2e.
"""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_agent as va
from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_agent_surfaces as vs
from ansible_collections.gpuhost.inference.tests.doubles.http_double import HttpDouble, JsonHandler
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, case_ids, load_cases

CASES = load_cases("vllm_agent_surfaces_cases.yaml")
with open(os.path.join(FIXTURES, "vllm-0.28.0", "agent_surfaces.json"), encoding="utf-8") as _fh:
    CAPTURE = json.load(_fh)


def sse_events(body):
    """The JSON objects of an SSE body (the data lines), in order."""
    events = []
    for block in body.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                events.append(json.loads(line[6:]))
    return events


class FakeSDK:
    """Stands in for the openai / anthropic module in the error path: the exception classes _error_of looks at."""

    class APIStatusError(Exception):
        def __init__(self, status_code, body):
            super().__init__("HTTP %s" % status_code)
            self.status_code = status_code
            self.body = body

    class APITimeoutError(Exception):
        pass

    class APIConnectionError(Exception):
        pass


class Replay:
    """A client whose create() returns the captured events and keeps the arguments it was called with."""

    def __init__(self, events=None, error=None):
        self.events = events or []
        self.error = error
        self.calls = []
        self.responses = self
        self.beta = self
        self.messages = self

    def create(self, **kwargs):
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return iter(self.events)


def _sampling():
    return {"temperature": 0.7, "top_p": 0.95}


@pytest.mark.parametrize("case", CASES["turns"], ids=case_ids(CASES["turns"]))
def test_a_captured_stream_makes_a_record(case):
    capture = CAPTURE[case["capture"]]
    assert capture["status"] == 200 and capture["content_type"].startswith("text/event-stream")
    client = Replay(sse_events(capture["body"])[:case.get("cut")])
    if case["surface"] == "responses":
        rec = vs.responses_turn(client, FakeSDK, "tiny-qwen3", "rules", [], 48, _sampling(), case.get("choice"), 30)
    else:
        rec = vs.messages_turn(client, FakeSDK, "tiny-qwen3", [], [], 48, _sampling(), case.get("choice"), 30, ["b"])
    want = case["expect"]
    assert rec["error"] == want.get("error"), rec
    assert rec["max_tokens"] == 48  # the budget a forced call's judgement compares the reply with
    for key in ("prompt_tokens", "completion_tokens", "text"):
        if key in want:
            assert rec[key] == want[key], rec
    assert [(c["name"], c["arguments"]) for c in rec["tool_calls"]] == [tuple(c) for c in want.get("calls", [])]
    if want.get("error") is None:
        assert rec["ttft_s"] is not None and rec["e2e_s"] >= rec["ttft_s"]
    if "judge" in want:
        assert vs.judge_forced(rec, case["choice"]) == tuple(want["judge"])


def test_responses_turn_sends_codex_shape():
    client = Replay(sse_events(CAPTURE["responses_text_stream"]["body"]))
    vs.responses_turn(client, FakeSDK, "coder", "the rules", [{"role": "developer", "content": "d"}], 64, _sampling(),
                      None, 30)
    sent = client.calls[0]
    assert sent["instructions"] == "the rules" and sent["store"] is False and sent["stream"] is True
    assert sent["include"] == ["reasoning.encrypted_content"] and sent["tool_choice"] == "auto"
    assert sent["max_output_tokens"] == 64 and sent["parallel_tool_calls"] is True
    assert [t["type"] for t in sent["tools"]] == ["function"] * 4 and "strict" not in sent["tools"][0]
    assert sent["input"][0]["role"] == "developer"


def test_messages_turn_sends_claude_code_shape():
    client = Replay(sse_events(CAPTURE["messages_text_stream"]["body"]))
    system = [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    vs.messages_turn(client, FakeSDK, "coder", system, [], 64, _sampling(), {"type": "any"}, 30, ["x-2025"])
    sent = client.calls[0]
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"} and sent["betas"] == ["x-2025"]
    assert sent["tool_choice"] == {"type": "any"} and sent["stream"] is True and sent["max_tokens"] == 64
    assert sent["extra_body"] == _sampling() and "temperature" not in sent
    assert sorted(sent["tools"][0]) == ["description", "input_schema", "name"]


@pytest.mark.parametrize("case", CASES["errors"], ids=case_ids(CASES["errors"]))
def test_a_captured_error_is_the_servers_text(case):
    capture = CAPTURE[case["capture"]]
    body = json.loads(capture["body"])
    client = Replay(error=FakeSDK.APIStatusError(capture["status"], body))
    if case["surface"] == "responses":
        rec = vs.responses_turn(client, FakeSDK, "m", "r", [], 8, _sampling(), None, 30)
    else:
        rec = vs.messages_turn(client, FakeSDK, "m", [], [], 8, _sampling(), None, 30, [])
    assert rec["error"] == str(capture["status"])
    assert case["message_starts"] in rec["message"] and rec["message"].startswith(case["message_starts"]), rec


def test_feeding_back_a_forced_call():
    rec = {"text": "looking", "tool_calls": [{"id": "call_1", "name": "read_file", "arguments": '{"path": "a.py"}'},
                                             {"id": None, "name": "run_command", "arguments": '{"command": '}]}
    history = []
    vs._feed_responses(history, rec, 3, 1)  # pylint: disable=protected-access
    assert [h.get("type") for h in history] == ["message", "function_call", "function_call_output",
                                                "function_call", "function_call_output"]
    assert history[1]["arguments"] == '{"path":"a.py"}' and history[3]["arguments"] == "{}"
    assert history[4]["call_id"] == "call_3_1_1" and history[4]["output"].startswith("error:")
    history = []
    vs._feed_messages(history, rec, 3, 1)  # pylint: disable=protected-access
    assert [h["role"] for h in history] == ["assistant", "user"]
    assert [b["type"] for b in history[0]["content"]] == ["text", "tool_use", "tool_use"]
    assert history[0]["content"][1]["input"] == {"path": "a.py"}
    assert [b["is_error"] for b in history[1]["content"]] == [False, True]
    assert history[1]["content"][1]["tool_use_id"] == "toolu_3_1_1"


@pytest.mark.parametrize("case", CASES["custom_tool"], ids=case_ids(CASES["custom_tool"]))
def test_custom_tool_outcome(case):
    assert vs.classify_custom(case["rec"], case.get("without")) == case["outcome"]
    assert case["outcome"] in vs.CUSTOM_TOOL_OUTCOMES


@pytest.mark.parametrize("case", CASES["problems"], ids=case_ids(CASES["problems"]))
def test_surface_problems(case):
    assert vs.surface_problems(case["result"]) == case["expect"]


@pytest.mark.parametrize("surface, session, label", [
    ("chat", 0, "required"), ("chat", 1, "function:read_file"), ("responses", 0, "required"),
    ("responses", 1, "function:read_file"), ("messages", 0, "any"), ("messages", 1, "tool:read_file"),
])
def test_forced_choice_in_each_surfaces_words(surface, session, label):
    assert va.choice_label(vs.forced_choice(surface, session)) == label


def test_run_surface_refuses_an_unknown_surface():
    with pytest.raises(ValueError, match="surface must be one of chat, responses, messages"):
        vs.run_surface("completions", FakeSDK, "http://127.0.0.1:8000", "m")


@pytest.mark.parametrize("statuses, key, accepted", [
    ({"x-api-key": 401, "bearer": 200}, "k", ["bearer"]),           # vLLM 0.28.0 with --api-key
    ({"x-api-key": 200, "bearer": 200}, None, ["x-api-key", "bearer"]),  # no key: any header
    ({"x-api-key": 401, "bearer": 401}, "wrong", []),
])
def test_auth_probe_sends_each_header_alone(statuses, key, accepted):
    sent = []

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802
            self.read_json()
            kind = "bearer" if "Authorization" in self.headers else "x-api-key"
            sent.append((self.path, kind, "Authorization" in self.headers, "x-api-key" in self.headers,
                         self.headers.get("anthropic-version")))
            self.send_json(statuses[kind], {} if statuses[kind] == 200 else {"error": "Unauthorized"})

    with HttpDouble(Handler) as double:
        got = vs.auth_probe(double.url + "/", "m", key)
    assert sent == [("/v1/messages/count_tokens", "x-api-key", False, True, "2023-06-01"),
                    ("/v1/messages/count_tokens", "bearer", True, False, "2023-06-01")]
    assert got == {"x-api-key": statuses["x-api-key"], "bearer": statuses["bearer"], "accepted": accepted,
                   "key_configured": bool(key)}
