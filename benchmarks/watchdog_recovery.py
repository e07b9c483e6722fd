# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog on a real server: time from a frozen engine to serving again, and the check's own cost.

Run INSIDE a box converged by site.yml (benchmarks/watchdog_recovery.sh BOX copies this file in and runs it as
root); Python standard library only. A measurement, not a test: nothing is asserted.

Each trial: wait until the server answers a completion and the watchdog watches (state phase `watching`), start
``--streams`` long completions so that work is pending, freeze the engine (SIGSTOP to every `VLLM::EngineCore`
process: what a hung engine looks like from outside), then ask for a one-token completion every second until
one is answered. Prints per trial the seconds from the freeze to the verdict (the state file's last_verdict.at)
and to serving again, the rule and the stalled counters; then the means.

The cost: ``--cost-runs`` runs of the check itself (`vllm_watchdog.py check`, with a copy of the config in a
temporary directory: its own state file, dry run) against the live server; CPU ms per check (user + system of
the child) and the largest max RSS.

``--idle``: freeze the engine while nothing is pending, then send one completion that waits (what an agent's
next request does): the engine's gauges say 0 pending, and the API server's /load says 1.

``--stall-seconds`` sets stall_seconds in the installed config for the trials (read at every check) and puts
the file back at the end; the period is the timer's (set it with -e vllm_service_watchdog_period=5 in the play).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SCRIPT = "/usr/local/lib/gpuhost-inference/vllm_watchdog.py"
CONFIG = "/etc/vllm/watchdog.json"


def http(url, payload=None, timeout=10.0, key=""):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the box's own server
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, ValueError):
        return 0, ""


def model_of(base, key):
    status, body = http(base + "/v1/models", key=key)
    if status != 200:
        return None
    return json.loads(body)["data"][0]["id"]


