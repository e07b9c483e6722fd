# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of playbooks/tune.yml, in Python: the check of its settings, the next candidate
given the trials so far (coordinate-wise walk, a direction stops at its first violation or failed
start), a trial's metrics and constraint checks from vllm_verify's report, the choice, and the
host_vars merge.

The unit tests are tests/unit/plugins/filter/test_tune.py with the cases of
tests/unit/data/tune_cases.yaml.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping

OBJECTIVES = ("tps", "tps_per_w")
DIMENSIONS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_memory_bytes", "power_limit_w")
CONSTRAINTS = ("ttft_p95_s", "agent_ttft_p95_s", "min_full_context_concurrency", "zero_errors")
# Walked from the highest value down (tune_next).
DESCENDING = ("power_limit_w",)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tune_setting_errors(settings):
    """Error strings for tune.yml's settings (empty when all is well).

    settings: {space: {dimension: [values]}, objective, constraints: {ttft_p95_s, min_full_context_concurrency,
    zero_errors}, target_concurrency, write_host_vars, activate}.
    """
    errors = []
    space = settings.get("space")
    if not isinstance(space, Mapping) or not space:
        errors.append("tune_space must be a non-empty mapping of dimension -> list of values; allowed dimensions: %s"
                      % ", ".join(DIMENSIONS))
    else:
        for dim, values in space.items():
            if dim not in DIMENSIONS:
                errors.append("tune_space: %s is not a dimension; allowed: %s" % (dim, ", ".join(DIMENSIONS)))
            elif not isinstance(values, list) or not values:
                errors.append("tune_space.%s must be a non-empty list of numbers, got %s" % (dim, values))
            elif not all(_number(v) and v > 0 for v in values):
                errors.append("tune_space.%s: every value must be a positive number, got %s" % (dim, values))
            elif dim == "gpu_memory_utilization" and not all(v <= 1 for v in values):
                errors.append("tune_space.gpu_memory_utilization: values must be in (0, 1], got %s" % (values,))
        if "gpu_memory_utilization" in space and "kv_cache_memory_bytes" in space:
            errors.append("tune_space: gpu_memory_utilization and kv_cache_memory_bytes exclude each other; give one")
    if settings.get("objective") not in OBJECTIVES:
        errors.append("tune_objective must be one of %s, got %s" % (", ".join(OBJECTIVES), settings.get("objective")))
    constraints = settings.get("constraints")
    if not isinstance(constraints, Mapping):
        errors.append("tune_constraints must be a mapping with keys %s" % ", ".join(CONSTRAINTS))
    else:
        for key in constraints:
            if key not in CONSTRAINTS:
                errors.append("tune_constraints: %s is not a constraint; allowed: %s" % (key, ", ".join(CONSTRAINTS)))
        for key in ("ttft_p95_s", "agent_ttft_p95_s", "min_full_context_concurrency"):
            value = constraints.get(key)
            if value is not None and (not _number(value) or value < 0):
                errors.append("tune_constraints.%s must be a number >= 0 or null, got %s" % (key, value))
        if not isinstance(constraints.get("zero_errors", True), bool):
            errors.append("tune_constraints.zero_errors must be true or false, got %s" % (constraints.get("zero_errors"),))
    target = settings.get("target_concurrency")
    if not isinstance(target, int) or isinstance(target, bool) or target < 1:
        errors.append("tune_target_concurrency must be a whole number >= 1, got %s" % (target,))
    for key in ("write_host_vars", "activate"):
        if not isinstance(settings.get(key), bool):
            errors.append("tune_%s must be true or false, got %s" % (key, settings.get(key)))
    # tune_activate names `tuned` the box's profile in the host_vars the tune writes: without them it would do nothing.
    if settings.get("activate") is True and settings.get("write_host_vars") is False:
        errors.append("tune_activate: true needs tune_write_host_vars: true (the tuned profile becomes the box's "
                      "profile through the host_vars the tune writes), got tune_write_host_vars false")
    return errors


def _key(config):
    return tuple(sorted((k, v) for k, v in config.items()))


