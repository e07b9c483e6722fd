"""Unit tests of the vllm_probe module and its client (plugins/module_utils/vllm_client.py).

The server is SseServerDouble, a TEST DOUBLE of vLLM's OpenAI server started in a thread: it
answers /v1/models, /version and streamed /v1/completions with the framing of the real 0.28.0
captures (tests/fixtures/vllm-0.28.0/), and can be told to put several tokens in a chunk, leave out
usage, fail requests with a status, stall, die mid-stream, or demand an API key.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_client
from ansible_collections.gpuhost.inference.plugins.modules import vllm_probe
from module_harness import ExitJson, FailJson, exit_json, fail_json

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
FIXTURES = os.path.join(TESTS, "fixtures", "vllm-0.28.0")
SMI_MOCK = os.path.join(TESTS, "mock", "nvidia_smi_mock.py")
MODEL = "tiny-double"


# ------------------------------------------------------------------ the server double

class SseServerDouble:
    """A vLLM OpenAI server TEST DOUBLE (threaded http.server), configured through attributes."""

    def __init__(self, **options):
        self.model = MODEL
        self.max_model_len = 2048
        self.tokens_per_chunk = 1
        self.send_usage = True
        self.chunk_delay_s = 0.0
        self.first_delay_s = 0.0
        self.api_key = None
        self.statuses = []          # consumed one per completion request: an int status or None (200)
        self.die_after_chunks = None
        self.stream_error_after = None
        self.close_connections = False  # answer "Connection: close" and hang up after each request
        self.silent_close = False       # hang up after each request without saying so (a stale keep-alive)
        self.short_by = 0               # stream this many tokens fewer than max_tokens (then usage and [DONE])
        self.limit_in_message = None    # the context length the 400 names (None: the real max_model_len)
        self.die_on_list_prompt = False  # die_after_chunks only for token-id prompts (the context probe)
        self.__dict__.update(options)
        self.clients = set()            # (host, port) of every connection seen
        self.requests = []
        self.headers_seen = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        # a client that hangs up early (the timeout tests) is expected: no traceback on stderr
        self.server.handle_error = lambda request, client_address: None
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False

    def completions(self):
        return [r for r in self.requests if r["path"] == "/v1/completions"]

    def over_limit_message(self, prompt_len, max_tokens):
        return ("This model's maximum context length is %d tokens. However, you requested %d output tokens and "
                "your prompt contains at least %d input tokens, for a total of at least %d tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, "
                "value=%d)" % (self.limit_in_message or self.max_model_len, max_tokens, prompt_len, prompt_len + max_tokens,
                               prompt_len))

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # pylint: disable=arguments-differ
                pass

            def _json(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self):
                if double.api_key is None:
                    return True
                return self.headers.get("Authorization") == "Bearer " + double.api_key

            def do_GET(self):  # noqa: N802
                double.headers_seen.append(dict(self.headers))
                double.requests.append({"path": self.path})
                if self.path == "/version":
                    return self._json(200, {"version": "0.28.0"})
                if self.path == "/v1/models":
                    if not self._authorized():
                        return self._json(401, {"error": "Unauthorized"})
                    return self._json(200, {"object": "list", "data": [
                        {"id": double.model, "object": "model", "max_model_len": double.max_model_len}]})
                return self._json(404, {"detail": "Not Found"})

            def _chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _event(self, obj):
                self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if double.close_connections or double.silent_close:
                    self.close_connection = True
                with double.lock:
                    double.clients.add(self.client_address)
                    double.headers_seen.append(dict(self.headers))
                    double.requests.append({"path": self.path, "body": body})
                    status = double.statuses.pop(0) if double.statuses else None
                    double.inflight += 1
                    double.max_inflight = max(double.max_inflight, double.inflight)
                try:
                    self._complete(body, status)
                finally:
                    with double.lock:
                        double.inflight -= 1

            def _complete(self, body, status):
                if not self._authorized():
                    return self._json(401, {"error": "Unauthorized"})
                if status is not None:
                    return self._json(status, {"error": {"message": "double says %d" % status,
                                                         "type": "DoubleError", "code": status}})
                max_tokens = body["max_tokens"]
                prompt = body["prompt"]
                prompt_len = len(prompt) if isinstance(prompt, list) else len(prompt.split())
                if prompt_len + max_tokens > double.max_model_len:
                    return self._json(400, {"error": {
                        "message": double.over_limit_message(prompt_len, max_tokens),
                        "type": "BadRequestError", "param": "input_tokens", "code": 400}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                if double.close_connections:
                    self.send_header("Connection", "close")
                self.end_headers()
                if double.first_delay_s:
                    time.sleep(double.first_delay_s)
                sent = 0
                chunks = 0
                target = max(0, max_tokens - double.short_by)
                die_after = double.die_after_chunks
                if double.die_on_list_prompt and not isinstance(prompt, list):
                    die_after = None
                while sent < target:
                    n = min(double.tokens_per_chunk, target - sent)
                    sent += n
                    chunks += 1
                    self._event({"id": "cmpl-double", "object": "text_completion", "model": double.model,
                                 "choices": [{"index": 0, "text": "x" * n, "logprobs": None,
                                              "finish_reason": "length" if sent == target else None}]})
                    if die_after is not None and chunks >= die_after:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return None
                    if double.stream_error_after is not None and chunks >= double.stream_error_after:
                        self._event({"error": {"message": "EngineDeadError: double", "code": 500}})
                        break
                    if double.chunk_delay_s:
                        time.sleep(double.chunk_delay_s)
                if double.send_usage:
                    self._event({"id": "cmpl-double", "object": "text_completion", "model": double.model,
                                 "choices": [], "usage": {"prompt_tokens": prompt_len,
                                                          "total_tokens": prompt_len + sent,
                                                          "completion_tokens": sent}})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return None

        return Handler


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


def test_client_records_chunks_and_usage_separately():
    with SseServerDouble(tokens_per_chunk=3, chunk_delay_s=0.005) as double:
        ep = vllm_client.Endpoint(double.url)
        res = ep.stream_completion(vllm_client.completion_payload(MODEL, "hi", 30), timeout=10)
    assert res.ok and res.status == 200
    assert res.chunks == 10
    assert res.completion_tokens == 30 and res.output_tokens == 30
    assert res.prompt_tokens == 1
    span = res.t_last - res.t_first
    assert res.decode_tps == pytest.approx(29 / span)
    assert 0 < res.ttft_s < res.e2e_s


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


def test_the_threaded_path_gives_the_same_figures():
    # the https path (http.client, a thread per stream), run here over plain http
    with SseServerDouble(tokens_per_chunk=2, statuses=[None, 503], chunk_delay_s=0.02) as double:
        ep = vllm_client.Endpoint(double.url)
        payloads = [[vllm_client.completion_payload(MODEL, "a b", 10)] for _i in range(3)]
        sources = [lambda it=iter(p): next(it, None) for p in payloads]
        results = vllm_client._threaded_streams(ep, sources, request_timeout=10)  # pylint: disable=protected-access
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
    res = vllm_client.RequestResult()
    parser = vllm_client.SseParser(res, chunked=True)
    for i in range(0, len(body), step):
        parser.feed(body[i:i + step], float(i))
    parser.close()
    assert parser.done and parser.eof
    assert res.error is None
    assert res.chunks == 8
    assert res.completion_tokens == 8 and res.prompt_tokens == 14
    assert res.usage_seen


def test_parser_decodes_what_the_fast_path_cannot_read():
    res = vllm_client.RequestResult()
    parser = vllm_client.SseParser(res, chunked=False)
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
    res = vllm_client.RequestResult()
    parser = vllm_client.SseParser(res, chunked=False)
    for n, count in enumerate(reads):
        parser.feed(b"".join(b'data: {"choices":[{"index":0,"text":"x"}]}\n\n' for _i in range(count)), 1.0 + n)
    parser.feed(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
                % tokens, 9.0)
    parser.close()
    assert res.ok and res.text_reads == len(reads)
    assert res.burst is burst


def test_burst_streams_are_counted_and_kept_out_of_the_decode_rate():
    def result(t_first, t_last, reads, tokens=11):
        res = vllm_client.RequestResult()
        res.t_start, res.t_first, res.t_last, res.t_end = 0.0, t_first, t_last, t_last
        res.completion_tokens, res.usage_seen, res.text_reads = tokens, True, reads
        return res
    steady = [result(0.1, 1.1, 10), result(0.1, 2.1, 10), result(0.1, 0.6, 10)]   # 10, 5 and 20 tok/s
    burst = [result(1.0, 1.001, 1), result(1.0, 1.002, 2)]                       # 10000 and 5000 tok/s
    figures = vllm_client.aggregate(steady + burst, 2.0)
    assert figures["burst_streams"] == 2
    assert figures["decode_tps"]["n"] == 3
    assert figures["decode_tps"]["p50"] == pytest.approx(10.0)
    assert figures["decode_tps"]["max"] == pytest.approx(20.0)
    assert figures["ok"] == 5 and figures["output_tokens"] == 55  # bursts still count as served tokens


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
    assert ctx["over"]["requested"] == 513
    assert ctx["over"]["prompt_tokens"] == 449
    assert "maximum context length is 512 tokens" in ctx["over"]["message"]
    assert [len(b["prompt"]) for b in ctx_bodies] == [448, 449]
    assert set(ctx_bodies[0]["prompt"]) <= set(range(11, 31))
    assert result["errors_total"] == 0  # the expected 400 is not an error


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


@pytest.mark.parametrize("name,expected", [
    ("context_over_by_one.json", {"limit": 2048, "requested": 2049, "prompt_tokens": 1793, "output_tokens": 256}),
    ("context_over_prompt.json", {"limit": 2048, "requested": 2305, "prompt_tokens": 2049, "output_tokens": 256}),
])
def test_parse_the_real_400_messages(name, expected):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        message = json.load(fh)["error"]["message"]
    assert vllm_client.parse_context_error(message) == expected


@pytest.mark.parametrize("message,expected", [
    ("This model's maximum context length is 4096 tokens. However, you requested 4353 tokens "
     "(4097 in the messages, 256 in the completion). Please reduce the length of the messages or completion.",
     {"limit": 4096, "requested": 4353, "prompt_tokens": 4097, "output_tokens": None}),
    ("This model's maximum context length is 262,144 tokens. However, your request has 262,145 input tokens. "
     "Please reduce the length of the input messages.",
     {"limit": 262144, "requested": None, "prompt_tokens": 262145, "output_tokens": None}),
    ("something else", {"limit": None, "requested": None, "prompt_tokens": None, "output_tokens": None}),
])
def test_parse_other_400_messages(message, expected):
    assert vllm_client.parse_context_error(message) == expected


# ------------------------------------------------------------------ statistics

@pytest.mark.parametrize("values,expected", [
    ([], {"mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None, "n": 0}),
    ([None], {"mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None, "n": 0}),
    ([7.5], {"mean": 7.5, "p50": 7.5, "p90": 7.5, "p99": 7.5, "min": 7.5, "max": 7.5, "n": 1}),
    ([1, 3], {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": 2.98, "min": 1.0, "max": 3.0, "n": 2}),
    (list(range(1, 11)), {"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91, "min": 1.0, "max": 10.0, "n": 10}),
    ([10, 1, None, 4], {"mean": 5.0, "p50": 4.0, "p90": 8.8, "p99": 9.88, "min": 1.0, "max": 10.0, "n": 3}),
])
def test_summarize(values, expected):
    got = vllm_client.summarize(values)
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == (pytest.approx(value) if value is not None else None), key


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
    assert result["msg"] == "no server at http://127.0.0.1:%d (connection refused)" % port


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
