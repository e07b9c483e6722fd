# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stdlib client for vLLM's router in front of the boxes (docs/router.md), run on a box of the lab.

  python3 router_client.py load  --url URL --key KEY --model M --out FILE [--sessions 4] [--max-tokens 16] [--pause 0.1]
      Streams /v1/completions through URL, one thread per session (each with its own X-Session-ID), one request
      after the other (--pause seconds apart), until SIGTERM or SIGINT; then writes FILE: every request's session, start, end, HTTP status,
      whether the stream ended with [DONE], the error if any. The default scenario's router side effect runs it
      while site.yml rolls a new profile across the boxes, and while a box is stopped.

  python3 router_client.py bench --direct URL --router URL --key KEY --model M [--concurrency 1 8] [--requests 24]
      The router's added latency: TTFT p50/p95 and aggregate tokens/s through the router against one box direct,
      at each concurrency (same prompts, same max_tokens), printed as a table and as JSON (--out FILE).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import threading
import time
import urllib.parse


def stream_completion(base_url, key, model, prompt, max_tokens, session=None, timeout=60):
    """One streaming /v1/completions: {status, ok, ttft_s, total_s, tokens, error}."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}, "temperature": 0})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    if session:
        headers["X-Session-ID"] = session
    out = {"status": 0, "ok": False, "ttft_s": None, "total_s": None, "tokens": 0, "error": None}
    start = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body=body, headers=headers)
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            out["error"] = resp.read(300).decode("utf-8", "replace")
            return out
        done = False
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if event.get("choices") and out["ttft_s"] is None:
                out["ttft_s"] = time.monotonic() - start
            if event.get("usage"):
                out["tokens"] = event["usage"].get("completion_tokens", 0)
        out["ok"] = done
        if not done:
            out["error"] = "the stream ended without [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        out["total_s"] = time.monotonic() - start
        conn.close()
    return out


def cmd_load(args):
    stop = threading.Event()
    records, lock = [], threading.Lock()

    def session_loop(i):
        n = 0
        while not stop.is_set():
            started = time.time()
            result = stream_completion(args.url, args.key, args.model, "session %d turn %d: def f(x):" % (i, n),
                                       args.max_tokens, session="load-%d" % i)
            with lock:
                records.append({"session": "load-%d" % i, "turn": n, "start": started, "end": time.time(),
                                "status": result["status"], "ok": result["ok"], "error": result["error"]})
            n += 1
            stop.wait(args.pause)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_args: stop.set())
    threads = [threading.Thread(target=session_loop, args=(i,), daemon=True) for i in range(args.sessions)]
    for t in threads:
        t.start()
    while not stop.is_set():
        stop.wait(0.5)
    for t in threads:
        t.join(timeout=90)
    with lock:
        done = sorted(records, key=lambda r: r["start"])
    summary = {"requests": len(done), "failed": sum(1 for r in done if not r["ok"]), "records": done}
    with open(args.out + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(summary, fh)
    os.replace(args.out + ".tmp", args.out)
    return 0


def _percentile(values, q):
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run_level(url, key, model, concurrency, requests, max_tokens):
    results, lock = [], threading.Lock()
    todo = list(range(requests))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            r = stream_completion(url, key, model, "bench %d: def g(y):" % i, max_tokens, session="bench-%d" % i)
            with lock:
                results.append(r)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _worker in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ttfts = sorted(r["ttft_s"] for r in results if r["ok"] and r["ttft_s"] is not None)
    return {"concurrency": concurrency, "requests": len(results), "failed": sum(1 for r in results if not r["ok"]),
            "ttft_p50_ms": None if not ttfts else round(1000 * statistics.median(ttfts), 2),
            "ttft_p95_ms": None if not ttfts else round(1000 * _percentile(ttfts, 95), 2),
            "tokens_per_s": round(sum(r["tokens"] for r in results) / wall, 1) if wall > 0 else None}


def cmd_bench(args):
    rows = []
    for c in args.concurrency:
        run_level(args.direct, args.key, args.model, c, max(c, 4), args.max_tokens)  # warm-up, not counted
        direct = run_level(args.direct, args.key, args.model, c, args.requests, args.max_tokens)
        routed = run_level(args.router, args.key, args.model, c, args.requests, args.max_tokens)
        rows.append({"concurrency": c, "direct": direct, "router": routed,
                     "added_ttft_p50_ms": None if None in (direct["ttft_p50_ms"], routed["ttft_p50_ms"])
                     else round(routed["ttft_p50_ms"] - direct["ttft_p50_ms"], 2),
                     "added_ttft_p95_ms": None if None in (direct["ttft_p95_ms"], routed["ttft_p95_ms"])
                     else round(routed["ttft_p95_ms"] - direct["ttft_p95_ms"], 2),
                     "throughput_ratio": None if not direct["tokens_per_s"]
                     else round(routed["tokens_per_s"] / direct["tokens_per_s"], 3)})
    print("| concurrency | TTFT p50 direct / router (ms) | TTFT p95 direct / router (ms) | tok/s direct / router | ratio | failed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        d, x = r["direct"], r["router"]
        print("| %d | %s / %s (+%s) | %s / %s (+%s) | %s / %s | %s | %d / %d |" % (
            r["concurrency"], d["ttft_p50_ms"], x["ttft_p50_ms"], r["added_ttft_p50_ms"], d["ttft_p95_ms"],
            x["ttft_p95_ms"], r["added_ttft_p95_ms"], d["tokens_per_s"], x["tokens_per_s"], r["throughput_ratio"],
            d["failed"], x["failed"]))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["direct"]["failed"] == 0 and r["router"]["failed"] == 0 for r in rows) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    load = sub.add_parser("load")
    load.add_argument("--url", required=True)
    load.add_argument("--key", default="")
    load.add_argument("--model", required=True)
    load.add_argument("--out", required=True)
    load.add_argument("--sessions", type=int, default=4)
    load.add_argument("--max-tokens", type=int, default=16)
    load.add_argument("--pause", type=float, default=0.1, help="seconds between a session's requests")
    bench = sub.add_parser("bench")
    bench.add_argument("--direct", required=True)
    bench.add_argument("--router", required=True)
    bench.add_argument("--key", default="")
    bench.add_argument("--model", required=True)
    bench.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    bench.add_argument("--requests", type=int, default=24)
    bench.add_argument("--max-tokens", type=int, default=32)
    bench.add_argument("--out", default="")
    args = parser.parse_args(argv)
    return cmd_load(args) if args.cmd == "load" else cmd_bench(args)


if __name__ == "__main__":
    sys.exit(main())
