# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP side of the probe's client: a vLLM OpenAI-compatible server (Endpoint), the streamed
completion's SSE events, and many streams at once -- on aiohttp.

Why aiohttp: it is the client of vLLM's own ``vllm bench serve`` (so the probe reads a stream the way
vLLM's benchmark does), vLLM 0.28.0 depends on it (every vLLM venv has it: the CPU wheelhouse holds
aiohttp 3.14.5; vllm_probe and vllm_agent_probe run with the venv's python), its C parser (llhttp)
does the HTTP/1.1 framing and the chunked decoding, and one event loop runs every stream, plain http
and https alike (no thread per stream). httpx (0.29 in the venv; the OpenAI and Anthropic SDKs
bring their own httpx2) runs a stream per thread or per anyio task at a higher cost per token, and
vLLM's bench does not use it; the agent level sends with the SDKs, as the agents do. What is left
here is the SSE event parser (SseParser: a few lines over the body bytes aiohttp hands out), the
timings and the retry rule.

    ep = Endpoint("http://127.0.0.1:8000", api_key=None)
    status, models = ep.get_json("/v1/models")
    res = ep.stream_completion(payload)          # one request -> RequestResult
    results, wall_s = run_streams(ep, sources)   # many streams at once -> [RequestResult]

Outside a venv (vllm_verify_wait runs as root with the host's python, also while the venv is
replaced or rolled back) plain_request is the one standard-library helper: Ansible's own open_url
for a few short GET/POST requests, no streams.

Transport hiccups: a request that fails before any byte of an answer came (connection refused or
reset, the server closing a kept-alive connection without answering) is sent again the way the
OpenAI and Anthropic Python SDKs do it (their DEFAULT_MAX_RETRIES 2, a pause of 0.5 s x 2^n, at most
8 s, less 0-25 % jitter: ``_calculate_retry_timeout`` of their ``_base_client``); the retries are
counted (RequestResult.retries). An answer with an error status, an error event in a stream, a
stream cut short and a timeout are not retried: they are what an agent's user would see fail. A
retried request's TTFT and duration are those of the attempt that was answered.

Output tokens are counted from the stream's final ``usage`` chunk (``stream_options:
{include_usage: true}``), never from the number of chunks: with speculative decoding one chunk
carries several tokens.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import ssl
import time
import traceback
from urllib.parse import urlsplit

from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_stats import round_or_none

try:
    import aiohttp
except ImportError:
    aiohttp = None
    AIOHTTP_IMPORT_ERROR = traceback.format_exc()
else:
    AIOHTTP_IMPORT_ERROR = None

HAS_AIOHTTP = aiohttp is not None

__all__ = [
    "AIOHTTP_IMPORT_ERROR",
    "BURST_READS",
    "ClientError",
    "Endpoint",
    "HAS_AIOHTTP",
    "MAX_RETRIES",
    "RequestResult",
    "SseParser",
    "error_message",
    "plain_request",
    "retry_delay",
    "run_streams",
]

# A stream whose text came in this many body reads or fewer is a burst (RequestResult.burst).
BURST_READS = 2
DONE_GRACE_S = 1.0  # after data: [DONE], how long to wait for the end of the HTTP body (to keep the connection)
# The agents' SDKs (openai and anthropic _constants: DEFAULT_MAX_RETRIES, INITIAL_RETRY_DELAY, MAX_RETRY_DELAY).
MAX_RETRIES = 2
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0

_RAW_DECODE = json.JSONDecoder().raw_decode
_TEXT_KEY = re.compile(r'"text"\s*:\s*"(.)', re.S).search


def retry_delay(retries_taken, rand=random.random):
    """The pause before retry number ``retries_taken + 1``, as the SDKs compute it (no Retry-After: a
    transport failure has no answer to carry one)."""
    return min(INITIAL_RETRY_DELAY * 2.0 ** min(retries_taken, 1000), MAX_RETRY_DELAY) * (1 - 0.25 * rand())


