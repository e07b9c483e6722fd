# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The presentation of the sweep's comparison (sweep_report.py): rows -> sweep.md and sweep_summary.json.

Takes (meta, rows, notes) from sweep_data.build and the plots drawn (sweep_plot.draw) and writes the
Markdown comparison and the same figures as JSON. Standard library only.
"""
from __future__ import annotations

import json
import os

from report_common import fmt, fmt_pct, fmt_small, md_escape
from sweep_data import MANIFEST_VERSION, concurrency_levels

MD_NAME = "sweep.md"
SUMMARY_NAME = "sweep_summary.json"


# ------------------------------------------------------------------ labels
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


# ------------------------------------------------------------------ sweep.md
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


# ------------------------------------------------------------------ sweep_summary.json
def summary_data(meta, rows, notes, plots):
    def clean(row):
        data = dict(row)
        data["aggregate_tps"] = {str(k): v for k, v in row["aggregate_tps"].items()}
        data["cap_label"] = cap_label(row)
        return data
    return {"version": MANIFEST_VERSION, "meta": meta, "rows": [clean(r) for r in rows], "notes": notes,
            "plots": [name for _title, name in plots]}


def write(out_dir, meta, rows, notes, plots):
    """Write sweep.md and sweep_summary.json into out_dir; return the Markdown (without its final newline)."""
    text = render_markdown(meta, rows, notes, plots)
    with open(os.path.join(out_dir, MD_NAME), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    with open(os.path.join(out_dir, SUMMARY_NAME), "w", encoding="utf-8") as handle:
        json.dump(summary_data(meta, rows, notes, plots), handle, indent=2, sort_keys=True)
        handle.write("\n")
    return text
