# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verification as series (issue 31): vllm_verify's report -> node exporter textfile text
(``vllm_verify_textfile``), and the speculative-decoding figures of a load from vLLM's /metrics
counters before and after it (``vllm_verify_spec_decode``).

The series (prefix ``gpuhost_verify_``) carry no ``profile`` label: Prometheus gives every target of the
fleet the label ``profile`` (the box's configured profile); the profile the verification ran is the
label ``verified_profile`` of ``gpuhost_verify_info``.
"""
from __future__ import annotations

import datetime

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_float as _num
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_textfile import Family, render
from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import totals
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name

SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def _figure(value, key):
    """A number, or the ``key`` figure of a summary dict ({p50, p95, ...})."""
    if isinstance(value, dict):
        return _num(value.get(key))
    return _num(value)


def vllm_verify_spec_decode(after, before=None, settings=None):
    """Speculative decoding over a load: /metrics text after it (and before it) -> {method, num_speculative_tokens,
    drafts, draft_tokens, accepted_tokens, acceptance_rate, mean_acceptance_length}; {} when the server exports no
    speculative counters (no speculative profile). acceptance_rate = accepted / draft tokens; mean acceptance length
    = 1 + accepted / drafts (the tokens one forward pass yields, vLLM's own definition)."""
    names = list(SPEC_COUNTERS.values())
    end = totals(str(after or ""), names)
    if not end:
        return {}
    start = totals(str(before), names) if before else {}
    delta = {key: max(0.0, end.get(name, 0.0) - start.get(name, 0.0)) for key, name in SPEC_COUNTERS.items()}
    spec = (settings or {}).get("speculative_config") or (settings or {}).get("speculative-config") or {}
    spec = spec if isinstance(spec, dict) else {}
    return {
        "method": spec.get("method"),
        "num_speculative_tokens": spec.get("num_speculative_tokens"),
        "drafts": int(delta["drafts"]),
        "draft_tokens": int(delta["draft_tokens"]),
        "accepted_tokens": int(delta["accepted_tokens"]),
        "acceptance_rate": round(delta["accepted_tokens"] / delta["draft_tokens"], 4) if delta["draft_tokens"] else None,
        "mean_acceptance_length": round(1.0 + delta["accepted_tokens"] / delta["drafts"], 4) if delta["drafts"] else None,
    }


def _timestamp(text):
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def vllm_verify_textfile(report):
    """vllm_verify's report (the JSON of tasks/report.yml) -> Prometheus text for node exporter's textfile collector."""
    if not isinstance(report, dict):
        raise AnsibleFilterError("vllm_verify_textfile: the input must be the verification report (a mapping), got %s"
                                 % type_name(report))
    vllm = report.get("vllm") or {}
    startup = report.get("startup_report") or {}
    info = Family("gpuhost_verify_info", "gauge", "The last verification of this box: a constant 1 labelled by what it ran")
    info.add(1, verified_profile=report.get("profile") or "", vllm_version=vllm.get("version") or "",
             platform=vllm.get("platform") or "", power_source=report.get("power_source") or "")
    passed = Family("gpuhost_verify_passed", "gauge", "Whether the last verification passed its gates (1) or not (0)")
    passed.add(bool(report.get("passed")))
    stamp = Family("gpuhost_verify_timestamp_seconds", "gauge", "When the last verification ended (Unix time)")
    stamp.add(_timestamp(report.get("timestamp")))
    aggregate = Family("gpuhost_verify_aggregate_tokens_per_second", "gauge",
                       "Output tokens per second of all streams of a verification level")
    decode = Family("gpuhost_verify_decode_tokens_per_second", "gauge", "Median per-request decode tokens per second of a level")
    ttft = Family("gpuhost_verify_ttft_p95_seconds", "gauge", "p95 time to first token of a verification level")
    per_watt = Family("gpuhost_verify_tokens_per_second_per_watt", "gauge", "Aggregate tokens per second per watt drawn, per level")
    joules = Family("gpuhost_verify_joules_per_token", "gauge", "Energy per output token of a level (J)")
    for sampling in ("greedy", "sampled"):
        for level in report.get("levels" if sampling == "greedy" else "sampled") or []:
            if not isinstance(level, dict) or level.get("concurrency") is None:
                continue
            labels = {"concurrency": str(level.get("concurrency")), "sampling": sampling}
            aggregate.add(_num(level.get("aggregate_tps")), **labels)
            decode.add(_figure(level.get("decode_tps"), "p50"), **labels)
            ttft.add(_figure(level.get("ttft_s"), "p95"), **labels)
            per_watt.add(_num(level.get("tps_per_w")), **labels)
            joules.add(_num(level.get("j_per_token")), **labels)
    kv = Family("gpuhost_verify_kv_cache_tokens", "gauge", "The KV pool in tokens (startup report)")
    kv.add(_num(startup.get("kv_cache_tokens")))
    max_len = Family("gpuhost_verify_max_model_len", "gauge", "The served max_model_len")
    max_len.add(_num(startup.get("max_model_len")))
    full = Family("gpuhost_verify_full_context_concurrency", "gauge", "KV pool / max_model_len: full-context requests at once")
    full.add(_num(startup.get("full_context_concurrency")))
    agent = report.get("agent") or {}
    hit = Family("gpuhost_verify_agent_prefix_cache_hit_rate", "gauge", "Prefix-cache hit rate of the agent level (0-1)")
    hit.add(_num(agent.get("prefix_cache_hit_rate")))
    errors = Family("gpuhost_verify_errors", "gauge", "Failed requests of the last verification's probe")
    errors.add(_num(report.get("errors_total")))
    spec = report.get("speculative") or {}
    rate = Family("gpuhost_verify_spec_acceptance_rate", "gauge", "Speculative decoding: accepted / drafted tokens during the verification")
    rate.add(_num(spec.get("acceptance_rate")))
    length = Family("gpuhost_verify_spec_mean_acceptance_length", "gauge",
                    "Speculative decoding: 1 + accepted tokens per draft (tokens per forward pass)")
    length.add(_num(spec.get("mean_acceptance_length")))
    return render([info, passed, stamp, aggregate, decode, ttft, per_watt, joules, kv, max_len, full, hit, errors, rate, length])


class FilterModule:
    """The verification as Prometheus series; speculative decoding figures from /metrics."""

    def filters(self):
        return {"vllm_verify_textfile": vllm_verify_textfile, "vllm_verify_spec_decode": vllm_verify_spec_decode}
