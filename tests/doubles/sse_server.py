# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SseServerDouble: a TEST DOUBLE of vLLM's OpenAI server (stdlib http.server, threaded), shared by
the unit tests of the probe (tests/unit/plugins/...) and benchmarks/probe_capacity.py.

It answers /health, /ping, /version, /v1/models and streamed /v1/completions in the framing of the
real 0.28.0 capture (tests/fixtures/vllm-0.28.0/completion_stream.sse: one HTTP chunk per SSE event,
the usage event, ``data: [DONE]``, the last chunk), and can be told to put several tokens in an
event or several events in a write, leave out usage, fail requests with a status, stall, die
mid-stream, send an error event, refuse prompts over max_model_len, demand an API key, or hang up on
chosen requests before any byte of an answer (``drop_requests``: a closed or reset kept-alive
connection, the race every HTTP client meets).

    with SseServerDouble(tokens_per_chunk=4, chunk_delay_s=0.01) as double:
        ... double.url ...              # http://127.0.0.1:<port>
        double.completions()            # the completion requests seen (path and JSON body)

    SseServerDouble(port=0, model="x").serve_forever()   # in the foreground (a benchmark's server)
"""
from __future__ import annotations

import functools
import json
import socket
import struct
import threading
import time

from ansible_collections.gpuhost.inference.tests.doubles.http_double import HttpDouble, JsonHandler

MODEL = "tiny-double"
CAPTURE_ID = "cmpl-893f9fb2d280b4ec"
CAPTURE_CREATED = 1796230977


def chunk(data):
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(obj):
    """One SSE event in one chunk, compact JSON as vLLM writes it."""
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


@functools.lru_cache(maxsize=64)
def token_event(model, tokens, last=False):
    """The event of ``tokens`` output tokens (the capture's fields; text "x" per token)."""
    return event({
        "id": CAPTURE_ID, "object": "text_completion", "created": CAPTURE_CREATED, "model": model,
        "choices": [{"index": 0, "text": "x" * tokens, "logprobs": None,
                     "finish_reason": "length" if last else None, "stop_reason": None,
                     "prompt_token_ids": None, "token_ids": None}],
    })


def usage_event(model, prompt_tokens, completion_tokens):
    return event({
        "id": CAPTURE_ID, "object": "text_completion", "created": CAPTURE_CREATED, "model": model,
        "choices": [], "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                                 "completion_tokens": completion_tokens},
    })


DONE = chunk(b"data: [DONE]\n\n")
LAST_CHUNK = b"0\r\n\r\n"


class SseServerDouble(HttpDouble):
    """A vLLM OpenAI server TEST DOUBLE, configured through attributes (keyword arguments)."""

    def __init__(self, host="127.0.0.1", port=0, **options):
        self.model = MODEL
        self.max_model_len = 2048
        self.default_tokens = 256       # max_tokens of a request that names none
        self.tokens_per_chunk = 1
        self.events_per_write = 1       # token events written at once (vLLM: 1)
        self.send_usage = True
        self.chunk_delay_s = 0.0
        self.first_delay_s = 0.0
        self.api_key = None
        self.statuses = []              # consumed one per completion request: an int status or None (200)
        self.die_after_chunks = None
        self.stream_error_after = None
        self.close_connections = False  # answer "Connection: close" and hang up after each request
        self.silent_close = False       # hang up after each request without saying so (a stale keep-alive)
        self.short_by = 0               # stream this many tokens fewer than max_tokens (then usage and [DONE])
        self.limit_in_message = None    # the context length the 400 names (None: the real max_model_len)
        # vLLM 0.32.0's length rule: a prompt that fits is answered with max_tokens cut to what the context leaves
        # (get_max_tokens), only a prompt over max_model_len is refused. False: 0.28.0's (prompt + max_tokens over: 400).
        self.clamp_output = False
        self.die_on_list_prompt = False  # die_after_chunks only for token-id prompts (the context probe)
        self.drop_requests = ()         # completion requests (0-based, in arrival order) hung up on before any answer
        self.drop_mode = "close"        # how: "close" (FIN, as a server closing an idle kept-alive connection) or "reset"
        unknown = set(options) - set(self.__dict__)
        if unknown:
            raise TypeError("SseServerDouble has no option %s" % ", ".join(sorted(unknown)))
        self.__dict__.update(options)
        self.clients = set()            # (host, port) of every connection seen
        self.dropped = []               # (request number, client address, requests before it on that connection)
        self.served_on = {}             # client address -> completion requests seen on that connection
        self.requests = []
        self.headers_seen = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        super().__init__(self._handler(), host, port)

    def completions(self):
        return [r for r in self.requests if r["path"] == "/v1/completions"]

    def over_limit_message(self, prompt_len, max_tokens):
        return ("This model's maximum context length is %d tokens. However, you requested %d output tokens and "
                "your prompt contains at least %d input tokens, for a total of at least %d tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, "
                "value=%d)" % (self.limit_in_message or self.max_model_len, max_tokens, prompt_len, prompt_len + max_tokens,
                               prompt_len))

    def over_context_message(self, prompt_len):
        limit = self.limit_in_message or self.max_model_len
        return ("This model's maximum context length is %d tokens. However, your prompt contains at least %d input "
                "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
                "prompt. (parameter=input_tokens, value=%d)" % (limit, prompt_len, prompt_len))

    def _handler(self):
        double = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def _authorized(self):
                return self.bearer_ok(double.api_key)

            def do_GET(self):  # noqa: N802
                double.headers_seen.append(dict(self.headers))
                double.requests.append({"path": self.path})
                if self.path in ("/health", "/ping"):
                    return self.send_json(200, {})
                if self.path == "/version":
                    return self.send_json(200, {"version": "0.28.0"})
                if self.path == "/v1/models":
                    if not self._authorized():
                        return self.send_json(401, {"error": "Unauthorized"})
                    return self.send_json(200, {"object": "list", "data": [
                        {"id": double.model, "object": "model", "max_model_len": double.max_model_len}]})
                return self.send_json(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                body = self.read_json()
                if double.close_connections or double.silent_close:
                    self.close_connection = True
                with double.lock:
                    number = len(double.completions()) if self.path == "/v1/completions" else None
                    before = double.served_on.get(self.client_address, 0)
                    double.served_on[self.client_address] = before + 1
                    double.clients.add(self.client_address)
                    double.headers_seen.append(dict(self.headers))
                    double.requests.append({"path": self.path, "body": body})
                    drop = number is not None and number in double.drop_requests
                    if drop:
                        double.dropped.append((number, self.client_address, before))
                if drop:
                    return self._hang_up()
                with double.lock:
                    status = double.statuses.pop(0) if double.statuses else None
                    double.inflight += 1
                    double.max_inflight = max(double.max_inflight, double.inflight)
                self._counted = True
                try:
                    self._complete(body, status)
                finally:
                    self._leave()

            def _hang_up(self):
                """No answer at all: the connection closed (FIN) or reset (RST) right after the request."""
                self.close_connection = True
                if double.drop_mode == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                else:
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _leave(self):
                """The request stops counting as in flight (once): before the last bytes of a stream are written, so
                that a client that has read its whole answer never finds it still counted."""
                if getattr(self, "_counted", False):
                    self._counted = False
                    with double.lock:
                        double.inflight -= 1

            def _complete(self, body, status):
                if not self._authorized():
                    return self.send_json(401, {"error": "Unauthorized"})
                if status is not None:
                    return self.send_json(status, {"error": {"message": "double says %d" % status,
                                                             "type": "DoubleError", "code": status}})
                max_tokens = int(body.get("max_tokens") or double.default_tokens)
                prompt = body.get("prompt", "")
                prompt_len = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
                if double.clamp_output and prompt_len > double.max_model_len:
                    return self.send_json(400, {"error": {
                        "message": double.over_context_message(prompt_len),
                        "type": "BadRequestError", "param": "input_tokens", "code": 400}})
                if double.clamp_output:
                    max_tokens = min(max_tokens, double.max_model_len - prompt_len)
                elif prompt_len + max_tokens > double.max_model_len:
                    return self.send_json(400, {"error": {
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
                self._stream(prompt, prompt_len, max_tokens)
                return None

            def _stream(self, prompt, prompt_len, max_tokens):
                write = self.wfile.write
                model = double.model
                sent = 0
                chunks = 0
                pending = []
                target = max(0, max_tokens - double.short_by)
                die_after = double.die_after_chunks
                if double.die_on_list_prompt and not isinstance(prompt, list):
                    die_after = None
                while sent < target:
                    n = min(double.tokens_per_chunk, target - sent)
                    sent += n
                    chunks += 1
                    pending.append(token_event(model, n, sent == target))
                    if die_after is not None and chunks >= die_after:
                        write(b"".join(pending))
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if double.stream_error_after is not None and chunks >= double.stream_error_after:
                        pending.append(event({"error": {"message": "EngineDeadError: double", "code": 500}}))
                        break
                    if len(pending) >= double.events_per_write or double.chunk_delay_s:
                        write(b"".join(pending))
                        pending = []
                    if double.chunk_delay_s:
                        time.sleep(double.chunk_delay_s)
                if double.send_usage:
                    pending.append(usage_event(model, prompt_len, sent))
                self._leave()
                write(b"".join(pending) + DONE + LAST_CHUNK)

        return Handler
