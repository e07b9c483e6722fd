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

This file is the command line only; the work is done by its sibling modules, imported from the
directory this file is in (whatever the current directory):

  sweep_data.py     the manifest and the runs' reports -> rows (figures, roofline, power source)
  sweep_render.py   rows -> sweep.md and sweep_summary.json
  sweep_plot.py     rows -> the two PNG plots (matplotlib)
  report_common.py  number formatting, Markdown escaping, JSON reading, the matplotlib setup
                    (shared with tune_report.py)
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import sweep_data  # noqa: E402  # pylint: disable=wrong-import-position
import sweep_plot  # noqa: E402  # pylint: disable=wrong-import-position
import sweep_render  # noqa: E402  # pylint: disable=wrong-import-position


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--manifest", required=True, help="the sweep manifest JSON written by playbooks/sweep.yml")
    parser.add_argument("--out-dir", help="where to write the report (default: the manifest's directory)")
    parser.add_argument("--no-plots", action="store_true", help="write the tables only")
    args = parser.parse_args(argv)
    try:
        manifest = sweep_data.load_manifest(args.manifest)
    except sweep_data.ManifestError as exc:
        sys.stderr.write("sweep_report: {}\n".format(exc))
        return 2
    base = os.path.dirname(os.path.abspath(args.manifest))
    out_dir = args.out_dir or base
    os.makedirs(out_dir, exist_ok=True)
    meta, rows, notes = sweep_data.build(manifest, base)
    if not rows:
        notes.append("the sweep recorded no run")

    if args.no_plots:
        plots = []
        notes.append("plots not drawn (--no-plots)")
    else:
        plots = sweep_plot.draw(meta, rows, out_dir, notes)

    text = sweep_render.write(out_dir, meta, rows, notes, plots)
    sys.stdout.write(text + "\n")
    for note in notes:
        sys.stdout.write("NOTE: " + note + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
