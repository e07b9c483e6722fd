# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the vllm_probe module (plugins/modules/vllm_probe.py).

The server is SseServerDouble (tests/doubles/sse_server.py), a TEST DOUBLE of vLLM's OpenAI server
started in a thread: it answers /v1/models, /version and streamed /v1/completions with the framing
of the real 0.28.0 captures (tests/fixtures/vllm-0.28.0/), and can be told to put several tokens in
a chunk, leave out usage, fail requests with a status, stall, die mid-stream, or demand an API key.
The client's own parts are tested in tests/unit/plugins/module_utils/.
"""
from __future__ import annotations

import json
import os
import socket
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_http
from ansible_collections.gpuhost.inference.plugins.modules import vllm_probe
from ansible_collections.gpuhost.inference.tests.doubles.sse_server import MODEL, SseServerDouble
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json
from ansible_collections.gpuhost.inference.tests.unit.paths import SMI_MOCK


# ------------------------------------------------------------------ running the module

def run_module(args):
    """-> (failed, result)."""
    args = dict(args)
    args.setdefault("nvidia_smi_path", "/nonexistent/nvidia-smi")
    with patch_module_args(args), mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json):
        with pytest.raises((ExitJson, FailJson)) as info:
            vllm_probe.main()
    return info.type is FailJson, info.value.args[0]


def probe(double, **args):
    args.setdefault("base_url", double.url)
    args.setdefault("concurrency", [1])
    args.setdefault("max_tokens", 16)
    args.setdefault("prompt_words", 8)
    args.setdefault("request_timeout", 10)
    args.setdefault("timeout", 60)
    return run_module(args)


# ------------------------------------------------------------------ decode probe


def test_usage_counts_tokens_not_chunks():
    with SseServerDouble(tokens_per_chunk=4) as double:
        failed, result = probe(double, max_tokens=256)
    assert not failed, result
    level = result["levels"][0]
    assert level["output_tokens"] == 256
    assert level["ok"] == 1 and level["errors"] == {}
    assert level["usage_missing"] == 0
    res = double.completions()
    assert len(res) == 1
    assert result["changed"] is False


def test_without_usage_chunks_are_counted_and_flagged():
    with SseServerDouble(send_usage=False, tokens_per_chunk=2) as double:
        failed, result = probe(double, max_tokens=20)
    assert not failed, result
    assert result["levels"][0]["output_tokens"] == 10
    assert result["levels"][0]["usage_missing"] == 1


def test_decode_speed_follows_the_chunk_pace():
    # 21 tokens, 20 gaps of 20 ms: about 50 tok/s (generous bounds: a shared CI machine)
    with SseServerDouble(chunk_delay_s=0.02) as double:
        failed, result = probe(double, max_tokens=21)
    assert not failed, result
    tps = result["levels"][0]["decode_tps"]["p50"]
    assert 10 < tps < 60


def test_payload_is_the_contract():
    with SseServerDouble() as double:
        failed, result = probe(double, max_tokens=7, prompt_words=5)
        body = double.completions()[0]["body"]
    assert not failed, result
    assert body["model"] == MODEL
    assert body["max_tokens"] == 7
    assert body["temperature"] == 0
    assert body["ignore_eos"] is True
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert isinstance(body["prompt"], str)
    assert len(body["prompt"].split()) == 5 + 3  # the three-word prefix, then 5 words


def test_sampled_levels_send_what_clients_send():
    with SseServerDouble(chunk_delay_s=0.002) as double:
        failed, result = probe(double, concurrency=[1, 2], sampled_concurrency=[3], rounds=2, max_tokens=9,
                               temperature=0.6, top_p=0.9, seed=100)
        bodies = [r["body"] for r in double.completions()]
    assert not failed, result
    # levels stays one entry per greedy level; the sampled ones are apart
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 2]
    assert len(result["sampled"]) == 1
    level = result["sampled"][0]
    assert (level["concurrency"], level["temperature"], level["top_p"], level["seed"]) == (3, 0.6, 0.9, 100)
    assert level["requests"] == 6 and level["ok"] == 6 and level["output_tokens"] == 54
    greedy = [b for b in bodies if b["temperature"] == 0]
    sampled = [b for b in bodies if b["temperature"] != 0]
    assert len(greedy) == 6 and len(sampled) == 6
    assert all("top_p" not in b and "seed" not in b for b in greedy)
    for body in sampled:
        assert body["temperature"] == 0.6 and body["top_p"] == 0.9
        assert body["ignore_eos"] is True and body["stream"] is True and body["max_tokens"] == 9
        assert body["stream_options"] == {"include_usage": True}
    # seed + request number: the same seeds every run, one per request
    assert sorted(b["seed"] for b in sampled) == list(range(100, 106))
    by_seed = {b["seed"]: b["prompt"].split()[2] for b in sampled}
    assert by_seed[100] == "s3-0]" and by_seed[105] == "s3-5]"
    prefixes = {" ".join(b["prompt"].split()[:3]) for b in bodies}
    assert len(prefixes) == 12  # unique over greedy and sampled
    assert "3 sampled streams" in result["msg"]


def test_sampled_errors_are_counted_in_errors_total():
    # the greedy level takes the first status (200), the sampled level the two 500s
    with SseServerDouble(statuses=[None, 500, 500]) as double:
        failed, result = probe(double, concurrency=[1], sampled_concurrency=[2])
    assert not failed, result
    assert result["levels"][0]["errors"] == {}
    assert result["sampled"][0]["errors"] == {"500": 2}
    assert result["errors_total"] == 2


def test_no_sampled_level_by_default():
    with SseServerDouble() as double:
        failed, result = probe(double)
        bodies = [r["body"] for r in double.completions()]
    assert not failed, result
    assert result["sampled"] == []
    assert [b["temperature"] for b in bodies] == [0]


def test_levels_run_at_their_concurrency_with_unique_prefixes():
    with SseServerDouble(chunk_delay_s=0.01) as double:
        failed, result = probe(double, concurrency=[1, 4], rounds=2, max_tokens=10)
        prompts = [r["body"]["prompt"] for r in double.completions()]
        max_inflight = double.max_inflight
    assert not failed, result
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 4]
    assert [lv["requests"] for lv in result["levels"]] == [2, 8]
    assert [lv["output_tokens"] for lv in result["levels"]] == [20, 80]
    assert max_inflight == 4
    assert len(prompts) == 10
    prefixes = [" ".join(p.split()[:3]) for p in prompts]
    assert len(set(prefixes)) == 10
    lv = result["levels"][1]
    assert lv["aggregate_tps"] == pytest.approx(80 / lv["wall_s"], rel=1e-3)
    assert lv["ttft_s"]["n"] == 8 and lv["decode_tps"]["n"] == 8
    assert result["errors_total"] == 0


def test_a_stream_keeps_its_connection_alive():
    with SseServerDouble() as double:
        failed, result = probe(double, concurrency=[2], rounds=3)
        clients = set(double.clients)
    assert not failed, result
    assert result["levels"][0]["ok"] == 6
    assert len(clients) == 2  # one connection per stream, reused for its three requests


def test_a_server_that_closes_each_connection():
    with SseServerDouble(close_connections=True) as double:
        failed, result = probe(double, concurrency=[2], rounds=3)
        clients = set(double.clients)
    assert not failed, result
    assert result["levels"][0]["ok"] == 6 and result["levels"][0]["output_tokens"] == 96
    assert len(clients) == 6


def test_a_kept_alive_connection_the_server_dropped_is_retried():
    with SseServerDouble(silent_close=True) as double:
        failed, result = probe(double, concurrency=[2], rounds=3)
        clients = set(double.clients)
        posts = len(double.completions())
    assert not failed, result
    level = result["levels"][0]
    assert level["ok"] == 6 and level["errors"] == {}
    assert posts == 6  # each request reached the server once
    assert len(clients) == 6


def test_a_hiccup_is_retried_and_reported(monkeypatch):
    # issue 45: the server hangs up on one kept-alive connection without answering (the race every client
    # meets); the request is sent again as the SDKs do, the run counts the retry, and the errors gate passes.
    monkeypatch.setattr(vllm_http, "INITIAL_RETRY_DELAY", 0.01)
    with SseServerDouble(drop_requests=[3]) as double:
        failed, result = probe(double, concurrency=[2], rounds=3)
        dropped = list(double.dropped)
        posts = len(double.completions())
    assert not failed, result
    level = result["levels"][0]
    assert level["ok"] == 6 and level["errors"] == {} and level["retries"] == 1
    assert result["errors_total"] == 0 and result["retries_total"] == 1
    assert "0 errors, 1 transport retries" in result["msg"]
    assert posts == 7 and len(dropped) == 1 and dropped[0][2] > 0  # dropped on a connection that had served one
    # the gate's side: tests/unit/plugins/filter/test_vllm_verify_retry.py (ansible-test keeps filters out of module tests)


def test_a_level_of_slow_streams_has_no_burst():
    with SseServerDouble(chunk_delay_s=0.01) as double:
        failed, result = probe(double, concurrency=[2], max_tokens=12)
    assert not failed, result
    assert result["levels"][0]["burst_streams"] == 0
    assert result["levels"][0]["decode_tps"]["n"] == 2


def test_errors_are_counted_by_status():
    with SseServerDouble(statuses=[503, 503, 500]) as double:
        failed, result = probe(double, concurrency=[4])
    assert not failed, result
    level = result["levels"][0]
    assert level["errors"] == {"500": 1, "503": 2}
    assert level["ok"] == 1
    assert level["output_tokens"] == 16
    assert result["errors_total"] == 3
    assert "double says 503" in level["error_messages"]


def test_a_stalled_request_is_a_timeout():
    with SseServerDouble(first_delay_s=1.5) as double:
        failed, result = probe(double, concurrency=[2], request_timeout=0.3)
    assert not failed, result
    assert result["levels"][0]["errors"] == {"timeout": 2}
    assert result["levels"][0]["ttft_s"]["n"] == 0


def test_a_stream_cut_short_is_an_error():
    with SseServerDouble(die_after_chunks=3) as double:
        failed, result = probe(double, concurrency=[1])
    assert not failed, result
    errors = result["levels"][0]["errors"]
    assert sum(errors.values()) == 1
    assert set(errors) <= {"incomplete", "connection"}
    assert result["levels"][0]["output_tokens"] == 0


def test_an_error_event_in_the_stream_is_counted():
    with SseServerDouble(stream_error_after=2) as double:
        failed, result = probe(double)
    assert not failed, result
    assert result["levels"][0]["errors"] == {"stream_error": 1}


# ------------------------------------------------------------------ context probe


def test_context_probe_ok_needs_nothing_more():
    with SseServerDouble(max_model_len=512) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
    assert not failed, result
    assert result["context"]["ok"] is True and result["context"]["reason"] is None
    assert result["context"]["fit"]["complete"] is True


def test_context_probe_fit_and_over():
    with SseServerDouble(max_model_len=512) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
        ctx_bodies = [r["body"] for r in double.completions() if isinstance(r["body"]["prompt"], list)]
    assert not failed, result
    assert result["max_model_len"] == 512  # read from /v1/models
    ctx = result["context"]
    assert ctx["ok"] is True
    assert ctx["limit"] == 512
    assert ctx["fit"]["status"] == 200 and ctx["fit"]["prompt_tokens"] == 448
    assert ctx["fit"]["output_tokens"] == 64
    assert ctx["fit"]["ttft_s"] > 0
    assert ctx["over"]["status"] == 400
    assert ctx["over"]["limit"] == 512
    assert ctx["over"]["requested"] == 577
    assert ctx["over"]["prompt_tokens"] == 513 and ctx["over"]["sent_tokens"] == 513
    assert "maximum context length is 512 tokens" in ctx["over"]["message"]
    # the whole context with max_tokens left for the output, then one token over the context itself
    assert [len(b["prompt"]) for b in ctx_bodies] == [448, 513]
    assert set(ctx_bodies[0]["prompt"]) <= set(range(11, 31))
    assert result["errors_total"] == 0  # the expected 400 is not an error


def test_context_probe_passes_on_vllm_0_32s_length_rule():
    # vLLM 0.32.0 answers a prompt that fits with the output cut to what the context leaves (0.28.0 refused it): the
    # probe's over prompt is over the context itself, which both refuse naming the limit (the upgrade proof's context
    # gate failed on 0.32.0 with the old limit - max_tokens + 1 prompt: "one token over got 200, not 400")
    with SseServerDouble(max_model_len=512, clamp_output=True) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
    assert not failed, result
    ctx = result["context"]
    assert ctx["ok"] is True, ctx["reason"]
    assert ctx["fit"]["output_tokens"] == 64
    assert ctx["over"]["status"] == 400 and ctx["over"]["limit"] == 512 and ctx["over"]["prompt_tokens"] == 513
    assert ctx["over"]["output_tokens"] is None and "even without any output tokens" in ctx["over"]["message"]


def test_context_probe_a_limit_not_enforced_is_reported():
    # the module is told 256, the server takes 2048: the one-over prompt is answered, not refused
    with SseServerDouble(max_model_len=2048) as double:
        failed, result = probe(double, context_probe=True, max_model_len=256, max_tokens=16)
    assert not failed, result
    assert result["context"]["ok"] is False
    assert result["context"]["over"]["status"] == 200
    assert result["context"]["over"]["limit"] is None


def test_context_probe_a_broken_fit_stream_fails_it():
    # the fitting prompt is answered 200, then the stream breaks: a status-only check passed this
    with SseServerDouble(max_model_len=512, die_after_chunks=3, die_on_list_prompt=True) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
    assert not failed, result
    ctx = result["context"]
    assert ctx["fit"]["status"] == 200
    assert ctx["fit"]["complete"] is False and ctx["fit"]["ok"] is False
    assert ctx["over"]["ok"] is True
    assert ctx["ok"] is False
    assert "stream broke" in ctx["reason"]
    assert result["levels"][0]["errors"] == {}  # only the context prompt's stream broke


def test_context_probe_needs_exactly_max_tokens():
    with SseServerDouble(max_model_len=512, short_by=1) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
    assert not failed, result
    ctx = result["context"]
    assert ctx["fit"]["complete"] is True and ctx["fit"]["output_tokens"] == 63
    assert ctx["fit"]["expected_tokens"] == 64 and ctx["fit"]["ok"] is False
    assert ctx["ok"] is False
    assert ctx["reason"] == "the fitting prompt got 63 output tokens, not 64"


def test_context_probe_a_400_naming_another_limit_fails_it():
    with SseServerDouble(max_model_len=512, limit_in_message=4096) as double:
        failed, result = probe(double, context_probe=True, max_tokens=64)
    assert not failed, result
    ctx = result["context"]
    assert ctx["fit"]["ok"] is True
    assert ctx["over"]["status"] == 400 and ctx["over"]["limit"] == 4096
    assert ctx["over"]["ok"] is False and ctx["ok"] is False
    assert "naming the limit 4096, not 512" in ctx["reason"]


def test_context_probe_needs_max_tokens_below_the_limit():
    with SseServerDouble(max_model_len=16) as double:
        failed, result = probe(double, context_probe=True, max_tokens=16)
    assert failed
    assert "max_tokens (16) < max_model_len (16)" in result["msg"]


# ------------------------------------------------------------------ the module's edges


def test_check_mode_sends_nothing():
    with SseServerDouble() as double:
        failed, result = probe(double, _ansible_check_mode=True, context_probe=True, soak_seconds=5)
        seen = list(double.requests)
    assert not failed
    assert result["skipped"] is True
    assert result["changed"] is False
    assert "no load" in result["msg"]
    assert seen == []


def test_no_server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    failed, result = run_module({"base_url": "http://127.0.0.1:%d/" % port})
    assert failed
    # refused three times: the first try and the SDKs' two retries
    assert result["msg"] == "no server at http://127.0.0.1:%d (connection refused) (after 2 retries)" % port


def test_api_key_is_sent_as_bearer():
    with SseServerDouble(api_key="s3cret") as double:
        failed, result = probe(double, api_key="s3cret")
        auth = {h.get("Authorization") for h in double.headers_seen if h.get("Authorization")}
    assert not failed, result
    assert auth == {"Bearer s3cret"}
    assert result["levels"][0]["ok"] == 1


@pytest.mark.parametrize("key,fragment", [(None, "missing"), ("wrong", "wrong")])
def test_api_key_refused(key, fragment):
    with SseServerDouble(api_key="s3cret") as double:
        args = {"api_key": key} if key else {}
        failed, result = probe(double, **args)
    assert failed
    assert "HTTP 401" in result["msg"] and fragment in result["msg"]
    assert "s3cret" not in json.dumps(result)


def test_model_defaults_to_the_first_served_and_unknown_fails():
    with SseServerDouble() as double:
        failed, result = probe(double)
        assert not failed and result["model"] == MODEL
        assert result["server_version"] == "0.28.0"
        failed, result = probe(double, model="other")
    assert failed
    assert result["msg"] == "model 'other' is not served by %s; it serves: %s" % (double.url, MODEL)


@pytest.mark.parametrize("args,fragment", [
    ({"concurrency": []}, "concurrency must list at least one level"),
    ({"concurrency": [1, 0]}, "concurrency levels must be >= 1"),
    ({"rounds": 0}, "rounds must be >= 1"),
    ({"max_tokens": 0}, "max_tokens must be >= 1"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"soak_seconds": -1}, "soak_seconds must be >= 0"),
    ({"sampled_concurrency": [0]}, "sampled_concurrency levels must be >= 1"),
    ({"temperature": 0}, "temperature must be > 0 and <= 2"),
    ({"temperature": 2.5}, "temperature must be > 0 and <= 2"),
    ({"top_p": 0}, "top_p must be > 0 and <= 1"),
    ({"top_p": 1.01}, "top_p must be > 0 and <= 1"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"gpu_indices": [-1]}, "gpu_indices must be GPU indices >= 0"),
    ({"base_url": "ftp://x"}, "base_url must start with http:// or https://"),
])
def test_bad_input(args, fragment):
    args = dict({"base_url": "http://127.0.0.1:9"}, **args)
    failed, result = run_module(args)
    assert failed
    assert fragment in result["msg"]


def test_overall_timeout_fails_with_the_figures_so_far():
    with SseServerDouble(chunk_delay_s=0.05) as double:
        failed, result = probe(double, concurrency=[1, 1, 1, 1], max_tokens=10, timeout=0.8)
    assert failed
    assert "overall timeout of 0.8s ran out" in result["msg"]
    assert 1 <= len(result["levels"]) < 4


def test_soak_counts_requests_and_5xx():
    with SseServerDouble(statuses=[None, None, 500, 503], chunk_delay_s=0.002) as double:
        failed, result = probe(double, concurrency=[2], soak_seconds=1.0, max_tokens=8)
    assert not failed, result
    soak = result["soak"]
    assert soak["concurrency"] == 2
    assert soak["requests"] > 2
    assert soak["requests"] == soak["ok"] + sum(soak["errors"].values())
    # the level of 2 took the first two statuses (200), the soak the 500 and the 503
    assert soak["errors"] == {"500": 1, "503": 1}
    assert soak["errors_5xx"] == 2
    assert result["errors_total"] == 2
    assert 0.9 <= soak["wall_s"] < 5


def test_no_power_without_nvidia_smi():
    with SseServerDouble() as double:
        failed, result = probe(double)
    assert not failed
    assert result["power_available"] is False
    level = result["levels"][0]
    assert level["power"] is None and level["j_per_token"] is None and level["tps_per_w"] is None


@pytest.mark.skipif(not os.access(SMI_MOCK, os.X_OK), reason="the nvidia-smi mock is not there")
def test_power_is_sampled_with_the_nvidia_smi_mock(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    monkeypatch.setenv("NVIDIA_SMI_MOCK_STATE", str(state))
    rc = os.system("%s --mock-init rtx3090x2 >/dev/null" % SMI_MOCK)  # noqa: S605 - a fixed test path
    assert rc == 0
    with SseServerDouble(chunk_delay_s=0.01) as double:
        failed, result = probe(double, nvidia_smi_path=SMI_MOCK, concurrency=[2], max_tokens=50,
                               sample_interval_ms=50)
    assert not failed, result
    assert result["power_available"] is True
    assert result["power_error"] is None
    # the lab's nvidia-smi is a Python script: its watts are a test double's, and the report says so
    assert result["power_source"] == "test double"
    assert result["power_field"] == "power.draw.instant" and result["power_field_note"] is None
    level = result["levels"][0]
    assert set(level["power"]) == {"0", "1"}
    assert 0 < level["power_window_s"] <= level["wall_s"] + 0.01
    for gpu in level["power"].values():
        assert gpu["samples"] >= 2
        assert 0 < gpu["min_w"] <= gpu["mean_w"] <= gpu["max_w"] <= 350.0
        assert gpu["enforced_limit_w"] == 350.0
        assert gpu["duration_s"] == pytest.approx(level["power_window_s"], abs=2e-3)
        assert gpu["energy_j"] == pytest.approx(gpu["mean_w"] * gpu["duration_s"], rel=1e-2)
    assert level["power_w"] == pytest.approx(sum(g["mean_w"] for g in level["power"].values()), abs=1e-2)
    assert level["energy_j"] == pytest.approx(sum(g["energy_j"] for g in level["power"].values()), abs=1e-2)
    assert level["j_per_token"] == pytest.approx(level["energy_j"] / 100, rel=1e-3)
    assert level["tps_per_w"] == pytest.approx(level["aggregate_tps"] / level["power_w"], rel=1e-3)


def _mock_box(tmp_path, monkeypatch, profile, *settings):
    state = tmp_path / "state.json"
    monkeypatch.setenv("NVIDIA_SMI_MOCK_STATE", str(state))
    assert os.system("%s --mock-init %s >/dev/null" % (SMI_MOCK, profile)) == 0  # noqa: S605 - a fixed test path
    for setting in settings:
        assert os.system("%s --mock-set '%s' >/dev/null" % (SMI_MOCK, setting)) == 0  # noqa: S605


@pytest.mark.skipif(not os.access(SMI_MOCK, os.X_OK), reason="the nvidia-smi mock is not there")
def test_only_the_profile_gpus_are_sampled(tmp_path, monkeypatch):
    _mock_box(tmp_path, monkeypatch, "rtx3090x2")
    with SseServerDouble(chunk_delay_s=0.01) as double:
        failed, result = probe(double, nvidia_smi_path=SMI_MOCK, concurrency=[1], max_tokens=40,
                               sample_interval_ms=50, gpu_indices=[1])
    assert not failed, result
    assert result["gpu_indices"] == [1]
    assert set(result["levels"][0]["power"]) == {"1"}


@pytest.mark.skipif(not os.access(SMI_MOCK, os.X_OK) or os.geteuid() != 0,
                    reason="the nvidia-smi mock is not there, or --mock-set needs root")
def test_power_draw_where_the_driver_does_not_know_the_instant_field(tmp_path, monkeypatch):
    _mock_box(tmp_path, monkeypatch, "rtx3090x1", 'unknown_fields=["power.draw.instant"]')
    with SseServerDouble(chunk_delay_s=0.01) as double:
        failed, result = probe(double, nvidia_smi_path=SMI_MOCK, concurrency=[1], max_tokens=40,
                               sample_interval_ms=50)
    assert not failed, result
    assert result["power_error"] is None
    assert result["power_field"] == "power.draw"
    assert 'Field "power.draw.instant" is not a valid field to query.' in result["power_field_note"]
    assert result["levels"][0]["power"]["0"]["samples"] >= 1


def test_power_source_without_nvidia_smi():
    with SseServerDouble() as double:
        failed, result = probe(double)
    assert not failed, result
    assert result["power_source"] == "none" and result["power_field"] is None


@pytest.mark.skipif(not os.access(SMI_MOCK, os.X_OK), reason="the nvidia-smi mock is not there")
def test_power_failure_is_reported_not_fatal(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    monkeypatch.setenv("NVIDIA_SMI_MOCK_STATE", str(state))
    assert os.system("%s --mock-init rtx3090x1 >/dev/null && %s --mock-set fault=fail >/dev/null"  # noqa: S605
                     % (SMI_MOCK, SMI_MOCK)) == 0
    with SseServerDouble() as double:
        failed, result = probe(double, nvidia_smi_path=SMI_MOCK)
    assert not failed, result
    assert result["power_available"] is True
    assert result["power_error"]
    assert result["levels"][0]["power"] is None
    assert result["levels"][0]["ok"] == 1