def _walk(dim, values):
    """The order a dimension is walked in: away from its safe end. Serving settings grow the load, so
    they start small and go up; a power cap only ever makes things slower, so it starts at the highest
    cap and goes down (a TTFT limit is violated at the low end of the caps, not the high one)."""
    return sorted(values, reverse=dim in DESCENDING)


def tune_next(space, trials, objective="tps"):
    """The next configuration to try, or None when the walk is over.

    Coordinate-wise: every dimension starts at its safe end (the smallest value; the highest for the power
    cap, see _walk); each dimension in turn (the order of ``space``) is walked away from it with the
    others fixed at their best so far; the walk of a dimension stops
    at the first trial that is infeasible (a constraint violated or a failed start); the dimension is then
    fixed at the value of its best feasible trial (objective), or its starting value when none was feasible.
    trials: [{config, feasible, objective}].
    """
    done = {_key(t["config"]): t for t in trials or []}
    dims = list(space)
    current = {d: _walk(d, space[d])[0] for d in dims}
    for dim in dims:
        walked = []
        for value in _walk(dim, space[dim]):
            config = dict(current, **{dim: value})
            trial = done.get(_key(config))
            if trial is None:
                return config
            if not trial.get("feasible"):
                break
            walked.append(trial)
        if walked:
            best = max(walked, key=lambda t: t.get("objective") or 0)
            current[dim] = best["config"][dim]
    return None


def _level(report, concurrency):
    levels = [lv for lv in report.get("levels") or [] if lv.get("concurrency") == concurrency]
    return levels[0] if levels else None


def _agent_ttft_p95_s(report):
    """TTFT p95 of the agent level's later turns in seconds (the report keeps milliseconds); None without it."""
    agent = report.get("agent") or {}
    value = (agent.get("ttft_later_ms") or {}).get("p95")
    return None if value is None else round(float(value) / 1000.0, 6)


def tune_trial(report, config, started=True, target_concurrency=1, constraints=None, objective="tps"):
    """A trial from vllm_verify's report: {config, started, metrics, checks, failed, feasible, objective}.

    metrics: tps and tps_per_w at the target level, ttft_p95_s there (the probe's p95; a report from before
    vllm_probe gave p95 falls back to its p99: the conservative side), full_context_concurrency, errors (all levels incl. sampled ones, plus the
    report's errors_total). checks: {constraint: {limit, value, ok}} for each constraint set.
    """
    constraints = constraints or {}
    report = report or {}
    level = _level(report, target_concurrency) if started else None
    ttft = (level or {}).get("ttft_s") or {}
    errors = None
    if started:
        errors = sum(sum((lv.get("errors") or {}).values()) for lv in report.get("levels") or [])
        errors = max(errors, report.get("errors_total") or 0) + ((report.get("agent") or {}).get("errors_total") or 0)
    metrics = {
        "tps": (level or {}).get("aggregate_tps"),
        "tps_per_w": (level or {}).get("tps_per_w"),
        "ttft_p95_s": ttft.get("p95", ttft.get("p99")),
        # vllm_verify's startup report: KV pool tokens / max_model_len.
        "full_context_concurrency": (report.get("startup_report") or {}).get(
            "full_context_concurrency", report.get("full_context_concurrency")),
        "errors": errors,
        # What an agent's user feels: TTFT p95 of the later turns of the agent level (the history resent), in s.
        "agent_ttft_p95_s": _agent_ttft_p95_s(report) if started else None,
    }
    checks = {}
    if started and level is None:
        checks["target_level"] = {"limit": target_concurrency, "value": None, "ok": False}
    if constraints.get("ttft_p95_s") is not None:
        v = metrics["ttft_p95_s"]
        checks["ttft_p95_s"] = {"limit": constraints["ttft_p95_s"], "value": v,
                                "ok": v is not None and v <= constraints["ttft_p95_s"]}
    if constraints.get("agent_ttft_p95_s") is not None:
        v = metrics["agent_ttft_p95_s"]
        checks["agent_ttft_p95_s"] = {"limit": constraints["agent_ttft_p95_s"], "value": v,
                                      "ok": v is not None and v <= constraints["agent_ttft_p95_s"]}
    if constraints.get("min_full_context_concurrency") is not None:
        v = metrics["full_context_concurrency"]
        checks["min_full_context_concurrency"] = {"limit": constraints["min_full_context_concurrency"], "value": v,
                                                  "ok": v is not None and v >= constraints["min_full_context_concurrency"]}
    if constraints.get("zero_errors", True):
        checks["zero_errors"] = {"limit": 0, "value": errors, "ok": errors == 0}
    failed = ([] if started else ["started"]) + [k for k, c in checks.items() if not c["ok"]]
    return {"config": dict(config), "started": bool(started), "metrics": metrics, "checks": checks,
            "failed": failed, "feasible": not failed, "objective": metrics.get(objective) if started else None}


