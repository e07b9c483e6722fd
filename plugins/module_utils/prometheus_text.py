# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus exposition text (a /metrics answer): the collection's one reader of it.

Everything that reads /metrics reads it here: the modules and filters (vllm_agent's prefix-cache counters,
vllm_startup's cache info), the drain (filter ``gpuhost.inference.prometheus_total``), the watchdog on the box,
the benchmarks and the tests. No other file holds a regular expression over metric lines
(tests/unit/plugins/module_utils/test_prometheus_text.py fails when one appears).

    samples(text)                        -> [Sample(name, labels, value)] in text order
    total(text, name, labels=None)       -> the sum over the series of ``name`` whose labels include ``labels``
                                            (None when no such series; NaN values are left out)
    value(text, name, labels=None)       -> the one series' value (ValueError when several match; None: none)
    series(text, name)                   -> [(labels, value)] of ``name``
    totals(text, names=None)             -> {name: total} for every (or each wanted) sample name present

``text`` may also be the list ``samples()`` returned (parse once, ask many times). Names are sample names as
written (``vllm:request_success_total``, ``http_requests_total``, ``..._bucket``/``_sum``/``_count``).

It imports nothing but the standard library, because vllm_service installs this very file on the box beside the
watchdog (``/usr/local/lib/gpuhost-inference/prometheus_text.py``), which loads it by path and runs it with the
system python3. Where ``prometheus_client`` is importable (the vLLM venv has it), its parser reads the text
(``prometheus_client.parser.text_string_to_metric_families``) through the same interface; text it refuses
(it is strict) is read by the stdlib reader below, which skips the lines it cannot read.
"""
from __future__ import annotations

import math
import re
from collections import namedtuple

__all__ = ["Sample", "parse_stdlib", "samples", "series", "total", "totals", "value", "BACKEND"]

Sample = namedtuple("Sample", ["name", "labels", "value"])

try:  # pragma: no cover - depends on the interpreter
    from prometheus_client.parser import text_string_to_metric_families as _client_families
    BACKEND = "prometheus_client"
except ImportError:
    _client_families = None
    BACKEND = "stdlib"

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,)?')
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape(text):
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _float(text):
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(text)   # "NaN" included


def _line(line):
    """One sample line -> Sample, or None when it is not one (comment, blank, unreadable)."""
    line = line.strip()
    if not line or line[0] == "#":
        return None
    m = _NAME.match(line)
    if m is None:
        return None
    name = m.group(0)
    pos = m.end()
    labels = {}
    while pos < len(line) and line[pos] in " \t" and "{" in line[pos:pos + 2]:
        pos += 1
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            while pos < len(line) and line[pos] in " \t":
                pos += 1
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                return None
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
            if lm.group(3) is None:
                while pos < len(line) and line[pos] in " \t":
                    pos += 1
                if pos >= len(line) or line[pos] != "}":
                    return None
                pos += 1
                break
    fields = line[pos:].split()
    if not fields or (pos < len(line) and line[pos] not in " \t"):
        return None
    try:
        number = _float(fields[0])
    except ValueError:
        return None
    return Sample(name, labels, number)


def parse_stdlib(text):
    """The stdlib reader: every readable sample line of ``text`` -> [Sample], in text order."""
    out = []
    for line in (text or "").splitlines():
        got = _line(line)
        if got is not None:
            out.append(got)
    return out


def _parse_client(text):
    out = []
    for family in _client_families(text):
        for s in family.samples:
            out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return out


def samples(text, use_client=None):
    """``text`` (a /metrics answer; bytes are decoded as UTF-8) -> [Sample]; a list of Samples is returned as is.

    ``use_client``: None = prometheus_client's parser when importable, False = the stdlib reader, True = the
    client's (ImportError without it)."""
    if isinstance(text, list):
        return text
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text or ""
    if use_client is None:
        use_client = _client_families is not None
    if use_client:
        if _client_families is None:
            raise ImportError("prometheus_client is not installed")
        try:
            return _parse_client(text)
        except (ValueError, TypeError, IndexError, KeyError):
            pass  # the client is strict; what it refuses, the stdlib reader reads line by line
    return parse_stdlib(text)


def _matches(sample_labels, wanted):
    return all(sample_labels.get(k) == str(v) for k, v in (wanted or {}).items())


def series(text, name, labels=None):
    """[(labels, value)] of the series of ``name`` whose labels include ``labels``, in text order."""
    return [(s.labels, s.value) for s in samples(text) if s.name == name and _matches(s.labels, labels)]


def total(text, name, labels=None):
    """The sum over the series of ``name`` whose labels include ``labels`` (NaN left out); None when none."""
    found = [v for _labels, v in series(text, name, labels)]
    if not found:
        return None
    return sum(v for v in found if not math.isnan(v))


def value(text, name, labels=None):
    """The value of the one series of ``name`` whose labels include ``labels``; None when none.
    ValueError when several series match (say which labels tell them apart)."""
    found = series(text, name, labels)
    if not found:
        return None
    if len(found) > 1:
        raise ValueError("%d series of %s match %s: name the labels that tell them apart (%s)" % (
            len(found), name, labels or {}, [lb for lb, _v in found[:4]]))
    return found[0][1]


def totals(text, names=None):
    """{sample name: the sum over its series} for every name present (or those of ``names``); NaN values are left
    out (a name with only NaN values is absent)."""
    wanted = None if names is None else set(names)
    out = {}
    for s in samples(text):
        if wanted is not None and s.name not in wanted:
            continue
        if not math.isnan(s.value):
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out
