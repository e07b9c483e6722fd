# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A streaming client for vLLM's OpenAI-compatible server, and the statistics of its runs.

Python standard library only (http.client, threads, statistics), never imports AnsibleModule, so
the vllm_probe module runs on any target and a benchmark script can import it directly:

    ep = Endpoint("http://127.0.0.1:8000", api_key=None)
    status, models = ep.get_json("/v1/models")
    level = run_level(ep, "my-model", concurrency=4, rounds=1, max_tokens=256, prompt_words=64)
    level["aggregate_tps"], level["ttft_s"]["p50"], level["decode_tps"]["p90"]

Output tokens are counted from the stream's final ``usage`` chunk (``stream_options:
{include_usage: true}``), never from the number of chunks: with speculative decoding one chunk
carries several tokens.
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import statistics
import threading
import time
import uuid
from urllib.parse import urlsplit

__all__ = [
    "ClientError",
    "Endpoint",
    "RequestResult",
    "context_prompt",
    "context_probe",
    "make_prompt",
    "parse_context_error",
    "run_level",
    "run_soak",
    "summarize",
]

# The context probe's prompt: token ids 11..30 repeated (small ids exist in every vocabulary).
CONTEXT_TOKEN_IDS = tuple(range(11, 31))

# Words of the decode probe's prompts (after the unique prefix).
_WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven",
    "engineers", "measure", "tokens", "per", "second", "on", "every", "card", "in", "rack",
    "and", "write", "down", "what", "they", "saw", "before", "lunch", "time",
)

_NUM = r"(\d[\d,]*)"
_RE_LIMIT = re.compile(r"maximum context length is " + _NUM + r" tokens", re.I)
_RE_TOTAL = re.compile(r"for a total of (?:at least )?" + _NUM + r" tokens", re.I)
_RE_REQUESTED = re.compile(r"you requested (?:at least )?" + _NUM + r" tokens", re.I)
_RE_OUTPUT = re.compile(r"requested (?:at least )?" + _NUM + r" output tokens", re.I)
_RE_INPUT = re.compile(
    r"(?:prompt contains|request has|messages resulted in) (?:at least )?" + _NUM + r" (?:input )?tokens", re.I,
)


class ClientError(Exception):
    """The server could not be reached or answered something unusable (``kind``: connection, timeout, http)."""

    def __init__(self, msg, kind="connection", status=None, body=None):
        super().__init__(msg)
        self.msg = msg
        self.kind = kind
        self.status = status
        self.body = body


def _num(text):
    return int(text.replace(",", ""))


class RequestResult:
    """One request: HTTP status, timings (perf_counter seconds) and token counts from ``usage``.

    ``error`` is None for a complete 200 stream, else the key it is counted under: the HTTP status
    as a string (``"400"``, ``"503"``), ``"timeout"``, ``"connection"``, ``"incomplete"`` (the
    stream ended before ``[DONE]``) or ``"stream_error"`` (an error event inside the stream).
    """

    __slots__ = (
        "status", "error", "message", "t_start", "t_first", "t_last", "t_end", "chunks",
        "completion_tokens", "prompt_tokens", "usage_seen", "body",
    )

    def __init__(self):
        self.status = None
        self.error = None
        self.message = None
        self.t_start = None
        self.t_first = None
        self.t_last = None
        self.t_end = None
        self.chunks = 0
        self.completion_tokens = None
        self.prompt_tokens = None
        self.usage_seen = False
        self.body = None

    @property
    def ok(self):
        return self.error is None

    @property
    def output_tokens(self):
        """From ``usage``; the number of text chunks only when the server sent no usage."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return self.chunks

    @property
    def ttft_s(self):
        if self.t_first is None or self.t_start is None:
            return None
        return self.t_first - self.t_start

    @property
    def e2e_s(self):
        if self.t_end is None or self.t_start is None:
            return None
        return self.t_end - self.t_start

    @property
    def decode_tps(self):
        """(output tokens - 1) / (time of the last text chunk - time of the first)."""
        tokens = self.output_tokens
        if not self.ok or tokens is None or tokens < 2 or self.t_first is None or self.t_last is None:
            return None
        span = self.t_last - self.t_first
        if span <= 0:
            return None
        return (tokens - 1) / span

    def to_dict(self):
        return {
            "status": self.status,
            "error": self.error,
            "message": self.message,
            "ttft_s": _round(self.ttft_s),
            "e2e_s": _round(self.e2e_s),
            "decode_tps": _round(self.decode_tps),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "chunks": self.chunks,
            "usage_seen": self.usage_seen,
        }


def _round(value, digits=6):
    return None if value is None else round(value, digits)


def _error_message(body):
    """The ``error.message`` of an OpenAI-style error body, else the body's text (shortened)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        obj = json.loads(text)
    except ValueError:
        return text.strip()[:2000]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            return str(err.get("message", err))
        if err is not None:
            return str(err)
    return text.strip()[:2000]


