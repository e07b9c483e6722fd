# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does max-num-seqs 8 beat 2 at concurrency 4 on the real vLLM, and cost nothing for a lone user?

A benchmark, not a timed test. It starts the real vLLM OpenAI server (``python -m
vllm.entrypoints.openai.api_server`` of --vllm-python) on a free loopback port with the lab
profile (max-model-len 2048, max-num-batched-tokens 8192, a 256 MiB KV cache, enforce-eager),
once with --max-num-seqs 2 and once with 8. Against each it runs the probe's own engine
(plugins/module_utils/vllm_load.py: streaming /v1/completions, temperature 0, 256 tokens,
ignore_eos, tokens counted from ``usage``) at concurrency 4 and at concurrency 1, --rounds
times each (one run_level per round), and prints the aggregate tok/s of every round, their mean,
and the ratio of the means 8/2. The write-up's finding on 2x RTX 3090: +55 % at concurrency 4.
At concurrency 1 both should be about equal ("free for a lone user").

    python3 benchmarks/tuning_effect.py
    python3 benchmarks/tuning_effect.py --rounds 1 --vllm-python /opt/vllm/venv/bin/python --model-dir /models/x

Each server runs with HF_HUB_OFFLINE=1, VLLM_HOST_IP=127.0.0.1 and its VLLM_CACHE_ROOT, TMPDIR and
HF_HOME in a temporary directory (removed at the end, with its log unless --keep-logs), and is
stopped by its PID (SIGTERM, then SIGKILL of its own process group) at the end, on error and on
Ctrl-C (benchmarks/bench_common.py's VllmServer, shared with benchmarks/probe_truth.py).
"""
from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as common  # noqa: E402  pylint: disable=wrong-import-position


def pct(ratio):
    return "%+.1f %%" % (100.0 * (ratio - 1.0))


# ------------------------------------------------------------------ this benchmark

def measure(client, server, args):
    ep = client.http.Endpoint(server.url, timeout=args.request_timeout)
    common.warm_up(client, ep, server.model, args.tokens)
    out = {"max_num_seqs": server.max_num_seqs, "startup_s": round(server.startup_s, 1), "levels": {}}
    for conc in (args.concurrency, 1):
        rounds = []
        for r in range(args.rounds):
            fig, _results = client.load.run_level(ep, server.model, conc, rounds=1, max_tokens=args.tokens,
                                                  prompt_words=64, request_timeout=args.request_timeout)
            if fig["ok"] != fig["requests"]:
                raise RuntimeError("max-num-seqs %d, concurrency %d, round %d: %s %s" % (
                    server.max_num_seqs, conc, r + 1, fig["errors"], fig["error_messages"]))
            rounds.append(fig)
            print("  max-num-seqs %d  concurrency %d  round %d: %7.1f tok/s aggregate, TTFT mean %6.1f ms, "
                  "decode p50 %6.1f tok/s, %d tokens in %.2fs" % (
                      server.max_num_seqs, conc, r + 1, fig["aggregate_tps"], 1000 * fig["ttft_s"]["mean"],
                      fig["decode_tps"]["p50"] or 0.0, fig["output_tokens"], fig["wall_s"]), flush=True)
        tps = [f["aggregate_tps"] for f in rounds]
        out["levels"][conc] = {
            "rounds_tps": tps,
            "mean_tps": statistics.fmean(tps),
            "ttft_mean_s": statistics.fmean(f["ttft_s"]["mean"] for f in rounds),
            "decode_p50_tps": statistics.fmean(f["decode_tps"]["p50"] or 0.0 for f in rounds),
        }
    return out


def main(argv=None):
    parser = common.new_parser(__doc__)
    common.add_server_args(parser)
    common.add_load_args(parser)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency and server (default 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="the loaded concurrency (default 4)")
    parser.add_argument("--low", type=int, default=2, help="max-num-seqs of the first server (default 2)")
    parser.add_argument("--high", type=int, default=8, help="max-num-seqs of the second server (default 8)")
    args = parser.parse_args(argv)
    common.check_server_args(parser, args)
    if args.rounds < 1 or args.tokens < 2 or args.concurrency < 1 or args.low < 1 or args.high < 1:
        parser.error("--rounds, --concurrency, --low and --high must be >= 1 and --tokens >= 2")
    common.sigterm_as_interrupt()
    client = common.load_client()
    print("model %s, vLLM from %s, %d cores, %d round(s) of %d tokens per request" % (
        args.model_dir, args.vllm_python, os.cpu_count() or 1, args.rounds, args.tokens), flush=True)

    results = {}
    try:
        for seqs in (args.low, args.high):
            with common.VllmServer(args.vllm_python, args.model_dir, seqs, args.startup_timeout, args.keep_logs) as server:
                results[seqs] = measure(client, server, args)
    except KeyboardInterrupt:
        print("interrupted: the servers are stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:
        print("ERROR: %s" % exc, file=sys.stderr)
        return 1

    low, high = results[args.low], results[args.high]
    print()
    print("aggregate tok/s (streaming /v1/completions, temperature 0, %d tokens, ignore_eos; the probe's engine)" % (
        args.tokens))
    print("  %-12s %-12s %10s   %s" % ("max-num-seqs", "concurrency", "mean", "rounds"))
    summary = {"rounds": args.rounds, "tokens": args.tokens, "servers": results, "ratios": {}}
    for conc in (args.concurrency, 1):
        for seqs, res in ((args.low, low), (args.high, high)):
            lv = res["levels"][conc]
            print("  %-12d %-12d %10.1f   %s   (TTFT mean %.1f ms)" % (
                seqs, conc, lv["mean_tps"], ", ".join("%.1f" % t for t in lv["rounds_tps"]), 1000 * lv["ttft_mean_s"]))
    print()
    ratio_c = high["levels"][args.concurrency]["mean_tps"] / low["levels"][args.concurrency]["mean_tps"]
    ratio_1 = high["levels"][1]["mean_tps"] / low["levels"][1]["mean_tps"]
    summary["ratios"] = {"concurrency_%d" % args.concurrency: round(ratio_c, 3), "concurrency_1": round(ratio_1, 3)}
    print("ratio max-num-seqs %d / %d at concurrency %d: %.2f (%s; the write-up: +55 %% on 2x RTX 3090)" % (
        args.high, args.low, args.concurrency, ratio_c, pct(ratio_c)))
    lone = "about equal, free for a lone user" if abs(ratio_1 - 1.0) <= 0.10 else "NOT within 10 %"
    print("ratio max-num-seqs %d / %d at concurrency 1: %.2f (%s; %s)" % (
        args.high, args.low, ratio_1, pct(ratio_1), lone))
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
