# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP side of the probe's client: a vLLM OpenAI-compatible server (Endpoint), the streamed
completion's SSE parser, and the engine that runs many streams at once.

Python standard library only (sockets and selectors; http.client and threads for https), never
imports AnsibleModule, so the vllm_probe module runs on any target and the benchmark scripts
import it without Ansible (benchmarks/bench_common.py):

    ep = Endpoint("http://127.0.0.1:8000", api_key=None)
    status, models = ep.get_json("/v1/models")
    res = ep.stream_completion(payload)          # one request -> RequestResult
    results, wall_s = run_streams(ep, sources)   # many streams at once -> [RequestResult]

Plain http goes through one thread and a selector (non-blocking sockets, one wake-up for every
socket that has data). https keeps the threaded path (http.client + ssl, one thread per stream):
a non-blocking TLS socket adds handshake and want-read/want-write states to every step of the
selector engine, and bytes that TLS has already decrypted and buffered never wake the selector,
so it would be a second engine in all but name, and one without a TLS server double to test it.

Output tokens are counted from the stream's final ``usage`` chunk (``stream_options:
{include_usage: true}``), never from the number of chunks: with speculative decoding one chunk
carries several tokens.
"""
from __future__ import annotations

import errno
import http.client
import json
import os
import re
import selectors
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_stats import round_or_none

__all__ = [
    "BURST_READS",
    "ClientError",
    "Endpoint",
    "RequestResult",
    "SseParser",
    "error_message",
    "run_streams",
]

# A stream whose text came in this many socket reads or fewer is a burst (RequestResult.burst).
BURST_READS = 2
DONE_GRACE_S = 1.0  # after data: [DONE], how long to wait for the end of the HTTP body

_RAW_DECODE = json.JSONDecoder().raw_decode
_TEXT_KEY = re.compile(r'"text"\s*:\s*"(.)', re.S).search


class ClientError(Exception):
    """The server could not be reached or answered something unusable (``kind``: connection, timeout, http)."""

    def __init__(self, msg, kind="connection", status=None, body=None):
        super().__init__(msg)
        self.msg = msg
        self.kind = kind
        self.status = status
        self.body = body


class RequestResult:
    """One request: HTTP status, timings (perf_counter seconds) and token counts from ``usage``.

    ``error`` is None for a complete 200 stream, else the key it is counted under: the HTTP status
    as a string (``"400"``, ``"503"``), ``"timeout"``, ``"connection"``, ``"incomplete"`` (the
    stream ended before ``[DONE]``) or ``"stream_error"`` (an error event inside the stream).
    """

    __slots__ = (
        "status", "error", "message", "t_start", "t_first", "t_last", "t_end", "chunks",
        "completion_tokens", "prompt_tokens", "usage_seen", "body", "text_reads",
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
        self.text_reads = 0  # socket reads that brought text (see burst)

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
        """A complete stream whose text came in at most BURST_READS socket reads although it has
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
        self._address = None
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            self._headers["Authorization"] = "Bearer " + self.api_key

    def url(self, path):
        return self.base_url + path

    def address(self):
        """(family, sockaddr) of the server, resolved once."""
        if self._address is None:
            try:
                info = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise ClientError("no server at %s (%s)" % (self.base_url, exc), "connection") from exc
            self._address = (info[0][0], info[0][4])
        return self._address

    def request_bytes(self, method, path, payload):
        """A whole HTTP/1.1 request (kept alive) for the selector path."""
        body = json.dumps(payload).encode("utf-8")
        host = self.host if self.port == 80 else "%s:%d" % (self.host, self.port)
        if ":" in self.host:
            host = "[%s]:%d" % (self.host, self.port)
        lines = ["%s %s HTTP/1.1" % (method, self.prefix + path), "Host: " + host]
        lines += ["%s: %s" % kv for kv in self._headers.items()]
        lines += ["Content-Length: %d" % len(body), "", ""]
        return "\r\n".join(lines).encode("latin-1") + body

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
                result.message = error_message(data)
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
        """Read the SSE body straight from the buffered socket (see SseParser for why)."""
        perf = time.perf_counter
        parser = SseParser(result, bool(resp.chunked), resp.length)
        fp = resp.fp
        sock = getattr(conn, "sock", None)
        if sock is not None:
            sock.settimeout(max(0.001, end_by - perf()))
        while not parser.finished:
            data = fp.read1(65536)
            if not data:
                break
            now = perf()
            if kept is not None:
                kept.append(data)
            parser.feed(data, now)
            if now > end_by and not parser.finished:
                raise socket.timeout("deadline")
        parser.close()


