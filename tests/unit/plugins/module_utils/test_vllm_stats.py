# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the probe's statistics (plugins/module_utils/vllm_stats.py)."""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_stats
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import RequestResult


def test_burst_streams_are_counted_and_kept_out_of_the_decode_rate():
    def result(t_first, t_last, reads, tokens=11):
        res = RequestResult()
        res.t_start, res.t_first, res.t_last, res.t_end = 0.0, t_first, t_last, t_last
        res.completion_tokens, res.usage_seen, res.text_reads = tokens, True, reads
        return res
    steady = [result(0.1, 1.1, 10), result(0.1, 2.1, 10), result(0.1, 0.6, 10)]   # 10, 5 and 20 tok/s
    burst = [result(1.0, 1.001, 1), result(1.0, 1.002, 2)]                       # 10000 and 5000 tok/s
    figures = vllm_stats.aggregate(steady + burst, 2.0)
    assert figures["burst_streams"] == 2
    assert figures["decode_tps"]["n"] == 3
    assert figures["decode_tps"]["p50"] == pytest.approx(10.0)
    assert figures["decode_tps"]["max"] == pytest.approx(20.0)
    assert figures["ok"] == 5 and figures["output_tokens"] == 55  # bursts still count as served tokens


@pytest.mark.parametrize("values,expected", [
    ([], {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "min": None, "max": None, "n": 0}),
    ([None], {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "min": None, "max": None, "n": 0}),
    ([7.5], {"mean": 7.5, "p50": 7.5, "p90": 7.5, "p95": 7.5, "p99": 7.5, "min": 7.5, "max": 7.5, "n": 1}),
    ([1, 3], {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p95": 2.9, "p99": 2.98, "min": 1.0, "max": 3.0, "n": 2}),
    (list(range(1, 11)), {"mean": 5.5, "p50": 5.5, "p90": 9.1, "p95": 9.55, "p99": 9.91, "min": 1.0, "max": 10.0, "n": 10}),
    ([10, 1, None, 4], {"mean": 5.0, "p50": 4.0, "p90": 8.8, "p95": 9.4, "p99": 9.88, "min": 1.0, "max": 10.0, "n": 3}),
])
def test_summarize(values, expected):
    got = vllm_stats.summarize(values)
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == (pytest.approx(value) if value is not None else None), key
