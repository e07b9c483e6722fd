# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the probe client's HTTP side (plugins/module_utils/vllm_http.py): the SSE parser
on the real vLLM 0.28.0 capture, one streamed request, and the threaded (https) path, against
SseServerDouble (tests/doubles/sse_server.py)."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_http
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_load import completion_payload
from ansible_collections.gpuhost.inference.tests.doubles.sse_server import MODEL, SseServerDouble
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES

FIXTURES = os.path.join(ALL_FIXTURES, "vllm-0.28.0")


def test_client_records_chunks_and_usage_separately():
    with SseServerDouble(tokens_per_chunk=3, chunk_delay_s=0.005) as double:
        ep = vllm_http.Endpoint(double.url)
        res = ep.stream_completion(completion_payload(MODEL, "hi", 30), timeout=10)
    assert res.ok and res.status == 200
    assert res.chunks == 10
    assert res.completion_tokens == 30 and res.output_tokens == 30
    assert res.prompt_tokens == 1
    span = res.t_last - res.t_first
    assert res.decode_tps == pytest.approx(29 / span)
    assert 0 < res.ttft_s < res.e2e_s


def test_the_threaded_path_gives_the_same_figures():
    # the https path (http.client, a thread per stream), run here over plain http
    with SseServerDouble(tokens_per_chunk=2, statuses=[None, 503], chunk_delay_s=0.02) as double:
        ep = vllm_http.Endpoint(double.url)
        payloads = [[completion_payload(MODEL, "a b", 10)] for _i in range(3)]
        sources = [lambda it=iter(p): next(it, None) for p in payloads]
        results = vllm_http._threaded_streams(ep, sources, request_timeout=10)  # pylint: disable=protected-access
        max_inflight = double.max_inflight
    assert len(results) == 3
    assert sorted(r.error or "ok" for r in results) == ["503", "ok", "ok"]
    assert [r.output_tokens for r in results if r.ok] == [10, 10]
    assert [r.chunks for r in results if r.ok] == [5, 5]
    assert max_inflight >= 2


def _chunked_body(sse_text, pieces=1):
    """The de-chunked SSE capture -> an HTTP chunked body, one chunk per event (as vLLM sends)."""
    out = b""
    for event in sse_text.encode().split(b"\n\n"):
        if event:
            data = event + b"\n\n"
            out += b"%x\r\n%s\r\n" % (len(data), data)
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 100000])
def test_parser_on_the_real_capture_cut_anywhere(step):
    with open(os.path.join(FIXTURES, "completion_stream.sse"), encoding="utf-8") as fh:
        body = _chunked_body(fh.read())
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res, chunked=True)
    for i in range(0, len(body), step):
        parser.feed(body[i:i + step], float(i))
    parser.close()
    assert parser.done and parser.eof
    assert res.error is None
    assert res.chunks == 8
    assert res.completion_tokens == 8 and res.prompt_tokens == 14
    assert res.usage_seen


def test_parser_decodes_what_the_fast_path_cannot_read():
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res, chunked=False)
    parser.feed(b'data: {"choices": [{"index": 0, "text": ""}]}\n\n'
                b'data: {"choices":[{"index":0,"text":"\\"q"}]}\n\n'
                b'data: {"choices":[{"index":0,"text":"a"}],"usage":null}\n\n'
                b'event: x\ndata: {"choices":[{"text":"b"}]}\n\n'
                b'data: {"error": {"message": "engine dead", "code": 500}}\n\n'
                b"data: [DONE]\n\n", 1.0)
    assert res.chunks == 3  # the empty text is no token; escaped, usage:null and multi-line events are
    assert res.error == "stream_error" and res.message == "engine dead"
    assert parser.done


@pytest.mark.parametrize("reads,tokens,burst", [
    ([8], 8, True),          # every token in one read
    ([6, 2], 8, True),       # two reads
    ([3, 3, 2], 8, False),   # three reads: the tokens came as they were made
    ([1, 1], 2, False),      # two tokens can only come in two reads
    ([1], 1, False),
])
def test_burst_streams(reads, tokens, burst):
    res = vllm_http.RequestResult()
    parser = vllm_http.SseParser(res, chunked=False)
    for n, count in enumerate(reads):
        parser.feed(b"".join(b'data: {"choices":[{"index":0,"text":"x"}]}\n\n' for _i in range(count)), 1.0 + n)
    parser.feed(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
                % tokens, 9.0)
    parser.close()
    assert res.ok and res.text_reads == len(reads)
    assert res.burst is burst