class Endpoint:
    """A vLLM server: ``base_url`` (http or https, with or without a path prefix) and an API key."""

    def __init__(self, base_url, api_key=None, timeout=60.0, context=None):
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be http://HOST[:PORT] or https://HOST[:PORT], got %r" % base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key or None
        self.timeout = timeout
        self.context = context
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            self._headers["Authorization"] = "Bearer " + self.api_key

    def url(self, path):
        return self.base_url + path

    def connection(self, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.context or ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self):
        return dict(self._headers)

    def request(self, method, path, payload=None, timeout=None):
        """A plain request -> (status, body bytes). Raises ClientError when no answer comes."""
        conn = self.connection(timeout)
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        try:
            conn.request(method, self.prefix + path, body=body, headers=self._headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except ConnectionRefusedError as exc:
            raise ClientError("no server at %s (connection refused)" % self.base_url, "connection") from exc
        except (socket.timeout, TimeoutError) as exc:
            raise ClientError(
                "no answer from %s within %ss" % (self.url(path), timeout or self.timeout), "timeout",
            ) from exc
        except socket.gaierror as exc:
            raise ClientError("no server at %s (%s)" % (self.base_url, exc), "connection") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise ClientError("no usable answer from %s: %s" % (self.url(path), exc), "connection") from exc
        finally:
            conn.close()

    def get_json(self, path, timeout=None):
        """GET -> (status, decoded JSON or the text when it is not JSON)."""
        status, body = self.request("GET", path, timeout=timeout)
        text = body.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def stream_completion(self, payload, timeout=None, deadline=None, keep_body=False):
        """POST /v1/completions with ``stream: true`` and read the SSE stream to its end.

        ``timeout``: socket inactivity limit and the request's whole duration limit (seconds);
        ``deadline``: an absolute perf_counter() time it must not run past (the overall limit).
        Never raises for the server's or the network's faults: they end up in ``result.error``.
        """
        timeout = self.timeout if timeout is None else timeout
        result = RequestResult()
        start = time.perf_counter()
        end_by = start + timeout
        if deadline is not None:
            end_by = min(end_by, deadline)
        result.t_start = start
        body = json.dumps(payload).encode("utf-8")
        conn = self.connection(max(0.001, end_by - start))
        kept = [] if keep_body else None
        try:
            conn.request("POST", self.prefix + "/v1/completions", body=body, headers=self._headers)
            resp = conn.getresponse()
            result.status = resp.status
            if resp.status != 200:
                data = resp.read()
                result.error = str(resp.status)
                result.message = _error_message(data)
                result.body = data.decode("utf-8", "replace")
                return result
            self._read_stream(resp, result, end_by, kept, conn)
        except ConnectionRefusedError:
            result.error = "connection"
            result.message = "no server at %s (connection refused)" % self.base_url
        except (socket.timeout, TimeoutError):
            result.error = "timeout"
            result.message = "no data from %s within %.1fs" % (self.url("/v1/completions"), end_by - start)
        except (OSError, http.client.HTTPException) as exc:
            result.error = "connection"
            result.message = "%s: %s" % (type(exc).__name__, exc)
        finally:
            result.t_end = time.perf_counter()
            conn.close()
            if kept is not None:
                result.body = b"".join(kept).decode("utf-8", "replace")
        return result

    @staticmethod
    def _read_stream(resp, result, end_by, kept, conn):
        perf = time.perf_counter
        loads = json.loads
        buf = b""
        done = False
        while True:
            data = resp.read1(65536)
            if not data:
                break
            now = perf()
            if kept is not None:
                kept.append(data)
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n")
            buf += data
            while True:
                cut = buf.find(b"\n\n")
                if cut < 0:
                    break
                event = buf[:cut]
                buf = buf[cut + 2:]
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    item = line[5:].strip()
                    if item == b"[DONE]":
                        done = True
                        continue
                    try:
                        obj = loads(item)
                    except ValueError:
                        continue
                    if "error" in obj and obj["error"]:
                        result.error = "stream_error"
                        result.message = _error_message(item)
                        continue
                    choices = obj.get("choices")
                    if choices:
                        text = choices[0].get("text")
                        if text:
                            result.chunks += 1
                            if result.t_first is None:
                                result.t_first = now
                            result.t_last = now
                    usage = obj.get("usage")
                    if usage:
                        result.usage_seen = True
                        result.completion_tokens = usage.get("completion_tokens")
                        result.prompt_tokens = usage.get("prompt_tokens")
            if done:
                break
            if now > end_by:
                raise socket.timeout("deadline")
            sock = getattr(conn, "sock", None)
            if sock is not None:
                sock.settimeout(max(0.001, end_by - now))
        if not done and result.error is None:
            result.error = "incomplete"
            result.message = "the stream ended before data: [DONE]"


# -- statistics ---------------------------------------------------------------------------------
def summarize(values, digits=6):
    """mean/p50/p90/p99 (statistics.quantiles, method 'inclusive'), min, max and n of the numbers.

    No values: every figure None (n 0). One value: every figure that value.
    """
    data = [float(v) for v in values if v is not None]
    if not data:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None, "n": 0}
    if len(data) == 1:
        v = round(data[0], digits)
        return {"mean": v, "p50": v, "p90": v, "p99": v, "min": v, "max": v, "n": 1}
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {
        "mean": round(statistics.fmean(data), digits),
        "p50": round(cuts[49], digits),
        "p90": round(cuts[89], digits),
        "p99": round(cuts[98], digits),
        "min": round(min(data), digits),
        "max": round(max(data), digits),
        "n": len(data),
    }


