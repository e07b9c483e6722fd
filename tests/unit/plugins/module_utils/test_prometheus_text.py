"""Unit tests of the collection's one reader of Prometheus text (plugins/module_utils/prometheus_text.py), of its
Jinja filters (plugins/filter/prometheus_text.py), and of the rule that no other file reads metric lines with a
regular expression. Data-driven: tests/unit/data/prometheus_text_cases.yaml, over the real vLLM 0.28.0 captures of
tests/fixtures/vllm-0.28.0/ (metrics.txt and the watchdog's snapshots). Its Jinja filters: tests/unit/plugins/filter/
test_prometheus_text.py (module_utils tests run without ansible.errors)."""
from __future__ import annotations

import math
import os
import re

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import prometheus_text as pt
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, ROOT, case_ids, case_text, load_cases, read_fixture

PARSE = load_cases("prometheus_text_cases.yaml", "parse")
QUERY = load_cases("prometheus_text_cases.yaml", "query")
GUARD = load_cases("prometheus_text_cases.yaml", "guard")


def _num(value):
    return float(value) if isinstance(value, str) else value


def _same(got, want):
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return got == want


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_stdlib_reader_reads_the_samples(case):
    got = pt.parse_stdlib(case["text"])
    want = [pt.Sample(n, lb, _num(v)) for n, lb, v in case["expect"]]
    assert [(s.name, s.labels) for s in got] == [(s.name, s.labels) for s in want]
    assert all(_same(g.value, w.value) for g, w in zip(got, want)), got


@pytest.mark.parametrize("case", QUERY, ids=case_ids(QUERY))
@pytest.mark.parametrize("backend", ["stdlib", "prometheus_client"])
def test_questions_over_the_captures(case, backend, monkeypatch):
    text = case_text(case)
    if backend == "prometheus_client":
        pytest.importorskip("prometheus_client")
        parsed = pt.samples(text, use_client=True)
    else:
        parsed = pt.samples(text, use_client=False)
    assert len(parsed) == case["samples"]
    for ask in case["ask"]:
        if ask["fn"] == "series_labels":
            (labels, _value), = pt.series(parsed, *ask["args"])
            assert {k: labels.get(k) for k in ask["expect_keys"]} == ask["expect_keys"], ask
            continue
        fn = getattr(pt, ask["fn"])
        if "error" in ask:
            with pytest.raises(ValueError, match=re.escape(ask["error"])):
                fn(parsed, *ask["args"])
            continue
        assert fn(parsed, *ask["args"]) == ask["expect"], ask


def test_both_parsers_agree_on_every_capture():
    """Where prometheus_client is importable (the vLLM venv), its parser and the stdlib reader give the same samples."""
    pytest.importorskip("prometheus_client")
    watchdog_dir = os.path.join(FIXTURES, "vllm-0.28.0", "watchdog")
    files = ["vllm-0.28.0/metrics.txt"] + ["vllm-0.28.0/watchdog/" + f for f in sorted(os.listdir(watchdog_dir))
                                           if f.endswith(".txt")]
    for name in files:
        text = read_fixture(name)
        client = sorted((s.name, sorted(s.labels.items()), s.value) for s in pt.samples(text, use_client=True))
        ours = sorted((s.name, sorted(s.labels.items()), s.value) for s in pt.parse_stdlib(text))
        assert client == ours, name


def test_text_the_client_refuses_is_read_by_the_stdlib_reader():
    pytest.importorskip("prometheus_client")
    text = "m 1\nthis is not exposition text\nn 2\n"
    assert [s.name for s in pt.samples(text)] == ["m", "n"]


# -- no regex over metric lines outside the reader --------------------------------------------------------------
# A call that matches text with a pattern (Python's re, Jinja's regex_* filters and tests, str.startswith, a variable
# named *_pattern / *_regex), followed within its first two lines by something only a metric line has: a vLLM name,
# a counter/histogram suffix, the label block idiom \{[^}]*\}, or the metric name's character class.
_CALL = re.compile(r"(?:\bre\.(?:compile|search|match|fullmatch|findall|finditer|sub|subn|split)\s*\("
                   r"|\bregex_(?:findall|search|replace)\s*\(|\bis\s+(?:search|match|regex)\s*\("
                   r"|\.startswith\s*\(|_(?:pattern|regex)\s*:)")
_METRIC_TOKEN = re.compile(r"vllm:|[a-z]_(?:total|bucket|created)\b|\\\{\[\^\}\]|A-Za-z0-9_:")


def metric_regexes(text):
    """The offending calls in ``text``: [(line number, the call's first line)]."""
    found = []
    for m in _CALL.finditer(text):
        window = "\n".join(text[m.end():m.end() + 400].split("\n")[:2])
        if _METRIC_TOKEN.search(window):
            line = text.count("\n", 0, m.start()) + 1
            found.append((line, text.splitlines()[line - 1].strip()))
    return found


@pytest.mark.parametrize("line", GUARD["offenders"])
def test_the_guard_flags_a_regex_over_metric_lines(line):
    assert metric_regexes(line), line


@pytest.mark.parametrize("line", GUARD["innocents"])
def test_the_guard_passes_other_patterns(line):
    assert metric_regexes(line) == [], line


def test_no_regex_over_metric_lines_outside_the_reader():
    offenders = []
    skip = tuple(GUARD["skip"])
    for top, dirs, files in os.walk(ROOT):
        rel_top = os.path.relpath(top, ROOT)
        rel_top = "" if rel_top == "." else rel_top + "/"
        dirs[:] = [d for d in dirs if not (rel_top + d + "/").startswith(skip)]
        for name in files:
            rel = rel_top + name
            if not name.endswith(tuple(GUARD["scan"])) or rel.startswith(skip):
                continue
            with open(os.path.join(top, name), encoding="utf-8", errors="replace") as fh:
                offenders += ["%s:%d: %s" % (rel, n, line) for n, line in metric_regexes(fh.read())]
    assert not offenders, ("read /metrics with plugins/module_utils/prometheus_text.py (filters prometheus_total, "
                           "prometheus_by_label in Jinja), not a regex:\n" + "\n".join(offenders))
