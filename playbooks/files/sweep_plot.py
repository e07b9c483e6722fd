# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plots of the sweep's comparison (sweep_report.py): rows -> two PNG files, with matplotlib.

  aggregate_tps_vs_concurrency.png  aggregate tok/s vs concurrency, one line per (profile, cap)
  tps_per_w_vs_cap.png              tok/s per W (at the highest concurrency) vs the power cap

The plot functions take pyplot as their first argument (report_common.import_pyplot, or a test
double); draw() imports it and says in a note why a plot is missing.
"""
from __future__ import annotations

import os

from report_common import fmt, import_pyplot
from sweep_data import concurrency_levels
from sweep_render import cap_label

PLOT_AGGREGATE = "aggregate_tps_vs_concurrency.png"
PLOT_EFFICIENCY = "tps_per_w_vs_cap.png"


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


def draw(meta, rows, out_dir, notes):
    """Draw the plots into out_dir: [(title, file name)] of those drawn; why one is not drawn goes to notes."""
    plots = []
    plt, why = import_pyplot()
    if plt is None:
        notes.append("no PNG plots: " + why)
        return plots
    if plot_aggregate(plt, meta, rows, os.path.join(out_dir, PLOT_AGGREGATE)):
        plots.append(("aggregate tok/s vs concurrency", PLOT_AGGREGATE))
    else:
        notes.append("no aggregate throughput plot: no run has probe levels")
    if plot_efficiency(plt, meta, rows, os.path.join(out_dir, PLOT_EFFICIENCY)):
        plots.append(("tok/s per W vs power cap", PLOT_EFFICIENCY))
    else:
        notes.append("no efficiency plot: no run has both a known cap and tok/s per W")
    return plots
