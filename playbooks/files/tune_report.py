# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tune.json -> tune.md (all trials, each constraint's pass/fail, the choice, the baseline and the
tuned/baseline ratio) and tune-pareto.png (throughput vs TTFT p95, the TTFT constraint drawn).

    python3 tune_report.py reports/tune-<stamp>/<host>/tune.json

Runs on the controller with the Python that runs ansible-playbook (playbooks/tune.yml), from any
directory. Both files land beside tune.json; the Markdown is also printed on stdout, followed by
lines starting with "NOTE:" (why the plot is missing). matplotlib is optional, as for
sweep_report.py: without it tune.md is still written. Exit status: 0 when tune.md was written, 2
when tune.json cannot be read or lacks a key the report needs. The number format and the matplotlib
setup are report_common.py's (shared with sweep_report.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from report_common import fmt_small, import_pyplot, load_json  # noqa: E402  # pylint: disable=wrong-import-position

MD_NAME = "tune.md"
PLOT_PARETO = "tune-pareto.png"
# What playbooks/tune.yml's "Write tune.json" always writes and markdown() reads.
REQUIRED = ("host", "objective", "constraints", "target_concurrency", "original_profile", "trials")


class TuneError(Exception):
    """tune.json is missing or malformed."""


def load_tune(path):
    """tune.json as playbooks/tune.yml writes it; TuneError when it cannot be read or lacks a key."""
    try:
        manifest = load_json(path)
    except (OSError, ValueError) as exc:
        raise TuneError("cannot read {}: {}".format(path, exc)) from exc
    if not isinstance(manifest, dict):
        raise TuneError("{} is not a JSON object".format(path))
    missing = [key for key in REQUIRED if key not in manifest]
    if missing:
        raise TuneError("{} has no {}".format(path, ", ".join(missing)))
    if not isinstance(manifest["trials"], list):
        raise TuneError("{}: 'trials' is not a list".format(path))
    return manifest


def _fmt(value):
    """A cell of the trials table: three significant digits for a float, '-' for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return fmt_small(value)
    return str(value)


def _config(trial):
    if trial.get("baseline"):
        return "baseline"
    return ", ".join("%s=%s" % kv for kv in sorted(trial["config"].items()))


def _mark(trial, constraint):
    """pass / FAIL for a constraint the trial was checked against, '-' for one it was not."""
    check = trial["checks"].get(constraint)
    if check is None:
        return "-"
    return "pass" if check["ok"] else "FAIL"


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
        marks = [_mark(t, c) for c in constraints]
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            i, _config(t), "yes" if t["started"] else "no", _fmt(m["tps"]), _fmt(m["tps_per_w"]), _fmt(m["ttft_p95_s"]),
            _fmt(m.get("agent_ttft_p95_s")),
            _fmt(m["full_context_concurrency"]), _fmt(m["errors"]), " | ".join(marks), _fmt(t["objective"]),
            "**yes**" if (not t.get("baseline") and t["config"] == chosen) else ""))
    base = manifest.get("baseline") or {}
    tuned = (choice.get("chosen") or {}).get("objective")
    if chosen is None or not base.get("objective"):
        lines += ["", "Tuned vs baseline: no ratio (no choice or no baseline objective)"]
    elif tuned is None:
        lines += ["", "Tuned vs baseline: no ratio (the chosen trial has no %s)" % manifest["objective"]]
    else:
        text = "Tuned vs baseline (%s): %s / %s = %.2fx" % (
            manifest["objective"], _fmt(tuned), _fmt(base["objective"]), tuned / base["objective"])
        lines += ["", text]
    return "\n".join(lines) + "\n"


def pareto_png(plt, manifest, path):
    """Throughput vs TTFT p95 of the started trials; the TTFT constraint as a vertical line.

    plt: matplotlib.pyplot (report_common.import_pyplot) or a test double.
    """
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


def main(argv=None):
    """Write tune.md and tune-pareto.png beside tune.json; print the Markdown, then the notes."""
    parser = argparse.ArgumentParser(description="Write tune.md and tune-pareto.png beside a tune.json of playbooks/tune.yml")
    parser.add_argument("tune_json", help="the tune.json written by playbooks/tune.yml")
    args = parser.parse_args(argv)
    try:
        manifest = load_tune(args.tune_json)
    except TuneError as exc:
        sys.stderr.write("tune_report: {}\n".format(exc))
        return 2
    text = markdown(manifest)
    directory = os.path.dirname(args.tune_json)
    with open(os.path.join(directory, MD_NAME), "w", encoding="utf-8") as handle:
        handle.write(text)
    notes = []
    plt, why = import_pyplot()
    if plt is None:
        notes.append("no Pareto plot: " + why)
    else:
        pareto_png(plt, manifest, os.path.join(directory, PLOT_PARETO))
    sys.stdout.write(text)
    for note in notes:
        sys.stdout.write("NOTE: " + note + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