def count_errors(results):
    errors = {}
    for res in results:
        if res.error is not None:
            errors[res.error] = errors.get(res.error, 0) + 1
    return dict(sorted(errors.items()))


def aggregate(results, wall_s):
    """The figures of a set of requests that ran within ``wall_s`` seconds."""
    ok = [r for r in results if r.ok]
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    messages = []
    for res in results:
        if res.error is not None and res.message and res.message not in messages:
            messages.append(res.message)
    return {
        "requests": len(results),
        "ok": len(ok),
        "errors": count_errors(results),
        "error_messages": messages[:5],
        "output_tokens": output_tokens,
        "usage_missing": sum(1 for r in ok if not r.usage_seen),
        "wall_s": round(wall_s, 6),
        "aggregate_tps": round(output_tokens / wall_s, 3) if wall_s > 0 else None,
        "ttft_s": summarize(r.ttft_s for r in ok),
        "decode_tps": summarize(r.decode_tps for r in ok),
        "e2e_s": summarize(r.e2e_s for r in ok),
    }


# -- prompts and payloads -----------------------------------------------------------------------
def make_prompt(words, prefix):
    """``prefix`` followed by ``words`` words (the prefix makes every prompt, and its cache key, unique)."""
    body = " ".join(_WORDS[i % len(_WORDS)] for i in range(max(0, int(words))))
    return "%s %s" % (prefix, body)


def completion_payload(model, prompt, max_tokens):
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": int(max_tokens),
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def context_prompt(length):
    """A list of ``length`` token ids: 11..30 repeated."""
    ids = CONTEXT_TOKEN_IDS
    return [ids[i % len(ids)] for i in range(int(length))]


# -- runs ---------------------------------------------------------------------------------------
def _worker(endpoint, payloads, results, barrier, request_timeout, deadline):
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        return
    for payload in payloads:
        if deadline is not None and time.perf_counter() >= deadline:
            res = RequestResult()
            res.error = "timeout"
            res.message = "the overall timeout ran out before this request was sent"
            results.append(res)
            continue
        results.append(endpoint.stream_completion(payload, timeout=request_timeout, deadline=deadline))


def run_level(endpoint, model, concurrency, rounds=1, max_tokens=256, prompt_words=64,
              request_timeout=300.0, deadline=None, sampler=None, run_id=None):
    """One concurrency level: ``concurrency`` streams, each sending ``rounds`` requests back to back.

    All ``concurrency * rounds`` requests are prepared first; the streams start together (a
    barrier), so exactly ``concurrency`` requests are in flight until the first stream finishes.
    ``sampler`` (optional): an object with start()/stop() run around the level (power).
    Returns (figures dict, list of RequestResult).
    """
    concurrency = int(concurrency)
    rounds = int(rounds)
    run_id = run_id or uuid.uuid4().hex[:12]
    per_worker = []
    for w in range(concurrency):
        payloads = []
        for r in range(rounds):
            prefix = "[probe %s c%d-%d]" % (run_id, concurrency, r * concurrency + w)
            payloads.append(completion_payload(model, make_prompt(prompt_words, prefix), max_tokens))
        per_worker.append(payloads)
    results = []
    barrier = threading.Barrier(concurrency + 1)
    threads = [
        threading.Thread(
            target=_worker, args=(endpoint, p, results, barrier, request_timeout, deadline),
            name="vllm-probe-%d" % i, daemon=True,
        )
        for i, p in enumerate(per_worker)
    ]
    for t in threads:
        t.start()
    if sampler is not None:
        sampler.start()
    t0 = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if sampler is not None:
        sampler.stop()
    figures = {"concurrency": concurrency}
    figures.update(aggregate(results, wall))
    return figures, results


