# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The judgements of the vllm_verify role, in Python: its gates, its power section, the GPUs the
active profile serves on, the platform vLLM detected, and the checks of the sampling variables.

Each filter takes plain data (what the role registered) and returns plain data, so the role's
templates only render and the unit tests (tests/unit/plugins/filter/test_vllm_verify.py with the cases of
tests/unit/data/vllm_verify_cases.yaml) cover every branch.
"""
from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_float as _num
from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import check as _typed
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import marked_options
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_engine import engine_deaths

# The real nvidia-smi; the other power sources are "test double" (simulated watts) and "none".
REAL_POWER = "nvidia-smi"
POWER_SOURCES = ("nvidia-smi", "test double", "none")
# vLLM logs "Automatically detected platform cpu." (older releases, or at DEBUG) and, in 0.28.0 at INFO,
# the engine's config line "Initializing a V1 LLM engine ... device_config=cpu, ...".
# The most concurrent requests a verification level sends (vllm_verify_concurrency, _sampled_concurrency): far above
# any box's max_num_seqs, far below what would only queue requests and time the run out.
CONCURRENCY_MAX = 1024
# http(s)://host:port[/path]: a host name, an IPv4 address or a bracketed IPv6 literal, and the port.
_BASE_URL = re.compile(r"^(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)"
                       r":(?P<port>[0-9]{1,5})(?P<path>/[A-Za-z0-9._~/-]*)?$")
_PLATFORM = re.compile(r"Automatically detected platform (\w+)|\bdevice_config=(\w+)")


def _dict(value, name, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s expects %s as a dict, got %s" % (name, what, _inv.type_name(value)))
    return value


def _int(value, default=0):
    number = _num(value)
    return int(number) if number is not None else default


def _lines(value):
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines()
    return [str(line) for line in value]


def _errors(level):
    errors = level.get("errors") if isinstance(level, dict) else None
    if isinstance(errors, dict):
        return sum(_int(v) for v in errors.values())
    return _int(errors)


def _gate(name, ok, value, threshold, detail):
    return {"name": name, "ok": bool(ok), "value": value, "threshold": threshold, "detail": detail}


# -- the gates ----------------------------------------------------------------------------------
# Each gate is a function of the inputs (see vllm_verify_gates) returning a gate dict, or None
# when it does not apply. A new gate is one more function in GATES (and its input key).

def _gate_probe(i):
    probe = i["probe"]
    if probe.get("failed") or not probe.get("levels"):
        return _gate("probe", False, None, None, "the probe did not run: %s" % (probe.get("msg") or "no levels measured"))
    return None


def _gate_full_context(i):
    kv = i["kv"]
    fcc = _num(kv.get("full_context_concurrency"))
    threshold = _num(i.get("min_full_context_concurrency")) or 0.0
    detail = ("KV pool %s tokens / max_model_len %s" % (kv.get("pool_tokens"), kv.get("max_model_len"))
              if fcc is not None else "no KV pool in the startup report nor on /metrics")
    return _gate("min_full_context_concurrency", fcc is not None and fcc >= threshold, fcc, threshold, detail)


def _levels(i):
    return [lv for lv in i["probe"].get("levels") or [] if isinstance(lv, dict)]


def _gate_single_stream(i):
    threshold = _num(i.get("min_single_stream_tps")) or 0.0
    if threshold <= 0:
        return None
    single = [lv for lv in _levels(i) if _int(lv.get("concurrency")) == 1]
    if not single:
        return _gate("min_single_stream_tps", False, None, threshold, "no concurrency-1 level measured")
    level = single[0]
    decode = level.get("decode_tps") or {}
    value = _num(decode.get("p50"))
    bursts = _int(level.get("burst_streams"))
    detail = "p50 decode tok/s at concurrency 1 over %d stream(s), %d burst stream(s) left out" % (
        _int(decode.get("n")), bursts)
    if value is None:
        detail = "no decode rate at concurrency 1 (%d burst stream(s), %d ok)" % (bursts, _int(level.get("ok")))
    return _gate("min_single_stream_tps", value is not None and value >= threshold, value, threshold, detail)


def _gate_aggregate(i):
    threshold = _num(i.get("min_aggregate_tps")) or 0.0
    if threshold <= 0:
        return None
    levels = _levels(i)
    top = max(levels, key=lambda lv: _int(lv.get("concurrency"))) if levels else {}
    value = _num(top.get("aggregate_tps"))
    return _gate("min_aggregate_tps", value is not None and value >= threshold, value, threshold,
                 "aggregate tok/s at concurrency %s" % top.get("concurrency", "?"))


def _gate_errors(i):
    errors = _int(i["probe"].get("errors_total"))
    threshold = _int(i.get("max_errors"))
    retries = _int(i["probe"].get("retries_total"))
    return _gate("max_errors", errors <= threshold, errors, threshold,
                 "failed requests over all levels (greedy and sampled) and the soak%s" % (
                     "; %d transport retries (hiccups sent again, not failures)" % retries if retries else ""))


def _gate_sampled(i):
    wanted = [_int(c) for c in i.get("sampled_concurrency") or []]
    if not wanted:
        return None
    ran = [lv for lv in i["probe"].get("sampled") or [] if isinstance(lv, dict)]
    requests = sum(_int(lv.get("requests")) for lv in ran)
    failed = sum(_errors(lv) for lv in ran)
    value = {"levels_run": len(ran), "requests": requests, "failed": failed}
    threshold = {"levels_run": len(wanted), "failed": 0}
    if not ran:
        detail = "sampled levels %s were configured but none ran" % wanted
    elif len(ran) < len(wanted):
        detail = "only %d of the sampled levels %s ran" % (len(ran), wanted)
    else:
        first = ran[0]
        detail = "temperature %s, top_p %s, seed %s+n at concurrency %s" % (
            first.get("temperature"), first.get("top_p"), first.get("seed"),
            ", ".join(str(lv.get("concurrency")) for lv in ran))
        messages = [m for lv in ran for m in lv.get("error_messages") or []]
        if failed and messages:
            detail += ": " + messages[0]
    ok = len(ran) == len(wanted) and requests > 0 and failed == 0
    return _gate("sampled", ok, value, threshold, detail)


def _gate_context(i):
    if not i.get("context_probe"):
        return None
    ctx = i["probe"].get("context")
    ctx = ctx if isinstance(ctx, dict) else {}
    fit = ctx.get("fit") or {}
    over = ctx.get("over") or {}
    value = {"fit_status": fit.get("status"), "fit_complete": fit.get("complete"),
             "fit_output_tokens": fit.get("output_tokens"), "over_status": over.get("status"),
             "over_limit": over.get("limit")}
    threshold = {"fit_status": 200, "fit_complete": True, "fit_output_tokens": ctx.get("max_tokens"),
                 "over_status": 400, "over_limit": ctx.get("limit")}
    if not ctx:
        detail = "the context probe did not run"
    elif ctx.get("ok") is True:
        detail = "a prompt up to max_model_len is answered in full, one token over is refused naming the limit"
    else:
        detail = ctx.get("reason") or "the context probe failed"
    return _gate("context", ctx.get("ok") is True, value, threshold, detail)


def _gate_stability(i):
    # death_regex: only to test another pattern; the role leaves it out (module_utils/vllm_engine.py has the one).
    deaths = engine_deaths(_lines(i.get("journal_lines")), i.get("death_regex"))
    before = _int(i.get("nrestarts_before"))
    unit = _dict(i.get("unit_after"), "vllm_verify_gates", "unit_after")
    after = _int(unit.get("NRestarts"), before)
    same = unit.get("InvocationID", "") == (i.get("invocation_id") or "")
    value = {"engine_deaths": len(deaths), "nrestarts_before": before, "nrestarts_after": after,
             "same_invocation": same}
    threshold = {"engine_deaths": 0, "nrestarts": "unchanged"}
    # /health after the load: vLLM answers 503 once its engine died (before the process ends).
    health = i.get("health_after")
    healthy = True
    if health is not None:
        value["health_after"] = _int(health)
        threshold["health_after"] = 200
        healthy = _int(health) == 200
    if deaths:
        detail = deaths[0]
    elif not healthy:
        detail = "engine death: /health answered %s after the load (%s)" % (
            _int(health) or "no connection", i.get("health_detail") or "the engine is gone")
    elif after != before or not same:
        detail = "the unit restarted during the measurement (NRestarts %s -> %s)" % (before, after)
    else:
        detail = "no engine death in the journal of this start, NRestarts unchanged, /health 200 after the load"
    if (deaths or not healthy) and not detail.startswith("engine death"):
        detail = "engine death: " + detail
    return _gate("stability", not deaths and healthy and after == before and same, value, threshold, detail)


def _gate_soak(i):
    if _num(i.get("soak_seconds")) in (None, 0.0):
        return None
    soak = i["probe"].get("soak")
    soak = soak if isinstance(soak, dict) else {}
    fivexx = soak.get("errors_5xx")
    if fivexx is None:
        fivexx = sum(_int(v) for k, v in (soak.get("errors") or {}).items() if str(k).startswith("5"))
    levels = _levels(i)
    top = max((_int(lv.get("concurrency")) for lv in levels), default="?")
    return _gate("soak", bool(soak) and _int(fivexx) == 0, {"5xx": _int(fivexx), "requests": soak.get("requests")},
                 {"5xx": 0}, "%s s at concurrency %s" % (i.get("soak_seconds"), top))


def _prefix_caching(settings):
    """Whether the profile serves with prefix caching (vLLM's default: on)."""
    settings = settings if isinstance(settings, dict) else {}
    if settings.get("no-enable-prefix-caching") is True or settings.get("no_enable_prefix_caching") is True:
        return False
    value = settings.get("enable_prefix_caching", settings.get("enable-prefix-caching", True))
    return value is not False and str(value).lower() not in ("false", "0", "no")


# The agent level's surfaces, their gate names ("agent" is the chat surface's, as before surfaces came) and words.
AGENT_SURFACES = ("chat", "responses", "messages")
_AGENT_GATE = {"chat": "agent", "responses": "agent_responses", "messages": "agent_messages"}
_AGENT_WORDS = {"chat": "streaming chat with tools", "responses": "streaming Responses (Codex's shape)",
                "messages": "streaming Messages (Claude Code's shape)"}


def _surfaces(i):
    """The enabled surfaces in order: agent_surfaces (a list) when given, else chat alone (the level before surfaces)."""
    wanted = i.get("agent_surfaces")
    if wanted is None:
        return ["chat"]
    return [s for s in AGENT_SURFACES if s in (wanted or [])]


def _gate_agent(i):
    """The agent level, a gate per enabled surface (see _gate_agent_surface)."""
    if not i.get("agent_enabled"):
        return None
    results = i.get("agent_results")
    results = results if isinstance(results, dict) else {}
    gates = []
    for surface in _surfaces(i):
        agent = results.get(surface, i.get("agent") if surface == "chat" else None)
        gates.append(_gate_agent_surface(i, surface, agent))
    return gates


def _gate_agent_surface(i, surface, agent):
    """One surface: zero failed turns, every forced tool call valid, the surface's own checks (vllm_agent_probe's
    problems: count_tokens, an auth header taken, the custom tool not refused), the prefix-cache hit rate."""
    name = _AGENT_GATE[surface]
    agent = agent if isinstance(agent, dict) else {}
    if agent.get("failed") or not agent.get("requests"):
        return _gate(name, False, None, {"failed": 0},
                     "the agent level (%s) did not run: %s" % (surface, agent.get("msg") or "no turn sent"))
    failed = _int(agent.get("errors_total"))
    forced = [f for f in agent.get("forced_tool_calls") or [] if isinstance(f, dict)]
    forced_ok = sum(1 for f in forced if f.get("ok") is True)
    rate = _num((agent.get("prefix_cache") or {}).get("hit_rate"))
    min_rate = _num(i.get("min_prefix_cache_hit_rate")) or 0.0
    caching = _prefix_caching(i.get("settings"))
    value = {"requests": _int(agent.get("requests")), "failed": failed, "forced_ok": forced_ok,
             "forced": len(forced), "prefix_cache_hit_rate": rate}
    threshold = {"failed": 0, "forced_ok": len(forced)}
    problems = []
    if failed:
        messages = agent.get("error_messages") or []
        problems.append("%d of %d turns failed%s" % (failed, _int(agent.get("requests")),
                                                     (": " + messages[0]) if messages else ""))
    bad = [f for f in forced if f.get("ok") is not True]
    if bad:
        problems.append("forced tool call of session %s (%s) not answered: %s" % (
            bad[0].get("session"), bad[0].get("tool_choice"), bad[0].get("detail")))
    problems.extend(str(p) for p in agent.get("problems") or [])
    if caching and min_rate > 0:
        threshold["prefix_cache_hit_rate"] = min_rate
        if rate is None and not failed:
            cache = agent.get("prefix_cache") or {}
            problems.append("no prefix-cache hit rate (%s)" % (
                "no prompt reached the cache" if cache.get("before") and cache.get("after")
                else "the /metrics counters were not read"))
        elif rate is not None and rate < min_rate:
            problems.append("prefix-cache hit rate %.2f below %.2f" % (rate, min_rate))
    if problems:
        detail = "%s: %s" % (surface, "; ".join(problems))
    else:
        detail = "%s: %d sessions x %d turns, %s: %d forced tool calls answered, hit rate %s%s" % (
            surface, _int(agent.get("sessions")), _int(agent.get("turns")), _AGENT_WORDS[surface], forced_ok,
            "n/a" if rate is None else "%.2f" % rate, _surface_facts(agent))
    return _gate(name, not problems, value, threshold, detail)


def _surface_facts(agent):
    """The facts a passing surface reports beside its figures (the auth header, the custom tool's known defect)."""
    checks = agent.get("checks") if isinstance(agent.get("checks"), dict) else {}
    facts = []
    auth = checks.get("auth")
    if isinstance(auth, dict) and auth.get("key_configured"):
        facts.append("auth taken: %s" % (", ".join(auth.get("accepted") or []) or "none"))
    custom = checks.get("custom_tool")
    if isinstance(custom, dict) and custom.get("known_defect"):
        facts.append("custom tool %s (known upstream defect %s)" % (custom.get("outcome"), custom.get("known_defect")))
    if checks.get("reasoning_field"):
        facts.append("reasoning in %s" % checks["reasoning_field"])
    return "; " + "; ".join(facts) if facts else ""


GATES = (
    _gate_probe, _gate_full_context, _gate_single_stream, _gate_aggregate, _gate_errors, _gate_sampled,
    _gate_context, _gate_agent, _gate_stability, _gate_soak,
)


def vllm_verify_gates(inputs):
    """The gates: [{name, ok, value, threshold, detail}], a gate that cannot be judged fails.

    ``inputs``: probe (vllm_probe's result), kv (the role's KV figures: full_context_concurrency,
    pool_tokens, max_model_len), min_full_context_concurrency, min_single_stream_tps,
    min_aggregate_tps, max_errors, sampled_concurrency, context_probe, soak_seconds,
    journal_lines (the journal of this start after the load), death_regex, nrestarts_before,
    invocation_id (from the readiness wait), unit_after (systemctl show after the load),
    health_after (HTTP status of /health after the load; optional) and health_detail; agent_enabled,
    agent (vllm_agent_probe's chat result), agent_surfaces (the enabled surfaces; absent: chat alone) and
    agent_results ({surface: vllm_agent_probe's result}), min_prefix_cache_hit_rate and settings (the
    profile's vLLM settings: the hit-rate gate applies only with prefix caching on).
    """
    data = dict(_dict(inputs, "vllm_verify_gates", "its input"))
    data["probe"] = _dict(data.get("probe"), "vllm_verify_gates", "probe")
    data["kv"] = _dict(data.get("kv"), "vllm_verify_gates", "kv")
    gates = []
    for gate in GATES:
        result = gate(data)
        if isinstance(result, list):
            gates.extend(result)
        elif result is not None:
            gates.append(result)
    return gates


# -- the power section --------------------------------------------------------------------------

def vllm_verify_platform(text):
    """The platform vLLM detected ("cpu", "cuda", ...) from its log, the last one named; None if absent."""
    found = [a or b for a, b in _PLATFORM.findall("\n".join(_lines(text)))]
    return found[-1].lower() if found else None


def vllm_verify_power(inputs):
    """The report's power section: the cap unit's state, the enforced limits, where the watts come from.

    ``inputs``: unit_name, unit (systemctl show of the cap unit), gpus (nvidia_gpu_info's result),
    smi_exists, smi_path, limit_w (the cap every GPU should have, 0: no comparison), gpu_limits_w
    (per-GPU targets), power_journal_lines (the cap unit's journal), probe (vllm_probe's result),
    platform (vllm_verify_platform of the journal).
    A cap that did not apply is reported (cap_applied false and the reason), never hidden.
    ``gpu_serves_model``: the watts are those of a real GPU serving the model (nvidia-smi is the real
    one and vLLM's platform is not cpu); only then are GPU figures such as a roofline meaningful.
    """
    i = _dict(inputs, "vllm_verify_power", "its input")
    unit = _dict(i.get("unit"), "vllm_verify_power", "unit")
    gpus_result = _dict(i.get("gpus"), "vllm_verify_power", "gpus")
    probe = _dict(i.get("probe"), "vllm_verify_power", "probe")
    smi_exists = bool(i.get("smi_exists"))
    unit_name = i.get("unit_name") or "gpu-power-limit.service"
    gpus = [g for g in gpus_result.get("gpus") or [] if isinstance(g, dict)] if smi_exists else []
    per_gpu = _dict(i.get("gpu_limits_w"), "vllm_verify_power", "gpu_limits_w")
    default_target = _int(i.get("limit_w"))
    reasons = []
    limits = []
    for g in gpus:
        target = _int(per_gpu.get(str(g.get("index")), per_gpu.get(g.get("index"), default_target)))
        enforced = _num(g.get("enforced_power_limit_w"))
        limits.append({"index": g.get("index"), "name": g.get("name"), "enforced_w": g.get("enforced_power_limit_w"),
                       "default_w": g.get("default_power_limit_w"), "target_w": target if target > 0 else None,
                       "power_draw_w": g.get("power_draw_w")})
        if target > 0 and enforced is not None and abs(enforced - target) > 0.5:
            reasons.append("GPU %s enforces %s W, not the %d W cap" % (g.get("index"), g.get("enforced_power_limit_w"), target))
    load_state = unit.get("LoadState")
    if (load_state or "not-found") != "loaded":
        reasons.insert(0, "%s is not installed (LoadState=%s)" % (unit_name, load_state or "?"))
    elif unit.get("Result") != "success" or unit.get("ActiveState") != "active":
        tail = " | ".join(_lines(i.get("power_journal_lines"))[-3:])
        reasons.insert(0, "%s ActiveState=%s Result=%s exit status %s%s" % (
            unit_name, unit.get("ActiveState", "?"), unit.get("Result", "?"), unit.get("ExecMainStatus", "?"),
            (": " + tail) if tail else ""))
    if not smi_exists:
        reasons.append("%s not found: enforced limits not read" % (i.get("smi_path") or "nvidia-smi"))
    elif gpus_result.get("failed") or not gpus:
        reasons.append("nvidia-smi did not answer: %s" % (gpus_result.get("msg") or "no GPU"))
    source = probe.get("power_source") or gpus_result.get("power_source") or ("nvidia-smi" if smi_exists else "none")
    if source not in POWER_SOURCES:
        source = "none"
    if not smi_exists:
        source = "none"
    platform = i.get("platform")
    return {
        "unit": unit_name,
        "load_state": load_state,
        "active_state": unit.get("ActiveState"),
        "result": unit.get("Result"),
        "cap_applied": not reasons,
        "reason": "; ".join(reasons) if reasons else None,
        "limits": limits,
        "driver_version": gpus_result.get("driver_version"),
        "sampled": smi_exists,
        "power_source": source,
        "power_field": probe.get("power_field"),
        "power_field_note": probe.get("power_field_note"),
        "gpu_indices": list(probe.get("gpu_indices") or []),
        "platform": platform,
        "gpu_serves_model": source == REAL_POWER and platform != "cpu",
    }


# -- the profile's GPUs -------------------------------------------------------------------------
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _env_value(env, key):
    if isinstance(env, dict):
        value = env.get(key)
        return None if value is None else str(value)
    value = None
    for line in _lines(env):
        m = _ENV_LINE.match(line)
        if m and m.group(1) == key:
            value = m.group(2).strip().strip("\"'")
    return value


def vllm_verify_gpu_indices(settings, env=None, present=None):
    """The nvidia-smi indices of the GPUs the profile serves on; [] means every GPU (not known).

    ``settings``: the profile's vLLM config (tensor_parallel_size x pipeline_parallel_size x
    data_parallel_size GPUs, dashes or underscores); ``env``: the profile's environment (the
    ``<profile>.env`` text or a dict): with CUDA_VISIBLE_DEVICES of plain indices, the first that
    many of them, else 0..N-1. CUDA_VISIBLE_DEVICES of UUIDs or MIG ids gives [] (all).
    ``present``: the indices nvidia-smi lists; indices not among them are dropped.
    (CUDA numbers the visible devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; with
    plain indices in CUDA_VISIBLE_DEVICES they are nvidia-smi's.)
    """
    settings = _dict(settings, "vllm_verify_gpu_indices", "the profile settings")
    count = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = settings.get(key, settings.get(key.replace("_", "-"), 1))
        size = _int(value, 1)
        count *= size if size >= 1 else 1
    cvd = _env_value(env, "CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        devices = [d.strip() for d in cvd.split(",") if d.strip()]
        if not all(d.isdigit() for d in devices):
            return []
        indices = [int(d) for d in devices][:count]
    else:
        indices = list(range(count))
    if present is not None:
        shown = {_int(p, -1) for p in present}
        indices = [x for x in indices if x in shown]
    return indices


# -- input checks -------------------------------------------------------------------------------

def vllm_verify_sampling_errors(values):
    """Messages for bad sampled-level variables (each names the variable and what it may be); [] when fine.

    ``values``: vllm_verify_sampled_concurrency (a list of integers >= 1, may be empty),
    vllm_verify_sampled_temperature (> 0 and <= 2), vllm_verify_sampled_top_p (> 0 and <= 1),
    vllm_verify_seed (an integer >= 0).
    """
    values = _dict(values, "vllm_verify_sampling_errors", "its input")
    errors = []
    levels = values.get("vllm_verify_sampled_concurrency")
    if not isinstance(levels, list):
        levels = _typed("vllm_verify_sampled_concurrency", levels)[0]
    if not isinstance(levels, list) or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= CONCURRENCY_MAX
                                               for c in levels):
        errors.append("vllm_verify_sampled_concurrency must be a list of integers 1-%d ([] for no sampled level; "
                      "'4' or '2,4' as strings), got %r" % (CONCURRENCY_MAX, values.get("vllm_verify_sampled_concurrency"),))
    temperature = values.get("vllm_verify_sampled_temperature")
    number = _num(temperature)
    if number is None or not 0 < number <= 2:
        errors.append("vllm_verify_sampled_temperature must be a number above 0 and at most 2 (a sampled level "
                      "samples; 0 is the greedy levels), got %r" % (temperature,))
    top_p = values.get("vllm_verify_sampled_top_p")
    number = _num(top_p)
    if number is None or not 0 < number <= 1:
        errors.append("vllm_verify_sampled_top_p must be a number above 0 and at most 1, got %r" % (top_p,))
    seed = values.get("vllm_verify_seed")
    number = _num(seed)
    if number is None or number < 0 or number != int(number):
        errors.append("vllm_verify_seed must be an integer >= 0, got %r" % (seed,))
    return errors


def _ms(summary):
    summary = summary if isinstance(summary, dict) else {}
    out = {k: (None if _num(summary.get(k)) is None else round(_num(summary.get(k)) * 1000.0, 1))
           for k in ("p50", "p95", "max")}
    out["n"] = _int(summary.get("n"))
    return out


def vllm_verify_agent_report(agent, enabled=True):
    """The report's agent section from vllm_agent_probe's result: requests, errors with the server's
    text, TTFT p50/p95 of first and later turns (ms), forced tool calls, the prefix-cache hit rate,
    prompt tokens of the last turn. ``enabled`` false: {enabled: false}."""
    if not enabled:
        return {"enabled": False}
    agent = agent if isinstance(agent, dict) else {}
    if agent.get("skipped") and not agent.get("requests"):
        return {"enabled": True, "ran": False, "msg": "skipped"}
    forced = [f for f in agent.get("forced_tool_calls") or [] if isinstance(f, dict)]
    return {
        "enabled": True,
        "ran": bool(agent.get("requests")),
        "msg": agent.get("msg"),
        "sessions": agent.get("sessions"),
        "turns": agent.get("turns"),
        "requests": _int(agent.get("requests")),
        "errors_total": _int(agent.get("errors_total")),
        "retries": _int(agent.get("retries")),
        "errors": agent.get("errors") or {},
        "error_messages": list(agent.get("error_messages") or []),
        "ttft_first_ms": _ms(agent.get("ttft_first_s")),
        "ttft_later_ms": _ms(agent.get("ttft_later_s")),
        "forced": len(forced),
        "forced_ok": sum(1 for f in forced if f.get("ok") is True),
        "forced_tool_calls": forced,
        "prefix_cache_hit_rate": (agent.get("prefix_cache") or {}).get("hit_rate"),
        "prompt_tokens_last_turn": agent.get("prompt_tokens_last_turn"),
        "output_tokens": agent.get("output_tokens"),
        "reasoning_chars": agent.get("reasoning_chars"),
        "max_tokens": agent.get("max_tokens"),
        "system_tokens": (agent.get("plan") or {}).get("system_tokens"),
        "wall_s": agent.get("wall_s"),
        "openai_version": agent.get("openai_version"),
        "surface": agent.get("surface", "chat"),
        "path": agent.get("path"),
        "sdk": agent.get("sdk"),
        "sdk_version": agent.get("sdk_version", agent.get("openai_version")),
        "reasoning_field": agent.get("reasoning_field"),
        "checks": agent.get("checks") if isinstance(agent.get("checks"), dict) else {},
        "problems": [str(p) for p in agent.get("problems") or []],
    }


def vllm_verify_agent_by_surface(results):
    """{surface: vllm_agent_probe's result} from the results of the role's loop over the surfaces (each with
    ``item``, the surface); a result without a surface (skipped, failed to start) keeps its item."""
    out = {}
    for res in results or []:
        if isinstance(res, dict) and res.get("item") in AGENT_SURFACES:
            out[res["item"]] = res
    return out


def vllm_verify_agent_surfaces_report(results, surfaces, enabled=True):
    """The report's rows, one per enabled surface in order: vllm_verify_agent_report of each surface's result
    (``results``: {surface: result}); [] when the level is off."""
    if not enabled:
        return []
    results = results if isinstance(results, dict) else {}
    rows = []
    for surface in [s for s in AGENT_SURFACES if s in (surfaces or [])]:
        row = vllm_verify_agent_report(results.get(surface) or {}, True)
        row["surface"] = surface
        row["gate"] = _AGENT_GATE[surface]
        rows.append(row)
    return rows


def vllm_verify_agent_errors(values):
    """Messages for bad agent-level variables (each names the variable and what it may be); [] when fine."""
    values = _dict(values, "vllm_verify_agent_errors", "its input")
    errors = []
    for key, low in (("vllm_verify_agent_sessions", 1), ("vllm_verify_agent_turns", 1),
                     ("vllm_verify_agent_max_tokens", 1), ("vllm_verify_agent_system_tokens", 1),
                     ("vllm_verify_agent_tool_turn", 0)):
        if key not in values:
            continue
        number = _num(values[key])
        if number is None or number != int(number) or number < low:
            errors.append("%s must be an integer >= %d, got %r" % (key, low, values[key]))
    turns = _num(values.get("vllm_verify_agent_turns"))
    tool_turn = _num(values.get("vllm_verify_agent_tool_turn"))
    if turns is not None and tool_turn is not None and tool_turn > turns:
        errors.append("vllm_verify_agent_tool_turn must be 0 (no forced tool call) or a turn 1-%d "
                      "(vllm_verify_agent_turns), got %r" % (int(turns), values.get("vllm_verify_agent_tool_turn")))
    if "vllm_verify_agent_surfaces" in values:
        surfaces = values["vllm_verify_agent_surfaces"]
        if (not isinstance(surfaces, list) or not all(isinstance(s, str) and s in AGENT_SURFACES for s in surfaces)
                or len(set(surfaces)) != len(surfaces)):
            errors.append("vllm_verify_agent_surfaces must be a list of distinct surfaces from %s, got %s"
                          % (", ".join(AGENT_SURFACES), _show(surfaces)))
    rate = values.get("vllm_verify_min_prefix_cache_hit_rate")
    if "vllm_verify_min_prefix_cache_hit_rate" in values and (_num(rate) is None or not 0 <= _num(rate) <= 1):
        errors.append("vllm_verify_min_prefix_cache_hit_rate must be a number from 0 to 1, got %r" % (rate,))
    return errors


def _base_url_errors(url):
    form = ("vllm_verify_base_url must be http(s)://HOST:PORT with an optional /path (HOST a name, an IPv4 address or an "
            "IPv6 literal in brackets, http://[::1]:8000; PORT 1-65535), got %s")
    match = _BASE_URL.match(url) if isinstance(url, str) else None
    if not match or _inv.port_error("port", match.group("port")):
        return [form % _show(url)]
    host = match.group("host")
    if host.startswith("["):
        try:
            if ipaddress.ip_address(host[1:-1]).version != 6:
                raise ValueError(host)
        except ValueError:
            return [form % _show(url)]
    return []


def vllm_verify_var_errors(values):
    """Messages for vllm_verify's own variables (each names the variable, the allowed forms and the value); [] when fine.

    ``values``: vllm_verify_concurrency, _rounds, _max_tokens, _start_timeout, _soak_seconds, _max_errors,
    _min_full_context_concurrency, _min_single_stream_tps, _min_aggregate_tps, _power_limit_w, _base_url,
    _state_dir, _unit_name, _controller_report_dir. Numbers and lists in the forms their argument specs take
    ('4', '1,2,4', '0.5'); paths and the unit name as they are written into commands and files.
    """
    values = _dict(values, "vllm_verify_var_errors", "its input")
    errors = []
    typed = {}
    for name in sorted(values):
        if name in ("vllm_verify_base_url", "vllm_verify_state_dir", "vllm_verify_unit_name",
                    "vllm_verify_controller_report_dir"):
            continue
        typed[name], error = _typed(name, values[name])
        if error:
            errors.append(error)
    levels = typed.get("vllm_verify_concurrency", [1])
    if isinstance(levels, list) and (not levels or not all(isinstance(c, int) and 1 <= c <= CONCURRENCY_MAX for c in levels)):
        errors.append("vllm_verify_concurrency must be a non-empty list of integers 1-%d ('4' or '1,2,4' as strings), got %s"
                      % (CONCURRENCY_MAX, _show(values.get("vllm_verify_concurrency"))))
    for name, low in (("vllm_verify_rounds", 1), ("vllm_verify_max_tokens", 1), ("vllm_verify_start_timeout", 1),
                      ("vllm_verify_soak_seconds", 0), ("vllm_verify_max_errors", 0), ("vllm_verify_power_limit_w", 0),
                      ("vllm_verify_min_full_context_concurrency", 0), ("vllm_verify_min_single_stream_tps", 0),
                      ("vllm_verify_min_aggregate_tps", 0), ("vllm_verify_max_regression", 0)):
        value = typed.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < low:
            errors.append("%s must be >= %s, got %s" % (name, low, _show(values[name])))
    if "vllm_verify_base_url" in values:
        errors.extend(_base_url_errors(values["vllm_verify_base_url"]))
    unit = values.get("vllm_verify_unit_name", "x.service")
    if not _inv.is_unit(unit, ("service",), template=False):
        errors.append("vllm_verify_unit_name must be a systemd service name (letters, digits and : _ . - with an optional "
                      "@instance, ending in .service; not a template), got %s" % _show(unit))
    # The collection's one path rule (module_utils/gpuhost_invariants.py) for the role's owned paths (`type: path`).
    owned = marked_options("owned_path", ["vllm_verify"])
    errors.extend(_inv.owned_path_errors({name: values[name] for name in owned if name in values and values[name] is not None}))
    report_dir = values.get("vllm_verify_controller_report_dir", "/x")
    if (not isinstance(report_dir, str) or not report_dir.startswith("/") or report_dir.strip() != report_dir
            or _inv.line_end(report_dir) or ".." in report_dir.split("/")):
        errors.append("vllm_verify_controller_report_dir must be an absolute path on the controller (no line break, NUL, "
                      ".. component or surrounding spaces), got %s" % _show(report_dir))
    return errors


class FilterModule:
    """vllm_verify's gates, power section, profile GPUs, platform and input checks."""

    def filters(self):
        return {
            "vllm_verify_gates": vllm_verify_gates,
            "vllm_verify_power": vllm_verify_power,
            "vllm_verify_platform": vllm_verify_platform,
            "vllm_verify_gpu_indices": vllm_verify_gpu_indices,
            "vllm_verify_sampling_errors": vllm_verify_sampling_errors,
            "vllm_verify_var_errors": vllm_verify_var_errors,
            "vllm_verify_agent_errors": vllm_verify_agent_errors,
            "vllm_verify_agent_report": vllm_verify_agent_report,
            "vllm_verify_agent_by_surface": vllm_verify_agent_by_surface,
            "vllm_verify_agent_surfaces_report": vllm_verify_agent_surfaces_report,
        }