class SseParser:
    """The body of a streamed completion: undoes the HTTP chunked framing, splits the SSE events,
    and records in a RequestResult the text chunks (time of the first and last), ``usage``,
    error events and ``data: [DONE]``.

    It takes whatever the socket had (many events at once): http.client's own read1() hands out
    one HTTP chunk per call, which with vLLM is one token event, and that per-call cost is what
    limits how many streamed tokens a second one core can take in.
    """

    __slots__ = ("result", "chunked", "remaining", "raw", "left", "crlf", "buf", "done", "eof", "trailer")

    def __init__(self, result, chunked, length=None):
        self.result = result
        self.chunked = chunked
        self.remaining = length  # Content-Length, or None (chunked / until close)
        self.raw = b""           # bytes not yet de-chunked
        self.left = 0            # data bytes left in the current chunk
        self.crlf = 0            # bytes of the CRLF after a chunk still to skip
        self.buf = b""           # SSE text not yet split into events
        self.done = False        # data: [DONE] seen
        self.eof = False         # the body ended (last chunk and its blank line, or Content-Length reached)
        self.trailer = False     # the last chunk was read, its blank line (or trailers) not yet

    @property
    def finished(self):
        return self.done or self.eof

    def _end_trailer(self, rest):
        """After the last chunk: the body ends at a blank line (after any trailer fields)."""
        if rest.startswith(b"\r\n") or b"\r\n\r\n" in rest:
            self.eof = True
            self.trailer = False
            self.raw = b""
        else:
            self.trailer = True
            self.raw = rest

    def _dechunk(self, data):
        raw = self.raw + data if self.raw else data
        if self.trailer:
            self._end_trailer(raw)
            return b""
        pieces = []
        pos = 0
        end = len(raw)
        left = self.left
        crlf = self.crlf
        if left:  # the rest of a chunk cut by the previous read
            take = min(left, end)
            pieces.append(raw[:take])
            pos = take
            left -= take
            if not left:
                crlf = 2
        if crlf and pos < end:
            skip = min(crlf, end - pos)
            pos += skip
            crlf -= skip
        if left or crlf:
            self.raw, self.left, self.crlf = b"", left, crlf
            return b"".join(pieces)
        find = raw.find
        while pos < end:
            nl = find(b"\r\n", pos)
            if nl < 0:
                break
            line = raw[pos:nl]
            try:
                size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
            except ValueError:
                self.eof = True
                if self.result.error is None:
                    self.result.error = "incomplete"
                    self.result.message = "bad chunked framing: %r" % line[:40]
                pos = end
                break
            if size == 0:
                self._end_trailer(raw[nl + 2:])
                self.left = self.crlf = 0
                return b"".join(pieces)
            start = nl + 2
            stop = start + size
            if stop + 2 <= end:  # the whole chunk is here (the usual case)
                pieces.append(raw[start:stop])
                pos = stop + 2
                continue
            pieces.append(raw[start:stop])
            if stop <= end:
                left, crlf = 0, stop + 2 - end
            else:
                left, crlf = stop - end, 0
            pos = end
            break
        self.raw = raw[pos:]
        self.left = left
        self.crlf = crlf
        return b"".join(pieces)

    def _body(self, data):
        """The body bytes in `data`: de-chunked, or cut at Content-Length (sets eof)."""
        if self.chunked:
            return self._dechunk(data)
        if self.remaining is not None:
            data = data[:self.remaining]
            self.remaining -= len(data)
            self.eof = self.remaining <= 0
        return data

    def feed(self, data, now):
        if self.eof:
            return
        data = self._body(data)
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
# One thread and a selector for plain http: far less per-token overhead than a thread per stream,
# so one core takes in more tokens per second than the streams of a fast server produce.

class _Flight:
    """One request in flight on a non-blocking socket."""

    __slots__ = ("stream", "sock", "result", "request", "out", "state", "head", "parser", "end_by",
                 "reused", "keep_alive")

    def __init__(self, stream, sock, result, request, end_by, reused):
        self.stream = stream
        self.sock = sock
        self.result = result
        self.request = request
        self.out = request
        self.state = "send" if reused else "connect"
        self.head = b""
        self.parser = None
        self.end_by = end_by
        self.reused = reused
        self.keep_alive = False


