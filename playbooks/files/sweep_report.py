# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the runs of a gpuhost.inference profile x power-cap sweep (playbooks/sweep.yml).

Runs on the controller with the Python that runs ansible-playbook. Standard library only;
matplotlib is optional (without it the table is still written and the reason is printed).

Input: a manifest JSON written by the sweep play (--manifest), naming one vllm_verify JSON report
per (profile, cap) run plus what the roofline needs (GPU names, the bandwidth table, the model's
weight bytes). Output, in --out-dir:

  sweep.md                          the comparison (Markdown tables and notes)
  sweep_summary.json                the same figures as data, one row per run
  aggregate_tps_vs_concurrency.png  aggregate tok/s vs concurrency, one line per (profile, cap)
  tps_per_w_vs_cap.png              tok/s per W (at the highest concurrency) vs the power cap

The Markdown is also printed on stdout, followed by lines starting with "NOTE:" (e.g. why a plot
is missing), so that the play can show them. Exit status: 0 when the table was written (failed
runs are rows marked as such), 2 when the manifest cannot be read.

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

import argparse
import json
import math
import os
import sys

MANIFEST_VERSION = 1
MD_NAME = "sweep.md"
SUMMARY_NAME = "sweep_summary.json"
PLOT_AGGREGATE = "aggregate_tps_vs_concurrency.png"
PLOT_EFFICIENCY = "tps_per_w_vs_cap.png"
DASH = "–"


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


def fmt(value, digits=1, unit=""):
    if value is None:
        return DASH
    if isinstance(value, str):
        return value
    if digits == 0:
        text = "{:,.0f}".format(value)
    else:
        text = "{:,.{d}f}".format(value, d=digits)
    return text + unit


def fmt_small(value):
    """Energy per token: three significant digits, whatever the scale."""
    if value is None:
        return DASH
    if value == 0:
        return "0"
    return "{:.3g}".format(value)


def fmt_pct(value):
    """A percentage: one decimal, or three significant digits below 10 % (tiny models)."""
    if value is None:
        return DASH
    if abs(value) >= 10 or value == 0:
        return fmt(value, 1)
    return "{:.3g}".format(value)


REAL_POWER = "nvidia-smi"


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


def md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


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


def status_text(row):
    if row["status"] == "ok":
        return md_escape("ok" + ("; " + "; ".join(row["warnings"]) if row["warnings"] else ""))
    return md_escape(row["status"].upper() + ": " + (row["error"] or "see the report"))


def cap_label(row):
    """The cap as shown: the requested one, or the enforced one read before the run."""
    if row["cap_requested"]:
        text = fmt(row["cap_w"], 0)
        if row["enforced_w"] and any(abs(w - row["cap_w"]) > 0.5 for w in row["enforced_w"]):
            text += " (enforced " + "/".join(fmt(w, 0) for w in row["enforced_w"]) + ")"
        return text
    if row["enforced_w"]:
        return "/".join(fmt(w, 0) for w in sorted(set(row["enforced_w"]))) + " (current)"
    return "current"


def plot_label(row):
    if row["cap_requested"]:
        return "{} @ {} W".format(row["profile"], fmt(row["cap_w"], 0))
    if row["enforced_w"]:
        return "{} @ {} W (current cap)".format(row["profile"], "/".join(fmt(w, 0) for w in sorted(set(row["enforced_w"]))))
    return "{} @ current cap".format(row["profile"])


def cap_value(row):
    """A number for the x axis of the efficiency plot (None: unknown)."""
    if row["cap_requested"]:
        return row["cap_w"]
    if row["enforced_w"]:
        return sum(row["enforced_w"]) / len(row["enforced_w"])
    return None


# ------------------------------------------------------------------ the whole sweep
def load_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


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