def _soak_worker(endpoint, model, max_tokens, prompt_words, request_timeout, stop_at, deadline,
                 results, run_id, index, barrier):
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        return
    n = 0
    while True:
        now = time.perf_counter()
        if now >= stop_at or (deadline is not None and now >= deadline):
            return
        prefix = "[soak %s w%d-%d]" % (run_id, index, n)
        n += 1
        payload = completion_payload(model, make_prompt(prompt_words, prefix), max_tokens)
        res = endpoint.stream_completion(payload, timeout=request_timeout, deadline=deadline)
        results.append(res)
        if res.error in ("connection",):
            # a dead server refuses at once: do not spin, wait a little before the next try
            time.sleep(0.2)


def run_soak(endpoint, model, concurrency, seconds, max_tokens=256, prompt_words=64,
             request_timeout=300.0, deadline=None, sampler=None, run_id=None):
    """Keep ``concurrency`` streams busy for ``seconds``: requests, errors by status, 5xx count."""
    run_id = run_id or uuid.uuid4().hex[:12]
    results = []
    barrier = threading.Barrier(int(concurrency) + 1)
    stop_at = time.perf_counter() + float(seconds)
    threads = [
        threading.Thread(
            target=_soak_worker,
            args=(endpoint, model, max_tokens, prompt_words, request_timeout, stop_at, deadline,
                  results, run_id, i, barrier),
            name="vllm-soak-%d" % i, daemon=True,
        )
        for i in range(int(concurrency))
    ]
    for t in threads:
        t.start()
    if sampler is not None:
        sampler.start()
    t0 = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if sampler is not None:
        sampler.stop()
    figures = {"seconds": float(seconds), "concurrency": int(concurrency)}
    figures.update(aggregate(results, wall))
    figures["errors_5xx"] = sum(c for k, c in figures["errors"].items() if k.isdigit() and 500 <= int(k) < 600)
    return figures, results


# -- context probe ------------------------------------------------------------------------------
def parse_context_error(message):
    """vLLM's over-the-limit message -> {limit, requested, prompt_tokens, output_tokens} (None if absent).

    Knows 0.28.0's "maximum context length is 2048 tokens. However, you requested 256 output
    tokens and your prompt contains [at least] 2049 input tokens, for a total of [at least] 2305
    tokens." and the older "However, you requested 2305 tokens (2049 in the messages, 256 in the
    completion)."
    """
    text = message or ""
    found = {"limit": None, "requested": None, "prompt_tokens": None, "output_tokens": None}
    m = _RE_LIMIT.search(text)
    if m:
        found["limit"] = _num(m.group(1))
    m = _RE_OUTPUT.search(text)
    if m:
        found["output_tokens"] = _num(m.group(1))
    m = _RE_INPUT.search(text) or re.search(r"\(" + _NUM + r" in the messages", text)
    if m:
        found["prompt_tokens"] = _num(m.group(1))
    m = _RE_TOTAL.search(text) or _RE_REQUESTED.search(text)
    if m:
        found["requested"] = _num(m.group(1))
    elif found["prompt_tokens"] is not None and found["output_tokens"] is not None:
        found["requested"] = found["prompt_tokens"] + found["output_tokens"]
    return found


def context_probe(endpoint, model, max_model_len, max_tokens=256, request_timeout=300.0, deadline=None):
    """A prompt of (limit - max_tokens) token ids must be answered (200); one more must get a 400.

    Returns {limit, max_tokens, ok, fit: {...}, over: {...}}.
    """
    limit = int(max_model_len)
    fit_len = limit - int(max_tokens)
    fit = endpoint.stream_completion(
        completion_payload(model, context_prompt(fit_len), max_tokens), timeout=request_timeout, deadline=deadline,
    )
    over = endpoint.stream_completion(
        completion_payload(model, context_prompt(fit_len + 1), max_tokens), timeout=request_timeout, deadline=deadline,
    )
    parsed = parse_context_error(over.message) if over.status == 400 else parse_context_error("")
    fit_part = {
        "status": fit.status,
        "ok": fit.ok and fit.status == 200,
        "error": fit.error,
        "message": fit.message,
        "prompt_tokens": fit.prompt_tokens if fit.prompt_tokens is not None else fit_len,
        "sent_tokens": fit_len,
        "output_tokens": fit.output_tokens if fit.ok else None,
        "ttft_s": _round(fit.ttft_s),
        "e2e_s": _round(fit.e2e_s),
    }
    over_part = {
        "status": over.status,
        "ok": over.status == 400,
        "error": over.error,
        "message": over.message,
        "sent_tokens": fit_len + 1,
        "limit": parsed["limit"],
        "requested": parsed["requested"],
        "prompt_tokens": parsed["prompt_tokens"],
        "output_tokens": parsed["output_tokens"],
    }
    return {
        "limit": limit,
        "max_tokens": int(max_tokens),
        "ok": fit_part["ok"] and over_part["ok"],
        "fit": fit_part,
        "over": over_part,
    }