class _BodyCollector(SseParser):
    """A non-200 answer: keep its (de-chunked) body for the error message."""

    __slots__ = ("body",)

    def __init__(self, result, chunked, length=None):
        super().__init__(result, chunked, length)
        self.body = b""

    def feed(self, data, now):
        if self.eof:
            return
        data = self._body(data)
        if len(self.body) < 65536:
            self.body += data

    def close(self):
        pass


def _parse_head(head):
    """HTTP response head -> (status, chunked, content length or None, keep-alive)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2)
    status = int(parts[1])
    keep_alive = parts[0].upper() == b"HTTP/1.1"
    chunked = False
    length = None
    for line in lines[1:]:
        name, _sep, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip().lower()
        if name == b"transfer-encoding" and b"chunked" in value:
            chunked = True
        elif name == b"content-length":
            length = int(value)
        elif name == b"connection":
            keep_alive = b"close" not in value and (keep_alive or b"keep-alive" in value)
    if chunked:
        length = None
    elif length is None:
        keep_alive = False  # the body ends when the server closes
    return status, chunked, length, keep_alive


def _run_streams(endpoint, sources, request_timeout, deadline=None, retry_pause=0.2):
    """Run ``len(sources)`` streams at once; a stream sends the payloads its source gives
    (``source()`` -> payload dict, or None when the stream is over) one after the other, over one
    kept-alive connection while the server keeps it open (as aiohttp-based clients do).

    Returns the RequestResults in the order they ended.
    """
    perf = time.perf_counter
    sel = selectors.DefaultSelector()
    addr = endpoint.address()
    results = []
    flights = {}
    idle = {}     # stream -> kept-alive socket
    waiting = []  # (time, stream): a stream pausing after a refused connection
    hard_end = deadline if deadline is not None else float("inf")

    def new_socket():
        sock = socket.socket(addr[0], socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return sock

    def launch(stream, res, request, sock, now):
        flight = _Flight(stream, sock, res, request, min(res.t_start + request_timeout, hard_end), sock is not None)
        if sock is None:
            flight.sock = sock = new_socket()
            err = sock.connect_ex(addr[1])
            if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                flights[sock] = flight
                finish(flight, perf(), "connection", _connect_message(endpoint, err))
                return
        flights[sock] = flight
        sel.register(sock, selectors.EVENT_WRITE, flight)

    def start(stream):
        payload = sources[stream]()
        if payload is None:
            sock = idle.pop(stream, None)
            if sock is not None:
                sock.close()
            return
        res = RequestResult()
        now = perf()
        res.t_start = now
        if now >= hard_end:
            res.error = "timeout"
            res.message = "the overall timeout ran out before this request was sent"
            res.t_end = now
            results.append(res)
            return
        launch(stream, res, endpoint.request_bytes("POST", "/v1/completions", payload), idle.pop(stream, None), now)

    def drop(flight):
        try:
            sel.unregister(flight.sock)
        except (KeyError, ValueError):
            pass
        del flights[flight.sock]

    def finish(flight, now, error=None, message=None, reuse=False):
        res = flight.result
        if error is not None and res.error is None:
            res.error = error
            res.message = message
        if res.t_end is None:
            res.t_end = now
        drop(flight)
        if reuse:
            idle[flight.stream] = flight.sock
        else:
            flight.sock.close()
        results.append(res)
        if res.error == "connection":
            waiting.append((now + retry_pause, flight.stream))
        else:
            start(flight.stream)

    def retry_fresh(flight, now):
        """A kept-alive socket the server had closed: send the request again on a new one."""
        drop(flight)
        flight.sock.close()
        flight.result.t_start = now
        launch(flight.stream, flight.result, flight.request, None, now)

    def fail(flight, now, message):
        if flight.reused and flight.state in ("send", "head") and not flight.head:
            retry_fresh(flight, now)
        else:
            finish(flight, now, "connection", message)

    def on_write(flight, now):
        sock = flight.sock
        if flight.state == "connect":
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                finish(flight, now, "connection", _connect_message(endpoint, err))
                return
            flight.state = "send"
        try:
            sent = sock.send(flight.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            fail(flight, now, "%s: %s" % (type(exc).__name__, exc))
            return
        flight.out = flight.out[sent:]
        if not flight.out:
            flight.state = "head"
            sel.modify(sock, selectors.EVENT_READ, flight)

    def on_read(flight, now):
        try:
            data = flight.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            fail(flight, now, "%s: %s" % (type(exc).__name__, exc))
            return
        res = flight.result
        if not data:
            if flight.state == "head":
                fail(flight, now, "the server closed the connection before answering")
            else:
                end_body(flight, now, reuse=False)
            return
        if flight.state == "head":
            head = flight.head + data
            cut = head.find(b"\r\n\r\n")
            if cut < 0:
                if len(head) > 65536:
                    finish(flight, now, "connection", "no HTTP answer (the head is over 64 KiB)")
                else:
                    flight.head = head
                return
            try:
                status, chunked, length, flight.keep_alive = _parse_head(head[:cut])
            except (ValueError, IndexError):
                finish(flight, now, "connection", "not an HTTP answer: %r" % head[:80])
                return
            res.status = status
            flight.parser = (SseParser if status == 200 else _BodyCollector)(res, chunked, length)
            flight.state = "body"
            data = head[cut + 4:]
            flight.head = b""
            if length == 0:
                flight.parser.eof = True
        parser = flight.parser
        if data:
            was_done = parser.done
            parser.feed(data, now)
            if parser.done and not was_done:
                res.t_end = now
                flight.end_by = min(flight.end_by, now + DONE_GRACE_S)
        if parser.eof:
            end_body(flight, now, reuse=flight.keep_alive)

    def end_body(flight, now, reuse):
        res = flight.result
        parser = flight.parser
        if res.status == 200:
            parser.close()
            finish(flight, now, reuse=reuse and res.error is None)
        else:
            res.error = str(res.status)
            res.message = error_message(parser.body)
            res.body = parser.body.decode("utf-8", "replace")
            finish(flight, now, reuse=reuse)

    for stream in range(len(sources)):
        start(stream)
    while flights or waiting:
        now = perf()
        if waiting:
            due = [w for w in waiting if w[0] <= now]
            if due:
                waiting[:] = [w for w in waiting if w[0] > now]
                for _t, stream in due:
                    start(stream)
                continue
        wake = min([f.end_by for f in flights.values()] + [w[0] for w in waiting])
        if flights:
            events = sel.select(max(0.0, min(wake - now, 1.0)))
        else:
            time.sleep(max(0.0, min(wake - now, 1.0)))
            events = ()
        now = perf()
        for key, mask in events:
            flight = key.data
            if flights.get(flight.sock) is not flight:
                continue
            if mask & selectors.EVENT_WRITE:
                on_write(flight, now)
            elif mask & selectors.EVENT_READ:
                on_read(flight, now)
        for flight in [f for f in flights.values() if f.end_by <= now]:
            if flight.parser is not None and flight.parser.done:
                finish(flight, now)  # the stream was complete; only the HTTP body's end is missing
            else:
                finish(flight, now, "timeout", "no complete answer from %s within %.1fs" % (
                    endpoint.url("/v1/completions"), flight.end_by - flight.result.t_start))
    for sock in idle.values():
        sock.close()
    sel.close()
    return results


def _connect_message(endpoint, err):
    if err == errno.ECONNREFUSED:
        return "no server at %s (connection refused)" % endpoint.base_url
    return "cannot connect to %s: %s" % (endpoint.base_url, os.strerror(err))


def _threaded_streams(endpoint, sources, request_timeout, deadline=None, retry_pause=0.2):
    """The same as _run_streams with a thread per stream and http.client (https)."""
    results = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(sources))

    def worker(source):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        while True:
            payload = source()
            if payload is None:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                res = RequestResult()
                res.error = "timeout"
                res.message = "the overall timeout ran out before this request was sent"
            else:
                res = endpoint.stream_completion(payload, timeout=request_timeout, deadline=deadline)
            with lock:
                results.append(res)
            if res.error == "connection":
                time.sleep(retry_pause)

    threads = [threading.Thread(target=worker, args=(s,), name="vllm-probe-%d" % i, daemon=True)
               for i, s in enumerate(sources)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_streams(endpoint, sources, request_timeout=300.0, deadline=None, sampler=None):
    """Run the streams (see _run_streams) -> (results, wall seconds); ``sampler`` (power) runs around them."""
    if sampler is not None:
        sampler.start()
    t0 = time.perf_counter()
    if endpoint.scheme == "http":
        results = _run_streams(endpoint, sources, request_timeout, deadline)
    else:
        results = _threaded_streams(endpoint, sources, request_timeout, deadline)
    wall = time.perf_counter() - t0
    if sampler is not None:
        sampler.stop()
    return results, wall
