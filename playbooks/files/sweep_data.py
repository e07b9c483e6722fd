# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The data of the sweep's comparison (sweep_report.py): a manifest and its runs' reports -> rows.

Reads the manifest that playbooks/sweep.yml writes and the vllm_verify JSON report of every
(profile, cap) run it names, and turns them into (meta, rows, notes): one row (a dict of figures)
per run, the facts of the sweep, and what the reader should know. No formatting and no plotting
here (sweep_render.py, sweep_plot.py). Standard library only.

Roofline: decode of one stream reads every weight once per token, so the bound is
  tokens/s = bandwidth (bytes/s) / (weight bytes / tensor parallel size)
and the column is the measured single-stream decode tok/s as a percentage of it. Speculative
decoding (e.g. MTP) emits more than one token per weight pass and may exceed 100 %. The column is
left empty for a run where no real GPU serves the model: its report's power source is not the real
nvidia-smi (a test double or none) or vLLM ran on the CPU (platform cpu).

Power source: each run's report says where its watts come from (power_source: nvidia-smi | test
double | none); the table names it per run and the plots' titles when it is not nvidia-smi.
"""
from __future__ import annotations

import math
import os

from report_common import load_json

MANIFEST_VERSION = 1
REAL_POWER = "nvidia-smi"


class ManifestError(Exception):
    """The manifest is missing or malformed."""


# ------------------------------------------------------------------ small helpers
def number(value):
    """A finite float from an int/float/numeric string, else None (bools are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return result if math.isfinite(result) else None


def dig(data, *paths):
    """The first value found at one of the key paths ("a.b.c") in nested dicts, else None."""
    for path in paths:
        node = data
        for key in path.split("."):
            if isinstance(node, dict) and key in node:
                node = node[key]
            else:
                node = None
                break
        if node is not None:
            return node
    return None


def power_kind(text):
    """vllm_verify's power_source (nvidia-smi | test double | none) from a report's or a manifest's text."""
    text = str(text or "").strip()
    if not text:
        return None
    low = text.lower()
    if "test double" in low or "mock" in low:
        return "test double"
    if low.startswith("none"):
        return "none"
    return REAL_POWER


# ------------------------------------------------------------------ roofline
def lookup_bandwidth(gpu_names, table, override=None):
    """(GB/s, source text) for the GPUs; override (a number) wins; else the table's first match.

    table: list of {match: substring (case-insensitive), bandwidth_gb_s: number, source: text},
    first match wins (so specific entries come before general ones). With GPUs of different
    models the smallest bandwidth bounds tensor-parallel decode.
    """
    value = number(override)
    if value is not None and value > 0:
        return value, "variable sweep_gpu_bandwidth_gb_s"
    names = [n for n in (gpu_names or []) if isinstance(n, str) and n]
    if not names:
        return None, "no GPU name known"
    found = []
    for name in names:
        hit = None
        for entry in table or []:
            match = str(entry.get("match", ""))
            if match and match.lower() in name.lower():
                hit = entry
                break
        if hit is None:
            return None, "GPU {!r} is not in the bandwidth table (set sweep_gpu_bandwidth_gb_s)".format(name)
        value = number(hit.get("bandwidth_gb_s"))
        if value is None or value <= 0:
            return None, "the bandwidth table has no single figure for {!r} (entry {!r}: {}); " \
                "set sweep_gpu_bandwidth_gb_s".format(name, hit.get("match"), hit.get("source") or "no source")
        found.append((value, name, hit))
    low = min(found, key=lambda f: f[0])
    source = "table entry {!r} for {}".format(low[2].get("match"), low[1])
    if low[2].get("source"):
        source += " ({})".format(low[2]["source"])
    return low[0], source


def roofline_bound_tps(bandwidth_gb_s, weight_bytes, tensor_parallel_size):
    """Single-stream decode bound in tokens/s, or None when a figure is missing."""
    bw = number(bandwidth_gb_s)
    wb = number(weight_bytes)
    tp = number(tensor_parallel_size) or 1.0
    if bw is None or wb is None or bw <= 0 or wb <= 0 or tp <= 0:
        return None
    bytes_per_token = wb / tp
    return bw * 1e9 / bytes_per_token


def roofline_pct(decode_tps, bound_tps):
    d = number(decode_tps)
    if d is None or bound_tps is None or bound_tps <= 0:
        return None
    return 100.0 * d / bound_tps


# ------------------------------------------------------------------ one run
def power_total_w(power):
    """Sum of the per-GPU mean draw of a level's power dict ({"0": {"mean_w": ..}, ..})."""
    if not isinstance(power, dict) or not power:
        return None
    if number(power.get("mean_w")) is not None:  # already a total
        return number(power["mean_w"])
    means = [number(v.get("mean_w")) for v in power.values() if isinstance(v, dict)]
    means = [m for m in means if m is not None]
    return sum(means) if means else None


def power_energy_j(power):
    if not isinstance(power, dict) or not power:
        return None
    if number(power.get("energy_j")) is not None:
        return number(power["energy_j"])
    energies = [number(v.get("energy_j")) for v in power.values() if isinstance(v, dict)]
    energies = [e for e in energies if e is not None]
    return sum(energies) if energies else None


def level_figures(level):
    """The figures of one probe level, recomputing J/token and tok/s/W when they are missing."""
    conc = number(level.get("concurrency"))
    agg = number(level.get("aggregate_tps"))
    watts = number(level.get("power_w"))
    if watts is None:
        watts = power_total_w(level.get("power"))
    energy = number(level.get("energy_j"))
    if energy is None:
        energy = power_energy_j(level.get("power"))
    tokens = number(level.get("output_tokens"))
    j_per_token = number(level.get("j_per_token"))
    if j_per_token is None and energy is not None and tokens:
        j_per_token = energy / tokens
    tps_per_w = number(level.get("tps_per_w"))
    if tps_per_w is None and agg is not None and watts:
        tps_per_w = agg / watts
    errors = level.get("errors")
    error_count = sum(number(v) or 0 for v in errors.values()) if isinstance(errors, dict) else number(errors)
    return {
        "concurrency": int(conc) if conc is not None else None,
        "aggregate_tps": agg,
        "decode_tps_p50": number(dig(level, "decode_tps.p50", "decode_tps.mean")),
        "ttft_p50_s": number(dig(level, "ttft_s.p50", "ttft_s.mean")),
        "mean_w": watts,
        "j_per_token": j_per_token,
        "tps_per_w": tps_per_w,
        "output_tokens": tokens,
        "errors": error_count,
    }


def report_levels(report):
    levels = dig(report, "probe.levels", "results.levels", "levels")
    if not isinstance(levels, list):
        return []
    out = [level_figures(level) for level in levels if isinstance(level, dict)]
    out = [level for level in out if level["concurrency"] is not None]
    return sorted(out, key=lambda level: level["concurrency"])


def report_setting(report, name):
    """A vLLM setting of the run's profile (the rendered --config YAML: underscores or dashes)."""
    settings = report.get("profile_settings")
    if not isinstance(settings, dict):
        return None
    for key in (name, name.replace("_", "-")):
        if key in settings:
            return settings[key]
    return None


def report_tp(report, default):
    value = number(report_setting(report, "tensor_parallel_size"))
    return int(value) if value and value > 0 else default


def report_enforced(report):
    """Enforced limits per GPU read by vllm_verify (its power.limits), a list of numbers."""
    limits = dig(report, "power.limits")
    if not isinstance(limits, list):
        return []
    values = [number(item.get("enforced_w")) for item in limits if isinstance(item, dict)]
    return [v for v in values if v is not None]


def report_problems(report):
    """What vllm_verify itself flagged: failed gates, a cap that did not apply."""
    problems = []
    if report.get("passed") is False:
        gates = report.get("failed_gates") or []
        problems.append("gates failed: " + (", ".join(str(g) for g in gates) if gates else "see the report"))
    power = report.get("power")
    if isinstance(power, dict) and power.get("cap_applied") is False and power.get("reason"):
        problems.append("cap: " + str(power["reason"]))
    return problems


def report_power_source(report):
    """The run's power source as its report says it (None for a report from before it said it)."""
    return power_kind(dig(report, "power_source", "power.power_source"))


def no_gpu_reason(power_source, platform):
    """Why no real GPU serves the model of a run (None when one does, as far as the report says)."""
    if power_source is not None and power_source != REAL_POWER:
        return "power source {}".format(power_source)
    if platform == "cpu":
        return "vLLM platform cpu"
    return None


def agent_figures(report):
    """The agent level of a run (vllm_verify's report section `agent`), None when it did not run."""
    agent = report.get("agent") if isinstance(report, dict) else None
    if not isinstance(agent, dict) or not agent.get("enabled") or not agent.get("ran"):
        return None
    return {
        "requests": number(agent.get("requests")),
        "errors": number(agent.get("errors_total")),
        "ttft_later_p95_ms": number((agent.get("ttft_later_ms") or {}).get("p95")),
        "ttft_first_p95_ms": number((agent.get("ttft_first_ms") or {}).get("p95")),
        "hit_rate": number(agent.get("prefix_cache_hit_rate")),
        "forced": "%s/%s" % (agent.get("forced_ok", 0), agent.get("forced", 0)),
        "error": (agent.get("error_messages") or [None])[0],
    }


def run_row(run, report, meta):
    """One table row (a dict) from the manifest's run entry and its loaded report (or None)."""
    report = report or {}
    levels = report_levels(report)
    by_conc = {level["concurrency"]: level for level in levels}
    single = by_conc.get(1)
    top = levels[-1] if levels else None
    tp = report_tp(report, meta.get("tensor_parallel_size") or 1)
    bound = roofline_bound_tps(meta.get("bandwidth_gb_s"), meta.get("weight_bytes"), tp)
    decode = single["decode_tps_p50"] if single else None
    power_source = report_power_source(report) or power_kind(meta.get("power_source")) or REAL_POWER
    platform = dig(report, "vllm.platform", "power.platform")
    no_gpu = no_gpu_reason(power_source, platform)
    cap = number(run.get("cap_w"))
    enforced = [number(w) for w in (run.get("enforced_w") or [])]
    enforced = [w for w in enforced if w is not None] or report_enforced(report)
    status = run.get("status") or "ok"
    reasons = [run["error"]] if run.get("error") else []
    if status == "skipped":
        pass
    elif not report:
        reasons.append("no report")
    elif not levels:
        reasons.append("no probe levels in the report")
    problems = report_problems(report)
    reasons += [p for p in problems if not any(p in r for r in reasons)]
    if status == "ok" and (not report or not levels):
        status = "failed"
    return {
        "profile": run.get("profile"),
        "cap_w": cap,
        "cap_requested": cap is not None,
        "enforced_w": enforced,
        "status": status,
        "error": "; ".join(reasons) if status != "ok" else "",
        "warnings": problems if status == "ok" else [],
        "report": run.get("report"),
        "tensor_parallel_size": tp,
        "kv_cache_tokens": number(dig(report, "startup_report.kv_cache_tokens",
                                      "startup_report.journal.kv_cache_tokens")),
        "full_context_concurrency": number(dig(report, "startup_report.full_context_concurrency",
                                               "startup_report.reported_max_concurrency",
                                               "startup_report.journal.max_concurrency")),
        "decode_tps_single": decode,
        "ttft_p50_s_single": single["ttft_p50_s"] if single else None,
        "aggregate_tps": {level["concurrency"]: level["aggregate_tps"] for level in levels},
        "levels": levels,
        "top_concurrency": top["concurrency"] if top else None,
        "mean_w_top": top["mean_w"] if top else None,
        "j_per_token_top": top["j_per_token"] if top else None,
        "tps_per_w_top": top["tps_per_w"] if top else None,
        "roofline_bound_tps": bound if no_gpu is None else None,
        "roofline_pct": roofline_pct(decode, bound) if no_gpu is None else None,
        "power_source": power_source,
        "platform": platform,
        "no_gpu_reason": no_gpu,
        "agent": agent_figures(report),
    }


# ------------------------------------------------------------------ the whole sweep
def load_manifest(path):
    try:
        manifest = load_json(path)
    except (OSError, ValueError) as exc:
        raise ManifestError("cannot read the sweep manifest {}: {}".format(path, exc)) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("runs"), list):
        raise ManifestError("the sweep manifest {} has no 'runs' list".format(path))
    return manifest


