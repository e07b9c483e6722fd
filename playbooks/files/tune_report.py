# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tune.json -> tune.md (all trials, each constraint's pass/fail, the choice, the baseline and the
tuned/baseline ratio) and tune-pareto.png (throughput vs TTFT p95, the TTFT constraint drawn).

    python3 tune_report.py reports/tune-<stamp>/<host>/tune.json
"""
from __future__ import annotations

import json
import os
import sys


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.3g" % value
    return str(value)


def _config(trial):
    if trial.get("baseline"):
        return "baseline"
    return ", ".join("%s=%s" % kv for kv in sorted(trial["config"].items()))


def markdown(manifest):
    """The report's Markdown text."""
    constraints = sorted({k for t in manifest["trials"] for k in t.get("checks", {})})
    choice = manifest.get("choice") or {}
    chosen = (choice.get("chosen") or {}).get("config")
    lines = ["# Tune report: %s" % manifest["host"], "",
             "- objective: %s at concurrency %s" % (manifest["objective"], manifest["target_concurrency"]),
             "- constraints: %s" % json.dumps(manifest["constraints"], sort_keys=True),
             "- original profile (baseline): %s" % manifest["original_profile"],
             "- result: %s" % choice.get("msg", "-"), "",
             "| # | configuration | started | tok/s | tok/s/W | TTFT p95 s | agent later-turn TTFT p95 s | full-context conc. | errors | "
             + " | ".join(constraints) + " | objective | chosen |",
             "|" + "---|" * (11 + len(constraints))]
    for i, t in enumerate(manifest["trials"]):
        m = t["metrics"]
        marks = ["pass" if t["checks"][c]["ok"] else "FAIL" if c in t["checks"] else "-" for c in constraints]
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            i, _config(t), "yes" if t["started"] else "no", _fmt(m["tps"]), _fmt(m["tps_per_w"]), _fmt(m["ttft_p95_s"]),
            _fmt(m.get("agent_ttft_p95_s")),
            _fmt(m["full_context_concurrency"]), _fmt(m["errors"]), " | ".join(marks), _fmt(t["objective"]),
            "**yes**" if (not t.get("baseline") and t["config"] == chosen) else ""))
    base = manifest.get("baseline") or {}
    if chosen is not None and base.get("objective"):
        ratio = choice["chosen"]["objective"] / base["objective"]
        text = "Tuned vs baseline (%s): %s / %s = %.2fx" % (
            manifest["objective"], _fmt(choice["chosen"]["objective"]), _fmt(base["objective"]), ratio)
        lines += ["", text]
    else:
        lines += ["", "Tuned vs baseline: no ratio (no choice or no baseline objective)"]
    return "\n".join(lines) + "\n"


def pareto_png(manifest, path):
    """Throughput vs TTFT p95 of the started trials; the TTFT constraint as a vertical line."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in manifest["trials"]:
        m = t["metrics"]
        if m["tps"] is None or m["ttft_p95_s"] is None:
            continue
        colour = "tab:blue" if t.get("baseline") else ("tab:green" if t.get("feasible") else "tab:red")
        ax.scatter(m["ttft_p95_s"], m["tps"], color=colour)
        ax.annotate(_config(t), (m["ttft_p95_s"], m["tps"]), fontsize=7)
    limit = (manifest.get("constraints") or {}).get("ttft_p95_s")
    if limit is not None:
        ax.axvline(limit, color="black", linestyle="--", label="TTFT p95 limit %s s" % limit)
        ax.legend()
    ax.set_xlabel("TTFT p95 (s)")
    ax.set_ylabel("aggregate tok/s")
    ax.set_title("tune: %s" % manifest["host"])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv):
    """Write tune.md and tune-pareto.png beside tune.json; print the Markdown."""
    path = argv[1]
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    text = markdown(manifest)
    directory = os.path.dirname(path)
    with open(os.path.join(directory, "tune.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    pareto_png(manifest, os.path.join(directory, "tune-pareto.png"))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