class ClientError(Exception):
    """The server could not be reached or answered something unusable (``kind``: connection, timeout, http)."""

    def __init__(self, msg, kind="connection", status=None, body=None, retries=0):
        super().__init__(msg)
        self.msg = msg
        self.kind = kind
        self.status = status
        self.body = body
        self.retries = retries


class RequestResult:
    """One request: HTTP status, timings (perf_counter seconds) and token counts from ``usage``.

    ``error`` is None for a complete 200 stream, else the key it is counted under: the HTTP status
    as a string (``"400"``, ``"503"``), ``"timeout"``, ``"connection"`` (no answer, after the
    retries), ``"incomplete"`` (the stream ended before ``[DONE]``) or ``"stream_error"`` (an error
    event inside the stream). ``retries``: how often it was sent again after a transport failure
    before any byte of an answer (see the module's docstring).
    """

    __slots__ = (
        "status", "error", "message", "t_start", "t_first", "t_last", "t_end", "chunks",
        "completion_tokens", "prompt_tokens", "usage_seen", "body", "text_reads", "retries",
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
        self.text_reads = 0  # body reads that brought text (see burst)
        self.retries = 0

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

    @property
    def burst(self):
        """A complete stream whose text came in at most BURST_READS body reads although it has
        more than BURST_READS tokens: the tokens were not seen as they were made (a client that
        could not read in time, or a proxy that buffers), so its decode rate means nothing."""
        return self.ok and self.output_tokens is not None and self.output_tokens > BURST_READS \
            and self.text_reads <= BURST_READS

    def to_dict(self):
        return {
            "status": self.status,
            "error": self.error,
            "message": self.message,
            "ttft_s": round_or_none(self.ttft_s),
            "e2e_s": round_or_none(self.e2e_s),
            "decode_tps": round_or_none(self.decode_tps),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "chunks": self.chunks,
            "usage_seen": self.usage_seen,
            "text_reads": self.text_reads,
            "burst": self.burst,
            "retries": self.retries,
        }


def error_message(body):
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


def _need_aiohttp():
    if aiohttp is None:
        raise ClientError("the probe's HTTP client needs the Python package aiohttp (in every vLLM venv: run the "
                          "module with the venv's python)\n%s" % AIOHTTP_IMPORT_ERROR, "connection")


# The options of a module that sends requests to one server, as Endpoint takes them (documented once: the doc
# fragment gpuhost.inference.vllm_server).
SERVER_ARGUMENT_SPEC = {
    "base_url": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
}


class Endpoint:
    """A vLLM server: ``base_url`` (http or https, with or without a path prefix) and an API key.
    ``context``: an ssl.SSLContext for https (default: the system's trust store)."""

    def __init__(self, base_url, api_key=None, timeout=60.0, context=None):
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be http://HOST[:PORT] or https://HOST[:PORT], got %r" % base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme = parts.scheme
        self.timeout = timeout
        self.api_key = api_key or None
        self.context = context
        self.retries = 0  # plain requests (request, get_json) sent again after a transport failure
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            self._headers["Authorization"] = "Bearer " + self.api_key

    def url(self, path):
        return self.base_url + path

    def headers(self):
        return dict(self._headers)

    def session(self, streams=1):
        """An aiohttp session for this server: kept-alive connections, at most ``streams`` of them
        (as ``vllm bench serve`` sets its connector), TLS with ``context``. Inside a running loop."""
        _need_aiohttp()
        connector = aiohttp.TCPConnector(limit=max(1, int(streams)), limit_per_host=0, force_close=False,
                                         keepalive_timeout=60, ssl=self._ssl())
        return aiohttp.ClientSession(connector=connector, headers=self._headers, auto_decompress=False,
                                     timeout=aiohttp.ClientTimeout(total=None))

    def _ssl(self):
        if self.scheme != "https":
            return True  # aiohttp's default; plain http has no TLS
        return self.context or ssl.create_default_context()

    # -- plain requests ------------------------------------------------------------------------
    def request(self, method, path, payload=None, timeout=None, headers=None):
        """A plain request -> (status, body bytes); ``headers`` are sent beside (or instead of) the
        endpoint's own. Raises ClientError when no answer comes (after the retries of a transport
        failure, counted in ``self.retries``)."""
        _need_aiohttp()
        timeout = self.timeout if timeout is None else timeout
        return asyncio.run(self._request(method, path, payload, timeout, headers))

    async def _request(self, method, path, payload, timeout, headers=None):
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        end_by = time.perf_counter() + timeout
        retries = 0
        async with self.session() as session:
            while True:
                remaining = max(0.001, end_by - time.perf_counter())
                try:
                    async with session.request(method, self.url(path), data=body, headers=headers,
                                               timeout=aiohttp.ClientTimeout(total=remaining)) as resp:
                        return resp.status, await resp.read()
                except asyncio.TimeoutError as exc:
                    raise ClientError("no answer from %s within %ss" % (self.url(path), timeout), "timeout",
                                      retries=retries) from exc
                except aiohttp.ClientError as exc:
                    retry, message = _transport_failure(self, exc)
                    pause = retry_delay(retries)
                    if retry and retries < MAX_RETRIES and time.perf_counter() + pause < end_by:
                        retries += 1
                        self.retries += 1
                        await asyncio.sleep(pause)
                        continue
                    if retries:
                        message += " (after %d retries)" % retries
                    raise ClientError(message, "connection", retries=retries) from exc

    def get_json(self, path, timeout=None):
        """GET -> (status, decoded JSON or the text when it is not JSON)."""
        status, body = self.request("GET", path, timeout=timeout)
        text = body.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    # -- streams -------------------------------------------------------------------------------
    def stream_completion(self, payload, timeout=None, deadline=None, keep_body=False):
        """POST /v1/completions with ``stream: true`` and read the SSE stream to its end.

        ``timeout``: the request's whole duration limit (seconds); ``deadline``: an absolute
        perf_counter() time it must not run past (the overall limit). Never raises for the server's
        or the network's faults: they end up in ``result.error``.
        """
        _need_aiohttp()
        timeout = self.timeout if timeout is None else timeout

        async def one():
            async with self.session() as session:
                return await _stream(session, self, payload, timeout, deadline, keep_body)
        return asyncio.run(one())


def _transport_failure(endpoint, exc):
    """(retry, message) of an aiohttp exception raised before any answer: retry for a connection
    refused or reset, or closed without an answer (the kept-alive race); not for anything else."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        code = getattr(getattr(exc, "os_error", None), "errno", None)
        reason = os.strerror(code).lower() if code else str(exc)
        return True, "no server at %s (%s)" % (endpoint.base_url, reason)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True, "the server closed the connection before answering"
    if isinstance(exc, aiohttp.ClientOSError):
        return True, "%s: %s" % (type(exc).__name__, exc)
    return False, "no usable answer from %s: %s: %s" % (endpoint.base_url, type(exc).__name__, exc)


async def _stream(session, endpoint, payload, timeout, deadline=None, keep_body=False, result=None):
    """One streamed completion on ``session`` -> its RequestResult (never raises for the server's or
    the network's faults). Transport failures before any byte of an answer are retried (MAX_RETRIES)."""
    perf = time.perf_counter
    result = RequestResult() if result is None else result
    result.t_start = start = perf()
    end_by = start + timeout
    if deadline is not None:
        end_by = min(end_by, deadline)
    url = endpoint.url("/v1/completions")
    body = json.dumps(payload).encode("utf-8")
    kept = [] if keep_body else None
    resp = None
    try:
        while resp is None:
            remaining = end_by - perf()
            if remaining <= 0:
                raise asyncio.TimeoutError()
            result.t_start = perf()  # the timings are those of the attempt that was answered
            try:
                resp = await session.post(url, data=body, timeout=aiohttp.ClientTimeout(total=remaining))
            except aiohttp.ClientError as exc:
                if isinstance(exc, asyncio.TimeoutError):
                    raise
                retry, message = _transport_failure(endpoint, exc)
                pause = retry_delay(result.retries)
                if retry and result.retries < MAX_RETRIES and perf() + pause < end_by:
                    result.retries += 1
                    await asyncio.sleep(pause)
                    continue
                result.error = "connection"
                result.message = message + (" (after %d retries)" % result.retries if result.retries else "")
                return result
        async with resp:
            result.status = resp.status
            if resp.status != 200:
                data = await resp.read()
                result.error = str(resp.status)
                result.message = error_message(data)
                result.body = data.decode("utf-8", "replace")
                return result
            await _read_events(resp.content, result, kept, perf)
    except asyncio.TimeoutError:
        if result.error is None:
            result.error = "timeout"
            result.message = "no complete answer from %s within %.1fs" % (url, end_by - start)
    except aiohttp.ClientError as exc:
        if result.error is None:
            result.error = "connection"
            result.message = "%s: %s" % (type(exc).__name__, exc)
    finally:
        if result.t_end is None:
            result.t_end = perf()
        if kept is not None:
            result.body = b"".join(kept).decode("utf-8", "replace")
    return result


async def _read_events(content, result, kept, perf):
    """The SSE body as aiohttp hands it out (de-chunked, whatever had arrived): every read goes to
    the parser at once (see SseParser). After ``data: [DONE]`` the HTTP body's end is awaited a
    moment, so that the connection is kept for the stream's next request."""
    parser = SseParser(result)
    try:
        while not parser.done:
            data = await content.readany()
            if not data:
                break
            now = perf()
            if kept is not None:
                kept.append(data)
            parser.feed(data, now)
            if parser.done:
                result.t_end = now
    except aiohttp.ClientPayloadError:
        pass  # the body was cut short: an incomplete stream unless [DONE] had come (parser.close)
    if parser.done and not content.at_eof():
        try:
            await asyncio.wait_for(content.read(), DONE_GRACE_S)
        except (asyncio.TimeoutError, aiohttp.ClientError):
            pass
    parser.close()


class SseParser:
    """The body of a streamed completion (HTTP framing already undone by aiohttp): splits the SSE
    events and records in a RequestResult the text chunks (time of the first and last), ``usage``,
    error events and ``data: [DONE]``.

    It takes whatever the connection had (many events at once) and decodes only what it must: a
    token event's text is found without a JSON decode, so one core takes in more tokens per second
    than the streams of a fast server produce.
    """

    __slots__ = ("result", "buf", "done")

    def __init__(self, result):
        self.result = result
        self.buf = b""           # SSE text not yet split into events
        self.done = False        # data: [DONE] seen

    def feed(self, data, now):
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        buf = self.buf + data if self.buf else data
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.buf = buf
            return
        self.buf = buf[cut + 2:]
        # whole events only, so no UTF-8 sequence is cut; one decode for all of them
        result = self.result
        chunks_before = result.chunks
        decode = _RAW_DECODE
        for event in buf[:cut].decode("utf-8", "replace").split("\n\n"):
            if event[:6] == "data: " and "\n" not in event:
                items = (event[6:],)
            else:
                items = [line[5:].strip() for line in event.split("\n") if line[:5] == "data:"]
            for item in items:
                if item == "[DONE]":
                    self.done = True
                    continue
                if '"usage"' not in item and '"error"' not in item:
                    # a token event: is choices[0].text empty? (a "text" key with unescaped quotes
                    # can only be a key in valid JSON); anything else is decoded in full
                    m = _TEXT_KEY(item)
                    if m is not None:
                        if m.group(1) != '"':
                            result.chunks += 1
                            if result.t_first is None:
                                result.t_first = now
                            result.t_last = now
                        continue
                try:
                    obj = decode(item)[0]
                except ValueError:
                    continue
                if not isinstance(obj, dict):  # json never decodes to a dict subclass
                    continue
                choices = obj.get("choices")
                if choices:
                    if choices[0].get("text"):
                        result.chunks += 1
                        if result.t_first is None:
                            result.t_first = now
                        result.t_last = now
                elif obj.get("error"):
                    result.error = "stream_error"
                    result.message = error_message(item)
                    continue
                usage = obj.get("usage")
                if usage:
                    result.usage_seen = True
                    result.completion_tokens = usage.get("completion_tokens")
                    result.prompt_tokens = usage.get("prompt_tokens")
        if result.chunks > chunks_before:
            result.text_reads += 1

    def close(self):
        """The body ended: a stream without data: [DONE] is an error."""
        if not self.done and self.result.error is None:
            self.result.error = "incomplete"
            self.result.message = "the stream ended before data: [DONE]"


# -- running streams ----------------------------------------------------------------------------
async def _run_streams(endpoint, sources, request_timeout, deadline=None, retry_pause=0.2):
    """Run ``len(sources)`` streams at once on one event loop; a stream sends the payloads its source
    gives (``source()`` -> payload dict, or None when the stream is over) one after the other, over
    one kept-alive connection while the server keeps it open (as ``vllm bench serve`` does).

    Returns the RequestResults in the order they ended.
    """
    results = []
    hard_end = deadline if deadline is not None else float("inf")

    async def stream(source, session):
        while True:
            payload = source()
            if payload is None:
                return
            if time.perf_counter() >= hard_end:
                res = RequestResult()
                res.t_start = res.t_end = time.perf_counter()
                res.error = "timeout"
                res.message = "the overall timeout ran out before this request was sent"
                results.append(res)
                continue
            res = await _stream(session, endpoint, payload, request_timeout, deadline)
            results.append(res)
            if res.error == "connection":
                await asyncio.sleep(retry_pause)  # no server even after the retries: do not spin

    async with endpoint.session(len(sources)) as session:
        await asyncio.gather(*(stream(source, session) for source in sources))
    return results


def run_streams(endpoint, sources, request_timeout=300.0, deadline=None, sampler=None):
    """Run the streams (see _run_streams) -> (results, wall seconds); ``sampler`` (power) runs around them."""
    _need_aiohttp()
    if sampler is not None:
        sampler.start()
    t0 = time.perf_counter()
    try:
        results = asyncio.run(_run_streams(endpoint, sources, request_timeout, deadline))
    finally:
        wall = time.perf_counter() - t0
        if sampler is not None:
            sampler.stop()
    return results, wall


# -- the standard-library helper ----------------------------------------------------------------
def plain_request(endpoint, method, path, payload=None, timeout=None):
    """One short request without aiohttp -> (status, body bytes), through Ansible's own open_url
    (standard library): for a module that runs with the host's python, outside any venv
    (vllm_verify_wait). No streams, no retries; raises ClientError when no answer comes."""
    # pylint: disable=import-outside-toplevel
    import socket
    import urllib.error

    from ansible.module_utils.urls import ConnectionError as UrlsConnectionError, open_url

    timeout = endpoint.timeout if timeout is None else timeout
    body = None if payload is None else json.dumps(payload).encode("utf-8")
    try:
        with open_url(endpoint.url(path), data=body, headers=endpoint.headers(), method=method, timeout=timeout,
                      validate_certs=True, use_proxy=False) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() or b""
    except (socket.timeout, TimeoutError) as exc:
        raise ClientError("no answer from %s within %ss" % (endpoint.url(path), timeout), "timeout") from exc
    except urllib.error.URLError as exc:
        reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
        raise ClientError("no server at %s (%s)" % (endpoint.base_url, reason.lower()), "connection") from exc
    except (OSError, UrlsConnectionError, ValueError) as exc:
        raise ClientError("no usable answer from %s: %s" % (endpoint.url(path), exc), "connection") from exc
