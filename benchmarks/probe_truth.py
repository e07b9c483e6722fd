# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do the probe's figures agree with vLLM's own /metrics for the same requests?

A benchmark, not a timed test. It starts one real vLLM OpenAI server (the lab profile with
--max-num-seqs 8, benchmarks/bench_common.py's VllmServer), sends one warm-up request, then for each
probe level (default 1, 2, 4 streams, 256 tokens, the probe's own engine
plugins/module_utils/vllm_load.py) scrapes /metrics before and after and compares, for exactly
the requests of that level:

- mean TTFT (probe: first text chunk received - request start) with the delta of
  vllm:time_to_first_token_seconds_sum / _count;
- output tokens (probe: ``usage`` of each stream) with the delta of vllm:generation_tokens_total;
- mean end-to-end latency (probe: request start - end of the stream) with the delta of
  vllm:e2e_request_latency_seconds_sum / _count.

It prints each pair and the relative difference (probe - vLLM) / vLLM per level and for the whole
run, and PASS / MISS per figure of the whole run against the goal (within 5 %, --tolerance).

vLLM's clock is narrower than the client's: its TTFT and e2e start at the request's arrival in the
engine's input processor (after the HTTP request is read, parsed and tokenized) and its TTFT ends when
the output processor takes the first token (before it is detokenized, wrapped as an SSE event and
sent); the probe measures from before it connects to when it has the bytes. That difference is a
roughly constant few milliseconds per request, so it is a noticeable fraction of a TTFT of ~50 ms on
this CPU model and a small one of an e2e of seconds. The script prints it in ms as well.

    python3 benchmarks/probe_truth.py
    python3 benchmarks/probe_truth.py --levels 1 2 4 8 --vllm-python /opt/vllm/venv/bin/python --model-dir /models/x
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as common  # noqa: E402  pylint: disable=wrong-import-position


def settled_scrape(ep, before, requests, wait_s=10.0):
    """Scrape until vLLM has recorded all ``requests`` (its e2e count moved by that much), or wait_s."""
    end = time.perf_counter() + wait_s
    while True:
        after = common.scrape(ep)
        done = after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"]
        if done >= requests or time.perf_counter() > end:
            return after
        time.sleep(0.2)


def delta(before, after, name):
    return after[name] - before[name]


def vllm_figures(before, after):
    ttft_n = delta(before, after, "vllm:time_to_first_token_seconds_count")
    e2e_n = delta(before, after, "vllm:e2e_request_latency_seconds_count")
    return {
        "requests_ttft": int(round(ttft_n)),
        "requests_e2e": int(round(e2e_n)),
        "ttft_mean_s": delta(before, after, "vllm:time_to_first_token_seconds_sum") / ttft_n if ttft_n else None,
        "output_tokens": int(round(delta(before, after, "vllm:generation_tokens_total"))),
        "e2e_mean_s": delta(before, after, "vllm:e2e_request_latency_seconds_sum") / e2e_n if e2e_n else None,
    }


def probe_figures(results):
    ok = [r for r in results if r.ok]
    return {
        "requests": len(results),
        "ok": len(ok),
        "ttft_mean_s": statistics.fmean(r.ttft_s for r in ok) if ok else None,
        "output_tokens": sum(r.output_tokens or 0 for r in ok),
        "e2e_mean_s": statistics.fmean(r.e2e_s for r in ok) if ok else None,
        "usage_missing": sum(1 for r in ok if not r.usage_seen),
        "burst": sum(1 for r in ok if is_burst(r)),
    }


def is_burst(res):
    """The whole stream reached the client in one burst at its end (first text within 5 % of the end)."""
    if res.t_first is None or res.t_end is None or (res.output_tokens or 0) < 2:
        return False
    return res.t_end - res.t_first < 0.05 * (res.t_end - res.t_start)


def rel(probe, truth):
    if probe is None or truth is None or truth == 0:
        return None
    return (probe - truth) / truth


def compare(probe, truth):
    """[(figure, probe value, vLLM value, relative difference, absolute difference)]."""
    rows = []
    for key, label in (("ttft_mean_s", "mean TTFT"), ("output_tokens", "output tokens"), ("e2e_mean_s", "mean e2e")):
        p, t = probe[key], truth[key]
        rows.append((label, p, t, rel(p, t), None if p is None or t is None else p - t))
    return rows


def fmt(label, value):
    if value is None:
        return "n/a"
    if label == "output tokens":
        return "%d" % value
    return "%.2f ms" % (1000 * value)


def print_rows(rows, tolerance=None):
    for label, p, t, r, d in rows:
        line = "    %-14s probe %12s   vLLM %12s   diff %s" % (
            label, fmt(label, p), fmt(label, t), "n/a" if r is None else "%+.2f %%" % (100 * r))
        if d is not None and label != "output tokens":
            line += " (%+.2f ms)" % (1000 * d)
        if tolerance is not None:
            line += "   %s" % ("PASS" if r is not None and abs(r) <= tolerance else "MISS")
        print(line)


def main(argv=None):
    parser = common.new_parser(__doc__)
    common.add_server_args(parser)
    common.add_load_args(parser)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4], help="concurrency levels (default 1 2 4)")
    parser.add_argument("--rounds", type=int, default=1, help="requests per stream and level (default 1)")
    parser.add_argument("--max-num-seqs", type=int, default=8, help="the server's --max-num-seqs (default 8)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="the goal, relative (default 0.05)")
    args = parser.parse_args(argv)
    common.check_server_args(parser, args)
    if any(c < 1 for c in args.levels) or args.rounds < 1 or args.tokens < 2 or args.max_num_seqs < 1:
        parser.error("--levels, --rounds and --max-num-seqs must be >= 1 and --tokens >= 2")
    common.sigterm_as_interrupt()
    client = common.load_client()
    print("model %s, vLLM from %s, %d cores, levels %s x %d round(s), %d tokens per request" % (
        args.model_dir, args.vllm_python, os.cpu_count() or 1, args.levels, args.rounds, args.tokens), flush=True)

    levels = []
    try:
        with common.VllmServer(args.vllm_python, args.model_dir, args.max_num_seqs, args.startup_timeout,
                               args.keep_logs) as server:
            ep = client.http.Endpoint(server.url, timeout=args.request_timeout)
            common.warm_up(client, ep, server.model, args.tokens)
            first = before = common.scrape(ep)
            all_results = []
            for conc in args.levels:
                fig, results = client.load.run_level(ep, server.model, conc, rounds=args.rounds,
                                                     max_tokens=args.tokens, prompt_words=64,
                                                     request_timeout=args.request_timeout)
                after = settled_scrape(ep, before, len(results))
                if fig["ok"] != fig["requests"]:
                    raise RuntimeError("level %d: %s %s" % (conc, fig["errors"], fig["error_messages"]))
                levels.append({"concurrency": conc, "probe": probe_figures(results),
                               "vllm": vllm_figures(before, after), "aggregate_tps": fig["aggregate_tps"]})
                all_results.extend(results)
                before = after
            total = {"probe": probe_figures(all_results), "vllm": vllm_figures(first, before)}
    except KeyboardInterrupt:
        print("interrupted: the server is stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError, client.http.ClientError) as exc:
        print("ERROR: %s" % getattr(exc, "msg", exc), file=sys.stderr)
        return 1

    print()
    print("probe (client side) vs vLLM /metrics, the same requests; diff = (probe - vLLM) / vLLM")
    for lv in levels:
        print("  concurrency %d: %d requests (vLLM counted %d TTFT, %d e2e), %.1f tok/s aggregate" % (
            lv["concurrency"], lv["probe"]["requests"], lv["vllm"]["requests_ttft"], lv["vllm"]["requests_e2e"],
            lv["aggregate_tps"]))
        print_rows(compare(lv["probe"], lv["vllm"]))
    print("  all levels: %d requests (vLLM counted %d TTFT, %d e2e); goal within %.0f %%" % (
        total["probe"]["requests"], total["vllm"]["requests_ttft"], total["vllm"]["requests_e2e"],
        100 * args.tolerance))
    rows = compare(total["probe"], total["vllm"])
    print_rows(rows, args.tolerance)
    if total["probe"]["usage_missing"]:
        print("  note: %d streams sent no usage; their tokens were counted from chunks" % (
            total["probe"]["usage_missing"]))
    if total["probe"]["burst"]:
        print("  note: %d of %d streams reached the client in one burst at their end (first text within 5 %% of the "
              "end): their probe TTFT is about their e2e while vLLM records its first token early; such a stall "
              "alone moves the mean TTFT far past 5 %%" % (total["probe"]["burst"], total["probe"]["ok"]))
    if total["vllm"]["requests_e2e"] != total["probe"]["requests"]:
        print("  note: vLLM counted %d requests for the probe's %d (another client on the server?)" % (
            total["vllm"]["requests_e2e"], total["probe"]["requests"]))
    misses = [label for label, _p, _t, r, _d in rows if r is None or abs(r) > args.tolerance]
    if misses:
        print("MISS: %s outside %.0f %%" % (", ".join(misses), 100 * args.tolerance))
        timed = [label for label, _p, _t, r, _d in rows if label in misses and r is not None and r > 0
                 and label != "output tokens"]
        if timed:
            print("  %s: the probe's clock also holds the HTTP round trip, the request's parsing and tokenization "
                  "before vLLM's arrival time, and (TTFT) the first event's detokenize/send after vLLM's "
                  "first-token time: a near-constant few ms per request, see the ms differences" % ", ".join(timed))
    else:
        print("PASS: every figure within %.0f %%" % (100 * args.tolerance))
    if args.json:
        print(json.dumps({"levels": levels, "total": total,
                          "rows": [dict(zip(("figure", "probe", "vllm", "rel", "abs"), r, strict=True)) for r in rows]},
                         indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