def serving(base, key, timeout=5.0):
    model = model_of(base, key)
    if model is None:
        return False
    status, _body = http(base + "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 1}, timeout, key)
    return status == 200


def engine_pids():
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as fh:
                if fh.read().startswith(b"VLLM::EngineCore"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def state(cfg):
    try:
        with open(cfg["state_file"], encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def wait_for(cond, timeout, step=1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def load(base, key, model, streams, tokens, stop):
    def one():
        while not stop.is_set():
            http(base + "/v1/completions", {"model": model, "prompt": "count: 1 2 3", "max_tokens": tokens,
                                            "ignore_eos": True}, 600.0, key)
    threads = [threading.Thread(target=one, daemon=True) for _stream in range(streams)]
    for t in threads:
        t.start()
    return threads


def pending(base):
    status, body = http(base + "/metrics")
    if status != 200:
        return 0
    # the collection's one reader of Prometheus text, installed beside the watchdog (main() puts it on sys.path)
    import prometheus_text  # pylint: disable=import-outside-toplevel,import-error
    return int(prometheus_text.total(body, "vllm:num_requests_running") or 0) + int(
        prometheus_text.total(body, "vllm:num_requests_waiting") or 0)


def trial(cfg, key, args):
    base = cfg["base_url"]
    if not wait_for(lambda: serving(base, key) and state(cfg).get("phase") == "watching", args.ready_timeout, 2.0):
        return {"error": "not serving and watched within %s s" % args.ready_timeout}
    model = model_of(base, key)
    before = state(cfg).get("restarts_total", 0)
    stop = threading.Event()
    if args.idle:
        # frozen while idle; then one client asks (and waits, as an agent does) while the engine reports nothing
        wait_for(lambda: pending(base) == 0, 30, 0.2)
    else:
        load(base, key, model, args.streams, args.tokens, stop)
        wait_for(lambda: pending(base) > 0, 30, 0.2)
    pids = engine_pids()
    t_freeze = time.time()
    m0 = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    if args.idle:
        time.sleep(1.0)
        load(base, key, model, 1, 8, stop)
    stop.set()
    ok = wait_for(lambda: serving(base, key, 5.0), args.recover_timeout, 1.0)
    serving_s = time.monotonic() - m0
    st = state(cfg)
    verdict = st.get("last_verdict") or {}
    for pid in pids:  # if the watchdog did nothing, do not leave a frozen engine behind
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    return {"frozen_pids": pids, "idle": bool(args.idle), "served_again": ok,
            "freeze_to_serving_s": round(serving_s, 1),
            "freeze_to_verdict_s": round(verdict["at"] - t_freeze, 1) if verdict.get("at") else None,
            "rule": verdict.get("rule"), "restarts_made": st.get("restarts_total", 0) - before,
            "verdict": verdict}


def cost(cfg, runs):
    tmp = tempfile.mkdtemp(prefix="wd-cost-")
    try:
        conf = dict(cfg, state_file=os.path.join(tmp, "state.json"), dry_run=True)
        path = os.path.join(tmp, "watchdog.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(conf, fh)
        cpu, wall = [], []
        for _run in range(runs):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-I", SCRIPT, "check", "--config", path], check=False,
                           stdout=subprocess.DEVNULL)
            wall.append(time.monotonic() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        return {"runs": runs, "cpu_ms_mean": round(statistics.mean(cpu), 1), "cpu_ms_max": round(max(cpu), 1),
                "wall_ms_mean": round(statistics.mean(wall) * 1000, 1), "max_rss_mib": round(rss_kib / 1024, 1)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--streams", type=int, default=4, help="long completions in flight when the engine is frozen")
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--idle", action="store_true",
                    help="freeze the idle engine, then send one request: the engine reports nothing pending")
    ap.add_argument("--stall-seconds", type=int, default=None)
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--recover-timeout", type=float, default=900)
    ap.add_argument("--cost-runs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with open(CONFIG, encoding="utf-8") as fh:
        original = fh.read()
    cfg = json.loads(original)
    sys.path.insert(0, os.path.dirname(SCRIPT))
    # The canary's key, read as the watchdog reads it (the collection's env-file reader installed beside it).
    from vllm_watchdog import api_key  # pylint: disable=import-outside-toplevel,import-error
    key = api_key(cfg)
    shown = ("period", "stall_seconds", "unserved_seconds", "canary_interval", "canary_timeout", "canary_failures",
             "max_restarts")
    out = {"settings": {k: cfg.get(k) for k in shown}, "trials": []}
    try:
        if args.stall_seconds is not None:
            cfg["stall_seconds"] = args.stall_seconds
            with open(CONFIG, "w", encoding="utf-8") as fh:
                json.dump(cfg, fh, indent=1)
            out["settings"]["stall_seconds"] = args.stall_seconds
        timer = subprocess.run(["systemctl", "show", "-p", "TimersMonotonic", cfg["timer"]], capture_output=True,
                               text=True, check=False).stdout.strip()
        out["settings"]["timer"] = timer
        for i in range(args.trials):
            res = trial(cfg, key, args)
            out["trials"].append(res)
            if not args.json:
                print("trial %d: freeze -> verdict %s s, -> serving again %s s, rule %s, restarts %s" % (
                    i + 1, res.get("freeze_to_verdict_s"), res.get("freeze_to_serving_s"), res.get("rule"),
                    res.get("restarts_made")), flush=True)
        wait_for(lambda: serving(cfg["base_url"], key), args.ready_timeout, 2.0)
        out["cost"] = cost(cfg, args.cost_runs)
    finally:
        with open(CONFIG, "w", encoding="utf-8") as fh:
            fh.write(original)
    done = [t["freeze_to_serving_s"] for t in out["trials"] if t.get("served_again")]
    out["mean_freeze_to_serving_s"] = round(statistics.mean(done), 1) if done else None
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print("settings: %s" % out["settings"])
        print("mean freeze -> serving again: %s s over %d trials" % (out["mean_freeze_to_serving_s"], len(done)))
        print("check cost: %s" % out["cost"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