def _shortfall(trial):
    """How far a trial is from feasible (smaller is closer): failed start worst, then the count of failed
    constraints, then the sum of relative misses."""
    if not trial.get("started"):
        return (1, 0, 0.0)
    miss = 0.0
    for check in trial["checks"].values():
        if check["ok"]:
            continue
        value, limit = check["value"], check["limit"]
        if value is None or not limit:
            miss += 1.0
        else:
            miss += abs(value - limit) / abs(limit)
    return (0, len(trial["failed"]), miss)


def tune_choice(trials):
    """{ok, chosen, closest, msg}: the feasible trial with the best objective; when none is feasible the
    closest trial and the constraints it failed (msg says both)."""
    trials = list(trials or [])
    feasible = [t for t in trials if t.get("feasible")]
    if feasible:
        best = max(feasible, key=lambda t: t.get("objective") or 0)
        return {"ok": True, "chosen": best, "closest": None,
                "msg": "chose %s (objective %s) among %d feasible of %d trials"
                       % (_describe(best["config"]), best["objective"], len(feasible), len(trials))}
    if not trials:
        return {"ok": False, "chosen": None, "closest": None, "msg": "no trial ran"}
    closest = min(trials, key=_shortfall)
    parts = []
    for name in closest["failed"]:
        check = closest["checks"].get(name)
        parts.append("%s (value %s, limit %s)" % (name, check["value"], check["limit"]) if check else name)
    return {"ok": False, "chosen": None, "closest": closest,
            "msg": "no feasible configuration in %d trials; closest: %s, failed: %s"
                   % (len(trials), _describe(closest["config"]), "; ".join(parts))}


def _describe(config):
    return ", ".join("%s=%s" % (k, config[k]) for k in config)


def tune_profile(base, config, description="Chosen by playbooks/tune.yml"):
    """The profile for a candidate: the base profile ({description, settings, environment}) with the
    candidate's settings over its ``settings`` (the power limit is a cap, not a profile setting, and is
    left out; kv_cache_memory_bytes replaces gpu_memory_utilization)."""
    profile = copy.deepcopy(dict(base or {}))
    settings = dict(profile.get("settings") or {})
    settings.update({k: v for k, v in config.items() if k != "power_limit_w"})
    if "kv_cache_memory_bytes" in config:
        settings.pop("gpu_memory_utilization", None)
    profile["settings"] = settings
    profile["description"] = "%s: %s" % (description, _describe(config) or "the base profile")
    profile.setdefault("environment", {})
    return profile


def tune_host_vars(existing, profile, name="tuned", activate=False):
    """existing host_vars (a mapping or None) with vllm_service_extra_profiles[name] = profile, and
    vllm_service_profile: name only when activate; the other keys are kept as they are."""
    merged = copy.deepcopy(dict(existing or {}))
    extra = dict(merged.get("vllm_service_extra_profiles") or {})
    extra[name] = copy.deepcopy(profile)
    merged["vllm_service_extra_profiles"] = extra
    if activate:
        merged["vllm_service_profile"] = name
    return merged


class FilterModule:
    """tune.yml's filters."""

    def filters(self):
        return {
            "tune_setting_errors": tune_setting_errors,
            "tune_next": tune_next,
            "tune_trial": tune_trial,
            "tune_choice": tune_choice,
            "tune_profile": tune_profile,
            "tune_host_vars": tune_host_vars,
        }
