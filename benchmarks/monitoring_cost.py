# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the monitoring costs a GPU box (issue 31.7), printed as figures.

    benchmarks/monitoring_cost.py collector [--nvidia-smi PATH] [--runs 20] [--interval 15] [--out DIR]
        The GPU textfile collector of roles/node_metrics, unchanged (its file, with nvidia_smi.py and
        gpuhost_textfile.py of plugins/module_utils beside it, as the role installs them), run N times
        against the nvidia-smi found: CPU seconds per run (user+sys of the run and its nvidia-smi), wall
        per run, and the share of one core at the timer's interval (goal < 1 %). --out keeps the last
        run's text (a capture for tests/fixtures/).
    benchmarks/monitoring_cost.py ttft --base-url URL --model NAME [--requests 40] [--scrape-url URL ...]
        TTFT of short streamed completions, one after the other, with nothing scraping and then with
        every --scrape-url fetched every --scrape-interval seconds (5) the whole time: p50/p95 of each
        and their difference (goal: no measurable change).
    benchmarks/monitoring_cost.py series --url URL [--url URL ...]
        Series per scrape of each /metrics URL and their sum (what one box costs Prometheus).
Nothing here changes a setting of the GPU or of a service.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COLLECTOR_FILES = (
    os.path.join(ROOT, "roles", "node_metrics", "files", "gpuhost_gpu_metrics.py"),
    os.path.join(ROOT, "plugins", "module_utils", "nvidia_smi.py"),
    os.path.join(ROOT, "plugins", "module_utils", "gpuhost_textfile.py"),
)


def _quantile(values, q):
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    return statistics.quantiles(data, n=100, method="inclusive")[int(q * 100) - 1]


def cmd_collector(args):
    smi = args.nvidia_smi or shutil.which("nvidia-smi")
    if not smi:
        print("no nvidia-smi found (give --nvidia-smi)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="gpuhost-collector-")
    try:
        for path in COLLECTOR_FILES:
            shutil.copy(path, work)
        config = os.path.join(work, "config.json")
        with open(config, "w", encoding="utf-8") as handle:
            json.dump({"nvidia_smi_path": smi, "limit_w": None, "gpus": [], "gpu_limits_w": {}, "power_unit": ""}, handle)
        argv = [sys.executable, "-I", os.path.join(work, "gpuhost_gpu_metrics.py"), "collect", "--config", config, "--stdout"]
        walls, text = [], ""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _run in range(args.runs):
            started = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            walls.append(time.monotonic() - started)
            if proc.returncode != 0:
                print("collector failed (rc %s): %s" % (proc.returncode, proc.stderr.strip()), file=sys.stderr)
                return 1
            text = proc.stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / args.runs
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    result = {
        "nvidia_smi": smi, "runs": args.runs, "cpu_s_per_run": round(cpu, 4),
        "wall_s_p50": round(_quantile(walls, 0.5), 4), "wall_s_max": round(max(walls), 4),
        "interval_s": args.interval, "core_share_percent": round(100.0 * cpu / args.interval, 3),
        "samples_per_file": len(samples), "goal": "core_share_percent < 1",
    }
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpuhost_gpu.prom"), "w", encoding="utf-8") as handle:
            handle.write(text)
    _print(result, args.json)
    return 0


def _ttft(base_url, model, prompt, timeout=120):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 8, "stream": True, "temperature": 0}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        for raw in resp:
            if raw.startswith(b"data: ") and b"[DONE]" not in raw:
                first = time.monotonic() - started
                resp.read()
                return first
    return None


def _series(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode("utf-8", "replace")
    return sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))


def cmd_ttft(args):
    def run(label):
        values = []
        for i in range(args.requests):
            value = _ttft(args.base_url, args.model, "%s request %d: count slowly to twenty." % (label, i))
            if value is not None:
                values.append(value)
        return values

    quiet = run("quiet")
    stop = threading.Event()
    scrapes = []

    def scraper():
        while not stop.is_set():
            for url in args.scrape_url:
                try:
                    scrapes.append(_series(url))
                except OSError:
                    scrapes.append(-1)
            stop.wait(args.scrape_interval)

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    scraped = run("scraped")
    stop.set()
    thread.join()
    result = {
        "requests": args.requests, "scrape_interval_s": args.scrape_interval, "scrapes": len(scrapes),
        "failed_scrapes": sum(1 for s in scrapes if s < 0),
        "ttft_ms_p50_none": round(1000 * _quantile(quiet, 0.5), 2), "ttft_ms_p95_none": round(1000 * _quantile(quiet, 0.95), 2),
        "ttft_ms_p50_scraped": round(1000 * _quantile(scraped, 0.5), 2),
        "ttft_ms_p95_scraped": round(1000 * _quantile(scraped, 0.95), 2),
    }
    result["p50_difference_ms"] = round(result["ttft_ms_p50_scraped"] - result["ttft_ms_p50_none"], 2)
    _print(result, args.json)
    return 0


def cmd_series(args):
    result = {url: _series(url) for url in args.url}
    result["total"] = sum(result.values())
    _print(result, args.json)
    return 0


def _print(result, as_json):
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for key, value in result.items():
            print("%-28s %s" % (key, value))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    col = sub.add_parser("collector")
    col.add_argument("--nvidia-smi")
    col.add_argument("--runs", type=int, default=20)
    col.add_argument("--interval", type=float, default=15.0)
    col.add_argument("--out")
    ttft = sub.add_parser("ttft")
    ttft.add_argument("--base-url", required=True)
    ttft.add_argument("--model", required=True)
    ttft.add_argument("--requests", type=int, default=40)
    ttft.add_argument("--scrape-url", action="append", default=[])
    ttft.add_argument("--scrape-interval", type=float, default=5.0)
    ser = sub.add_parser("series")
    ser.add_argument("--url", action="append", required=True)
    args = parser.parse_args(argv)
    return {"collector": cmd_collector, "ttft": cmd_ttft, "series": cmd_series}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