def render_markdown(meta, rows, notes, plots):
    levels = concurrency_levels(rows)
    top = max((row["top_concurrency"] for row in rows if row["top_concurrency"]), default=None)
    top_tag = "@c{}".format(top) if top else "@top"
    out = []
    out.append("# vLLM sweep: profile x power cap on {}".format(md_escape(meta["host"] or "the host")))
    out.append("")
    facts = []
    if meta["model"]:
        facts.append("model `{}`".format(md_escape(meta["model"])))
    if meta["gpu_names"]:
        facts.append("GPUs: " + ", ".join(md_escape(n) for n in meta["gpu_names"]))
    if meta["started"]:
        facts.append("started " + md_escape(meta["started"]))
    if facts:
        out.append("; ".join(facts) + ".")
        out.append("")
    header = ["profile", "cap W", "KV pool tokens", "full-context concurrency", "decode tok/s (1 stream)"]
    header += ["aggregate tok/s c={}".format(c) for c in levels]
    header += ["TTFT p50 s (c=1)", "mean W " + top_tag, "J/token " + top_tag, "tok/s/W " + top_tag,
               "power source", "roofline %", "status"]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|")
    for row in rows:
        cells = [
            md_escape(row["profile"]),
            md_escape(cap_label(row)),
            fmt(row["kv_cache_tokens"], 0),
            fmt(row["full_context_concurrency"], 2),
            fmt(row["decode_tps_single"], 1),
        ]
        cells += [fmt(row["aggregate_tps"].get(c), 1) for c in levels]
        cells += [
            fmt(row["ttft_p50_s_single"], 3),
            fmt(row["mean_w_top"], 1),
            fmt_small(row["j_per_token_top"]),
            fmt(row["tps_per_w_top"], 3),
            md_escape(row["power_source"]),
            fmt_pct(row["roofline_pct"]),
            status_text(row),
        ]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")

    out.append("## Power per concurrency level")
    out.append("")
    out.append("| profile | cap W | concurrency | aggregate tok/s | mean W | J/token | tok/s/W | errors | power source |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        for level in row["levels"]:
            out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                md_escape(row["profile"]), md_escape(cap_label(row)), level["concurrency"],
                fmt(level["aggregate_tps"], 1), fmt(level["mean_w"], 1), fmt_small(level["j_per_token"]),
                fmt(level["tps_per_w"], 3), fmt(level["errors"], 0), md_escape(row["power_source"])))
    out.append("")

    if any(row.get("agent") for row in rows):
        out.append("## Agent level (streaming chat with tools, growing history)")
        out.append("")
        out.append("| profile | cap W | requests | errors | TTFT p95 ms first turns | TTFT p95 ms later turns "
                   "| forced tool calls parsed | prefix-cache hit rate | first error |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for row in rows:
            agent = row.get("agent")
            if not agent:
                continue
            out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                md_escape(row["profile"]), md_escape(cap_label(row)), fmt(agent["requests"], 0),
                fmt(agent["errors"], 0), fmt(agent["ttft_first_p95_ms"], 0), fmt(agent["ttft_later_p95_ms"], 0),
                agent["forced"], fmt(agent["hit_rate"], 2), md_escape(agent["error"] or "-")))
        out.append("")

    out.append("## How to read it")
    out.append("")
    out.append("- cap W: the per-GPU power limit requested for the run (\"current\": the sweep left the cap "
               "alone; the enforced limit read before the run is shown).")
    out.append("- KV pool tokens and full-context concurrency: vLLM's startup report of that run.")
    out.append("- decode tok/s (1 stream): median per-request decode rate at concurrency 1; TTFT at concurrency 1.")
    out.append("- mean W, J/token, tok/s/W: summed over the GPUs, at the highest concurrency of the run ({}).".format(
        top_tag.lstrip("@")))
    if meta["bandwidth_gb_s"] and meta["weight_bytes"]:
        out.append("- roofline %: decode tok/s (1 stream) / (bandwidth / (weight bytes / tensor parallel size)); "
                   "bandwidth {} GB/s from {}; weight bytes {} ({}).".format(
                       fmt(meta["bandwidth_gb_s"], 0), md_escape(meta["bandwidth_source"]),
                       fmt(meta["weight_bytes"], 0), md_escape(meta["weight_source"] or "given")))
    else:
        out.append("- roofline %: not computed ({}).".format(
            md_escape(meta["bandwidth_source"] if not meta["bandwidth_gb_s"] else "weight bytes unknown")))
    if meta["power_source"] != "nvidia-smi" or meta["power_source_note"]:
        out.append("- power source: **{}**{}".format(
            md_escape(meta["power_source"]),
            (": " + md_escape(meta["power_source_note"])) if meta["power_source_note"] else ""))
    else:
        out.append("- power source: nvidia-smi, sampled during each level's load window.")
    if any(row["power_source"] == "test double" for row in rows):
        out.append("- power source test double: the nvidia-smi is not the real one (the lab's mock); its watts, "
                   "J/token and tok/s/W are simulated, not measured.")
    if any(row["no_gpu_reason"] for row in rows):
        out.append("- roofline %: empty where no real GPU serves the model (the power source is not the real "
                   "nvidia-smi, or vLLM runs on the CPU).")
    out.append("")
    if plots:
        out.append("## Plots")
        out.append("")
        for title, name in plots:
            out.append("![{}]({})".format(title, name))
        out.append("")
    if notes:
        out.append("## Notes")
        out.append("")
        for note in notes:
            out.append("- " + md_escape(note))
        out.append("")
    reports = [row for row in rows if row["report"]]
    if reports:
        out.append("## Run reports")
        out.append("")
        for row in reports:
            out.append("- {} @ {}: `{}`".format(md_escape(row["profile"]), md_escape(cap_label(row)),
                                                md_escape(row["report"])))
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------ plots
def import_pyplot():
    """(pyplot, None) or (None, the reason it cannot be used)."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except Exception as exc:  # pylint: disable=broad-except  # ImportError and a broken install alike
        return None, "matplotlib is not usable with {} ({}: {}); install it on the controller " \
            "(pip install matplotlib) for the PNG plots".format(sys.executable, type(exc).__name__, exc)
    return plt, None


def _style(index):
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    return styles[index % len(styles)], markers[index % len(markers)]


def plot_aggregate(plt, meta, rows, path):
    """Aggregate tok/s vs concurrency, one line per (profile, cap); returns True when saved."""
    rows = [row for row in rows if row["aggregate_tps"]]
    if not rows:
        return False
    profiles = list(dict.fromkeys(row["profile"] for row in rows))
    caps = list(dict.fromkeys(cap_label(row) for row in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for row in rows:
        points = sorted((c, v) for c, v in row["aggregate_tps"].items() if v is not None)
        if not points:
            continue
        style, marker = _style(caps.index(cap_label(row)))
        ax.plot([p[0] for p in points], [p[1] for p in points], linestyle=style, marker=marker,
                color=colours[profiles.index(row["profile"]) % len(colours)],
                label=plot_label(row))
    levels = concurrency_levels(rows)
    ax.set_xscale("log", base=2)
    title = "Aggregate decode throughput vs concurrency ({})".format(meta.get("host") or "host")
    if meta.get("power_source") and meta.get("power_source") != "nvidia-smi":
        title += "\n(power: {})".format(meta["power_source"])
    _finish(plt, fig, ax, path, levels, [str(c) for c in levels], "concurrent requests",
            "aggregate output throughput (tokens/s)", title, "profile @ cap")
    return True


def _finish(plt, fig, ax, path, ticks, ticklabels, xlabel, ylabel, title, legend_title):
    """Axes, labels, grid and legend shared by the plots; save the figure and close it."""
    ax.set_xticks(ticks)
    ax.set_xticklabels(ticklabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(title=legend_title, fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_efficiency(plt, meta, rows, path):
    """tok/s per W at the highest concurrency vs the power cap, one line per profile."""
    points = {}
    for row in rows:
        x, y = cap_value(row), row["tps_per_w_top"]
        if x is None or y is None:
            continue
        points.setdefault(row["profile"], []).append((x, y))
    if not points:
        return False
    top = max((row["top_concurrency"] for row in rows if row["top_concurrency"]), default=None)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for index, (profile, values) in enumerate(points.items()):
        values.sort()
        style, marker = _style(index)
        ax.plot([v[0] for v in values], [v[1] for v in values], linestyle=style, marker=marker, label=profile)
    caps = sorted({v[0] for values in points.values() for v in values})
    title = "Energy efficiency vs power cap"
    if top:
        title += " at {} concurrent requests".format(top)
    if meta.get("power_source") != "nvidia-smi":
        title += "\n(power: {})".format(meta.get("power_source") or "unknown")
    _finish(plt, fig, ax, path, caps, [fmt(c, 0) for c in caps], "power cap per GPU (W)",
            "throughput per watt (tokens/s/W)", title, "profile")
    return True


# ------------------------------------------------------------------ main
def summary_data(meta, rows, notes, plots):
    def clean(row):
        data = dict(row)
        data["aggregate_tps"] = {str(k): v for k, v in row["aggregate_tps"].items()}
        data["cap_label"] = cap_label(row)
        return data
    return {"version": MANIFEST_VERSION, "meta": meta, "rows": [clean(r) for r in rows], "notes": notes,
            "plots": [name for _title, name in plots]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--manifest", required=True, help="the sweep manifest JSON written by playbooks/sweep.yml")
    parser.add_argument("--out-dir", help="where to write the report (default: the manifest's directory)")
    parser.add_argument("--no-plots", action="store_true", help="write the tables only")
    args = parser.parse_args(argv)
    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as exc:
        sys.stderr.write("sweep_report: {}\n".format(exc))
        return 2
    base = os.path.dirname(os.path.abspath(args.manifest))
    out_dir = args.out_dir or base
    os.makedirs(out_dir, exist_ok=True)
    meta, rows, notes = build(manifest, base)
    if not rows:
        notes.append("the sweep recorded no run")

    plots = []
    if args.no_plots:
        notes.append("plots not drawn (--no-plots)")
    else:
        plt, why = import_pyplot()
        if plt is None:
            notes.append("no PNG plots: " + why)
        else:
            if plot_aggregate(plt, meta, rows, os.path.join(out_dir, PLOT_AGGREGATE)):
                plots.append(("aggregate tok/s vs concurrency", PLOT_AGGREGATE))
            else:
                notes.append("no aggregate throughput plot: no run has probe levels")
            if plot_efficiency(plt, meta, rows, os.path.join(out_dir, PLOT_EFFICIENCY)):
                plots.append(("tok/s per W vs power cap", PLOT_EFFICIENCY))
            else:
                notes.append("no efficiency plot: no run has both a known cap and tok/s per W")

    text = render_markdown(meta, rows, notes, plots)
    with open(os.path.join(out_dir, MD_NAME), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    with open(os.path.join(out_dir, SUMMARY_NAME), "w", encoding="utf-8") as handle:
        json.dump(summary_data(meta, rows, notes, plots), handle, indent=2, sort_keys=True)
        handle.write("\n")
    sys.stdout.write(text + "\n")
    for note in notes:
        sys.stdout.write("NOTE: " + note + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
