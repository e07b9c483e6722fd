# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The statistics of a set of streamed requests (the RequestResults of vllm_http).

Python standard library only, never imports AnsibleModule:

    figures = aggregate(results, wall_s)   # requests, ok, errors, aggregate_tps, ttft_s{p50,...}, ...
    summarize([0.1, 0.2, 0.3])             # {mean, p50, p90, p95, p99, min, max, n}
"""
from __future__ import annotations

import statistics

__all__ = [
    "aggregate",
    "count_errors",
    "load_window",
    "round_or_none",
    "summarize",
]


def round_or_none(value, digits=6):
    return None if value is None else round(value, digits)


def summarize(values, digits=6):
    """mean/p50/p90/p95/p99 (statistics.quantiles, method 'inclusive'), min, max and n of the numbers.

    No values: every figure None (n 0). One value: every figure that value.
    """
    data = [float(v) for v in values if v is not None]
    if not data:
        return {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "min": None, "max": None, "n": 0}
    if len(data) == 1:
        v = round(data[0], digits)
        return {"mean": v, "p50": v, "p90": v, "p95": v, "p99": v, "min": v, "max": v, "n": 1}
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {
        "mean": round(statistics.fmean(data), digits),
        "p50": round(cuts[49], digits),
        "p90": round(cuts[89], digits),
        "p95": round(cuts[94], digits),
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
    """The figures of a set of requests that ran within ``wall_s`` seconds.

    ``decode_tps`` leaves out the burst streams (RequestResult.burst), counted in ``burst_streams``;
    ``retries``: the requests sent again after a transport failure before any answer (vllm_http).
    """
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
        "retries": sum(getattr(r, "retries", 0) for r in results),
        "output_tokens": output_tokens,
        "usage_missing": sum(1 for r in ok if not r.usage_seen),
        "wall_s": round(wall_s, 6),
        "aggregate_tps": round(output_tokens / wall_s, 3) if wall_s > 0 else None,
        "ttft_s": summarize(r.ttft_s for r in ok),
        "decode_tps": summarize(r.decode_tps for r in ok if not r.burst),
        "burst_streams": sum(1 for r in ok if r.burst),
        "e2e_s": summarize(r.e2e_s for r in ok),
    }


def load_window(results):
    """(first request sent, last stream end) of the results, perf_counter seconds; None without any."""
    starts = [r.t_start for r in results if r.t_start is not None]
    ends = [r.t_end for r in results if r.t_end is not None]
    if not starts or not ends:
        return None
    return min(starts), max(ends)