def resolve(path, base):
    if not path:
        return None
    return path if os.path.isabs(path) else os.path.join(base, path)


def build(manifest, base_dir):
    """(meta, rows, notes) from a manifest; reports are read relative to base_dir."""
    notes = []
    loaded = []
    for run in manifest["runs"]:
        if not isinstance(run, dict):
            continue
        report = None
        path = resolve(run.get("report"), base_dir)
        if path:
            try:
                report = load_json(path)
            except (OSError, ValueError) as exc:
                notes.append("run {} @ {}: cannot read the report {}: {}".format(
                    run.get("profile"), run.get("cap_w"), path, exc))
        loaded.append((run, report if isinstance(report, dict) else None))

    gpu_names = [n for n in (manifest.get("gpu_names") or []) if n]
    if not gpu_names:
        for _run, report in loaded:
            listed = dig(report or {}, "gpus.list")
            if isinstance(listed, list) and listed:
                gpu_names = [g.get("name") for g in listed if isinstance(g, dict) and g.get("name")]
                break
    bandwidth, bw_source = lookup_bandwidth(gpu_names, manifest.get("bandwidth_table") or [],
                                            manifest.get("bandwidth_gb_s"))
    weight_bytes = number(manifest.get("weight_bytes"))
    meta = {
        "host": manifest.get("host"),
        "model": manifest.get("model"),
        "gpu_names": gpu_names,
        "bandwidth_gb_s": bandwidth,
        "bandwidth_source": bw_source,
        "weight_bytes": weight_bytes if weight_bytes and weight_bytes > 0 else None,
        "weight_source": manifest.get("weight_source") or "",
        "tensor_parallel_size": int(number(manifest.get("tensor_parallel_size")) or 1),
        "power_source": manifest.get("power_source") or "nvidia-smi",
        "power_source_note": manifest.get("power_source_note") or "",
        "started": manifest.get("started"),
    }
    if bandwidth is None:
        notes.append("roofline column empty: " + bw_source)
    if meta["weight_bytes"] is None:
        notes.append("roofline column empty: the model's weight bytes are unknown ({})".format(
            meta["weight_source"] or "set sweep_model_weight_bytes"))
    rows = [run_row(run, report, meta) for run, report in loaded]
    said = sorted({row["power_source"] for row, (_run, report) in zip(rows, loaded) if report_power_source(report or {})})
    if said:
        meta["power_source"] = ", ".join(said)
    for reason in sorted({row["no_gpu_reason"] for row in rows if row["no_gpu_reason"]}):
        notes.append("roofline column empty where no real GPU serves the model ({})".format(reason))
    return meta, rows, notes


def concurrency_levels(rows):
    return sorted({c for row in rows for c in row["aggregate_tps"]})
