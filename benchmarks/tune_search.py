# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many starts does tune.yml's search save against a full grid, and what does it give up?

A benchmark of the search alone, not of vLLM: tune.yml's own decisions (plugins/filter/tune.py:
tune_next, tune_trial, tune_choice) walk --surfaces seeded response surfaces of a
max_num_seqs x max_num_batched_tokens x power cap space (6 x 4 x 5 = 120 configurations by default).
Each surface is a model of a decode-bound server: throughput rises with max_num_seqs up to a knee and
with the cap up to a saturation point, TTFT p95 grows with max_num_seqs and the batched tokens, and
tok/s per W falls past the cap's sweet spot; a TTFT limit cuts off part of the space. The figures:
trials of the search against the grid's size (a trial is one server start on a real box), and the
search's chosen objective against the grid's best feasible one (1.00 = the same). The goal: at most
half the grid's trials, and the grid's best (ratio >= 0.95) on most surfaces.

    python3 benchmarks/tune_search.py
    python3 benchmarks/tune_search.py --surfaces 500 --objective tps_per_w --seconds-per-start 90
"""
from __future__ import annotations

import importlib
import itertools
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as common  # noqa: E402  pylint: disable=wrong-import-position

SPACE = {"max_num_seqs": [1, 2, 4, 8, 16, 32], "max_num_batched_tokens": [2048, 4096, 8192, 16384],
         "power_limit_w": [150, 200, 250, 300, 350]}


def surface(rng):
    """A seeded response surface: config -> a report shaped like vllm_verify's (levels, startup_report).

    The dimensions interact: larger batches help only once max_num_seqs is past the knee, the cap
    where throughput saturates rises with the load, and TTFT grows with both max_num_seqs and the
    batch and shrinks with the cap."""
    knee = rng.choice([2, 4, 8, 16])
    single = rng.uniform(20, 60)
    cap_base = rng.uniform(150, 300)
    ttft_base = rng.uniform(0.05, 0.4)
    ttft_slope = rng.uniform(0.02, 0.2)
    batch_gain = rng.uniform(0.0, 0.25)

    def report(config, concurrency):
        seqs = min(config["max_num_seqs"], concurrency)
        batch_steps = (config["max_num_batched_tokens"] // 2048).bit_length() - 1
        cap_sat = cap_base + 6 * seqs
        scale = min(1.0, (config["power_limit_w"] / cap_sat) ** 0.6)
        tps = single * seqs / (1 + max(0, seqs - knee) * 0.15) * (1 + batch_gain * batch_steps * (seqs >= knee)) * scale
        watts = min(config["power_limit_w"], cap_sat * 1.05) * 0.9
        ttft = (ttft_base * (1 + ttft_slope * config["max_num_seqs"]) * (1 + 0.25 * batch_steps) / scale
                * rng.uniform(0.9, 1.1))
        return {"levels": [{"concurrency": concurrency, "aggregate_tps": tps, "tps_per_w": tps / watts,
                            "errors": {}, "ttft_s": {"p95": ttft}}],
                "errors_total": 0, "startup_report": {"full_context_concurrency": 2.0}}
    return report


def run(tune, report, objective, concurrency, constraints):
    """(search trials, grid trials, search choice, grid choice)."""
    def trial(config):
        return tune.tune_trial(report(config, concurrency), config, target_concurrency=concurrency,
                               constraints=constraints, objective=objective)
    trials = []
    while True:
        config = tune.tune_next(SPACE, trials, objective=objective)
        if config is None:
            break
        trials.append(trial(config))
    grid = [trial(dict(zip(SPACE, values))) for values in itertools.product(*SPACE.values())]
    return trials, grid, tune.tune_choice(trials), tune.tune_choice(grid)


def main():
    parser = common.new_parser(__doc__)
    parser.add_argument("--surfaces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--objective", choices=["tps", "tps_per_w"], default="tps")
    parser.add_argument("--concurrency", type=int, default=8, help="the target concurrency (default 8)")
    parser.add_argument("--ttft-p95-s", type=float, default=1.0, help="the TTFT p95 limit (default 1.0 s)")
    parser.add_argument("--seconds-per-start", type=float, default=90.0,
                        help="what one trial costs on a real box, for the time figures (default 90 s: the CPU build here)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    common.use_collection()
    tune = importlib.import_module("ansible_collections.gpuhost.inference.plugins.filter.tune")
    constraints = {"ttft_p95_s": args.ttft_p95_s, "min_full_context_concurrency": 1, "zero_errors": True}
    rng = random.Random(args.seed)
    counts, ratios, feasible_share, both_none, only_grid = [], [], [], 0, 0
    grid_size = 0
    for _surface_index in range(args.surfaces):
        trials, grid, mine, best = run(tune, surface(rng), args.objective, args.concurrency, constraints)
        grid_size = len(grid)
        counts.append(len(trials))
        feasible_share.append(sum(t["feasible"] for t in grid) / len(grid))
        if not best["ok"]:
            both_none += not mine["ok"]
            continue
        if not mine["ok"]:
            only_grid += 1
            continue
        ratios.append(mine["chosen"]["objective"] / best["chosen"]["objective"])
    figures = {
        "surfaces": args.surfaces, "objective": args.objective, "grid_trials": grid_size,
        "grid_feasible_share_mean": round(statistics.fmean(feasible_share), 3),
        "search_trials_mean": round(statistics.fmean(counts), 2), "search_trials_max": max(counts),
        "trials_ratio": round(statistics.fmean(counts) / grid_size, 3),
        "hours_grid": round(grid_size * args.seconds_per_start / 3600, 2),
        "hours_search_mean": round(statistics.fmean(counts) * args.seconds_per_start / 3600, 2),
        "objective_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "objective_ratio_p10": round(statistics.quantiles(ratios, n=10)[0], 3) if len(ratios) > 1 else None,
        "share_within_5pct": round(sum(r >= 0.95 for r in ratios) / len(ratios), 3) if ratios else None,
        "no_feasible_point_both": both_none, "feasible_only_in_grid": only_grid,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print("tune.yml's search vs the full grid on %d seeded surfaces (objective %s at concurrency %d, TTFT p95 <= %s s)"
          % (args.surfaces, args.objective, args.concurrency, args.ttft_p95_s))
    print("  grid: %d trials (%.2f h at %.0f s a start); %.0f %% of them meet the constraints on average"
          % (grid_size, figures["hours_grid"], args.seconds_per_start, 100 * figures["grid_feasible_share_mean"]))
    print("  search: %.2f trials on average, %d at most (%.2f h); trials ratio %.3f (goal <= 0.5)"
          % (figures["search_trials_mean"], figures["search_trials_max"], figures["hours_search_mean"], figures["trials_ratio"]))
    print("  chosen objective / grid's best feasible: median %s, p10 %s; within 5 %% on %s of the surfaces"
          % (figures["objective_ratio_median"], figures["objective_ratio_p10"], figures["share_within_5pct"]))
    print("  no feasible point in the grid either: %d; feasible only in the grid (the search missed it): %d"
          % (both_none, only_grid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
