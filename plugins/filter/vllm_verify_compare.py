# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Better or back (issue 46.2): this verification's report beside the box's last good report on the same profile and
load, figure by figure, and the gate a new vLLM release must pass against it.

The docs of the filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_vllm_verify_compare.py with the cases of tests/unit/data/vllm_verify_compare_cases.yaml.
"""
from __future__ import annotations

from collections.abc import Mapping

# What makes two runs the same load: the probe's and the agent level's settings (the figures depend on each).
LOAD_KEYS = (("probe", ("concurrency", "rounds", "max_tokens", "sampled_concurrency")),
             ("agent", ("enabled", "sessions", "turns", "max_tokens")))
GATE = "max_regression"


def _get(data, *path):
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _num(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _load(report):
    return {"%s.%s" % (part, key): _get(report, part, key) for part, keys in LOAD_KEYS for key in keys}


def _rows(new, old):
    """(metric, better, old, new) for every figure both reports have: decode tok/s p50 and aggregate tok/s per level,
    the agent turns' TTFT p50, the prefix-cache hit rate, the KV pool."""
    rows = []
    old_levels = {lv.get("concurrency"): lv for lv in _get(old, "levels") or [] if isinstance(lv, Mapping)}
    for level in _get(new, "levels") or []:
        if not isinstance(level, Mapping) or level.get("concurrency") not in old_levels:
            continue
        was = old_levels[level.get("concurrency")]
        rows.append(("decode tok/s p50 @%s" % level["concurrency"], "higher",
                     _get(was, "decode_tps", "p50"), _get(level, "decode_tps", "p50")))
        rows.append(("aggregate tok/s @%s" % level["concurrency"], "higher", was.get("aggregate_tps"), level.get("aggregate_tps")))
    rows.append(("agent TTFT p50, first turn (ms)", "lower", _get(old, "agent", "ttft_first_ms", "p50"),
                 _get(new, "agent", "ttft_first_ms", "p50")))
    rows.append(("agent TTFT p50, later turns (ms)", "lower", _get(old, "agent", "ttft_later_ms", "p50"),
                 _get(new, "agent", "ttft_later_ms", "p50")))
    rows.append(("prefix-cache hit rate", "higher", _get(old, "agent", "prefix_cache_hit_rate"),
                 _get(new, "agent", "prefix_cache_hit_rate")))
    rows.append(("KV pool (tokens)", "higher", _get(old, "startup_report", "kv_cache_tokens"),
                 _get(new, "startup_report", "kv_cache_tokens")))
    return rows


def vllm_verify_compare(report, baseline, max_regression=0.15):
    """This report beside the last good one: {compared, reason, old_version, new_version, baseline_timestamp, rows,
    regressions, gate}.

    rows: {metric, better, old, new, change (signed fraction of the old figure), regression (how much worse, >= 0),
    ok}. The gate (a vllm_verify gate dict, or None) applies only when the vLLM release differs from the baseline's
    (an upgrade): a run on the same release is shown beside the last good one but not gated (its own gates judge it).
    """
    report = report if isinstance(report, Mapping) else {}
    limit = _num(max_regression)
    if limit is None or limit < 0:
        raise ValueError("vllm_verify_compare: max_regression must be a number >= 0, got %r" % (max_regression,))
    out = {"compared": False, "reason": "", "old_version": _get(baseline, "vllm", "version"),
           "new_version": _get(report, "vllm", "version"), "baseline_timestamp": _get(baseline, "timestamp"),
           "max_regression": limit, "rows": [], "regressions": [], "gate": None}
    if not isinstance(baseline, Mapping) or not baseline:
        out["reason"] = "no earlier report passed on this profile"
        return out
    if baseline.get("profile") != report.get("profile"):
        out["reason"] = "the last good report is of profile %r, not %r" % (baseline.get("profile"), report.get("profile"))
        return out
    new_load, old_load = _load(report), _load(baseline)
    differs = sorted(k for k in new_load if new_load[k] != old_load[k])
    if differs:
        out["reason"] = "not the same load as the last good report (%s)" % ", ".join(
            "%s %s -> %s" % (k, old_load[k], new_load[k]) for k in differs)
        return out
    out["compared"] = True
    for metric, better, old, new in _rows(report, baseline):
        old_n, new_n = _num(old), _num(new)
        row = {"metric": metric, "better": better, "old": old, "new": new, "change": None, "regression": None, "ok": True}
        if old_n is not None and new_n is not None and old_n > 0:
            change = (new_n - old_n) / old_n
            regression = max(0.0, -change if better == "higher" else change)
            row.update(change=round(change, 4), regression=round(regression, 4), ok=regression <= limit)
        out["rows"].append(row)
    out["regressions"] = [r["metric"] for r in out["rows"] if not r["ok"]]
    upgrade = out["old_version"] != out["new_version"]
    if upgrade:
        worst = max([r["regression"] for r in out["rows"] if r["regression"] is not None] or [0.0])
        bad = ["%s %s -> %s (%+.1f %%)" % (r["metric"], r["old"], r["new"], 100 * r["change"])
               for r in out["rows"] if not r["ok"]]
        out["gate"] = {
            "name": GATE, "ok": not bad, "value": round(worst, 4), "threshold": limit,
            "detail": "vLLM %s against the last good report of vLLM %s (%s), same profile and load: %s" % (
                out["new_version"], out["old_version"], out["baseline_timestamp"],
                "; ".join(bad) if bad else "no figure worse by more than %g %%" % (100 * limit)),
        }
    else:
        out["reason"] = "the same vLLM release as the last good report: shown, not gated"
    return out


class FilterModule:
    """vllm_verify's comparison with the last good report."""

    def filters(self):
        return {"vllm_verify_compare": vllm_verify_compare}
