# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the probe client's HTTP side (plugins/module_utils/vllm_http.py, on aiohttp): the SSE parser
on the real vLLM 0.28.0 capture, one streamed request, many streams, and the transport failures it retries
(data-driven: tests/unit/data/vllm_http_transport_cases.yaml), against SseServerDouble
(tests/doubles/sse_server.py)."""
from __future__ import annotations

import os
import socket

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_http
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_load import completion_payload
from ansible_collections.gpuhost.inference.tests.doubles.sse_server import MODEL, SseServerDouble
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

FIXTURES = os.path.join(ALL_FIXTURES, "vllm-0.28.0")
TRANSPORT = load_cases("vllm_http_transport_cases.yaml", "cases")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    """The SDKs' pauses (0.5 s, 1 s) shortened: the rule is the same, the test is quicker."""
    monkeypatch.setattr(vllm_http, "INITIAL_RETRY_DELAY", 0.01)


def test_client_records_chunks_and_usage_separately():
    with SseServerDouble(tokens_per_chunk=3, chunk_delay_s=0.005) as double:
        ep = vllm_http.Endpoint(double.url)
        res = ep.stream_completion(completion_payload(MODEL, "hi", 30), timeout=10)
    assert res.ok and res.status == 200 and res.retries == 0
    assert res.chunks == 10
    assert res.completion_tokens == 30 and res.output_tokens == 30
    assert res.prompt_tokens == 1
    span = res.t_last - res.t_first
    assert res.decode_tps == pytest.approx(29 / span)
    assert 0 < res.ttft_s < res.e2e_s


def test_streams_run_at_once_on_kept_alive_connections():
    with SseServerDouble(tokens_per_chunk=2, statuses=[None, 503], chunk_delay_s=0.02) as double:
        ep = vllm_http.Endpoint(double.url)
        payloads = [[completion_payload(MODEL, "a b", 10)] * 2 for _i in range(3)]
        sources = [lambda it=iter(p): next(it, None) for p in payloads]
        results, wall = vllm_http.run_streams(ep, sources, request_timeout=10)
        max_inflight = double.max_inflight
        clients = len(double.clients)
    assert len(results) == 6 and wall > 0
    assert sorted(r.error or "ok" for r in results) == ["503"] + ["ok"] * 5
    assert [r.output_tokens for r in results if r.ok] == [10] * 5
    assert [r.chunks for r in results if r.ok] == [5] * 5
    assert max_inflight >= 2
    assert clients == 3  # each stream's second request went over its kept-alive connection


def test_a_stream_past_its_timeout_is_a_timeout():
    with SseServerDouble(first_delay_s=1.0) as double:
        res = vllm_http.Endpoint(double.url).stream_completion(completion_payload(MODEL, "hi", 4), timeout=0.3)
    assert res.error == "timeout" and res.retries == 0


def test_no_server_is_a_connection_error_after_the_retries():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    ep = vllm_http.Endpoint("http://127.0.0.1:%d" % port)
    res = ep.stream_completion(completion_payload(MODEL, "hi", 4), timeout=10)
    assert res.error == "connection" and res.retries == vllm_http.MAX_RETRIES
    assert "no server at" in res.message and "after 2 retries" in res.message
    with pytest.raises(vllm_http.ClientError) as info:
        ep.get_json("/v1/models", timeout=10)
    assert info.value.kind == "connection" and info.value.retries == vllm_http.MAX_RETRIES
    assert ep.retries == vllm_http.MAX_RETRIES


@pytest.mark.parametrize("case", TRANSPORT, ids=case_ids(TRANSPORT))
def test_transport_failures(case):
    expect = case["expect"]
    with SseServerDouble(**case["double"]) as double:
        ep = vllm_http.Endpoint(double.url)
        payloads = [[completion_payload(MODEL, "s%d r%d" % (s, r), 6) for r in range(case["rounds"])]
                    for s in range(case["streams"])]
        sources = [lambda it=iter(p): next(it, None) for p in payloads]
        results, _wall = vllm_http.run_streams(ep, sources, request_timeout=10)
        seen = len(double.completions())
        dropped = list(double.dropped)
    assert sorted(r.error or "ok" for r in results) == sorted(expect["errors"])
    assert sum(r.retries for r in results) == expect["retries"]
    assert seen == expect["seen"]
    if "dropped_on_reused" in expect:  # the hang-up hit a connection that had served a request before
        assert sum(1 for _n, _client, before in dropped if before > 0) == expect["dropped_on_reused"]
    if "message" in expect:
        assert any(expect["message"] in (r.message or "") for r in results)
    for res in results:
        if res.ok:
            assert res.output_tokens == 6 and res.usage_seen


def test_retry_pauses_follow_the_sdks_rule(monkeypatch):
    monkeypatch.setattr(vllm_http, "INITIAL_RETRY_DELAY", 0.5)
    assert [vllm_http.retry_delay(n, rand=lambda: 0.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert vllm_http.retry_delay(0, rand=lambda: 1.0) == 0.375  # less 25 % jitter at most


def _sse_reads(sse_text):
    """The de-chunked SSE capture as aiohttp hands it out: one read per event (as vLLM sends them)."""
    return [event + b"\n\n" for event in sse_text.encode().split(b"\n\n") if event]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 100000])
def test_parser_on_the_real_capture_cut_anywhere(step):
    with open(os.path.join(FIXTURES, "completion_stream.sse"), encoding="utf-8") as fh:
        body = b"".join(_sse_reads(fh.read()))
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res)
    for i in range(0, len(body), step):
        parser.feed(body[i:i + step], float(i))
    parser.close()
    assert parser.done
    assert res.error is None
    assert res.chunks == 8
    assert res.completion_tokens == 8 and res.prompt_tokens == 14
    assert res.usage_seen


def test_parser_decodes_what_the_fast_path_cannot_read():
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res)
    parser.feed(b'data: {"choices": [{"index": 0, "text": ""}]}\n\n'
                b'data: {"choices":[{"index":0,"text":"\\"q"}]}\n\n'
                b'data: {"choices":[{"index":0,"text":"a"}],"usage":null}\n\n'
                b'event: x\ndata: {"choices":[{"text":"b"}]}\n\n'
                b'data: {"error": {"message": "engine dead", "code": 500}}\n\n'
                b"data: [DONE]\n\n", 1.0)
    assert res.chunks == 3  # the empty text is no token; escaped, usage:null and multi-line events are
    assert res.error == "stream_error" and res.message == "engine dead"
    assert parser.done


def test_parser_without_done_is_incomplete():
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res)
    parser.feed(b'data: {"choices":[{"index":0,"text":"x"}]}\r\n\r\n', 1.0)
    parser.close()
    assert res.chunks == 1 and res.error == "incomplete"


@pytest.mark.parametrize("reads,tokens,burst", [
    ([8], 8, True),          # every token in one read
    ([6, 2], 8, True),       # two reads
    ([3, 3, 2], 8, False),   # three reads: the tokens came as they were made
    ([1, 1], 2, False),      # two tokens can only come in two reads
    ([1], 1, False),
])
def test_burst_streams(reads, tokens, burst):
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res)
    for n, count in enumerate(reads):
        parser.feed(b"".join(b'data: {"choices":[{"index":0,"text":"x"}]}\n\n' for _i in range(count)), 1.0 + n)
    parser.feed(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
                % tokens, 9.0)
    parser.close()
    assert res.ok and res.text_reads == len(reads)
    assert res.burst is burst
