# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog on a real server: freeze -> hung -> verdict -> serving again for the four ways a user meets a hung
engine, the false alarms it must not raise, the slowest healthy canary under load, and the check's own cost.

Run INSIDE a box converged by site.yml (benchmarks/watchdog_recovery.sh BOX copies this file and
tests/integration/lab_checks.py in and runs it as root); Python standard library only (the collection's Prometheus
text reader and the watchdog are imported from where vllm_service installed them). A measurement, not a test: nothing
is asserted; it prints the figures.

Freeze patterns (``--patterns``, each ``--trials`` times; the engine is frozen with SIGSTOP to every
`VLLM::EngineCore` process, what a hung engine looks like from outside):

retrying   an agent with a request timeout: the engine is frozen while idle, then a client sends a short completion
           with a 10 s timeout, 2 s apart, until one is answered (issue 32's pattern a).
long       one request with a long timeout (600 s) is running when the engine is frozen (b).
idle       the engine is frozen while idle, then one request that waits (600 s) (c).
reader     a stream whose reader stops reading: a long streamed completion is read for a moment, then left unread on
           an open connection, and the engine is frozen (d).

Serving again: a completion answered. For ``retrying`` that is the client's own next answer; the other patterns
send nothing more until the watchdog restarted the unit (its InvocationID changed), so that the measurement adds
no client of its own, then ask once a second. Per trial: seconds from the freeze to the first check that saw it
hung (the state file's hung_since), to the verdict, to serving again, and the restart's own cost (verdict -> serving).

False alarms (``--false-alarms``, each ``--load-seconds`` long, zero restarts expected): ``prefill`` (prompts at the
profile's largest context, max_num_seqs of them at once), ``slow-reader`` (streams read one chunk every 2 s),
``disconnect`` (streams dropped after 1 s, over and over), ``top`` (twice max_num_seqs long completions at once).
During each, the watchdog's own canary is sent every 2 s: the slowest healthy canary is printed (the canary timeout
is chosen from it).

The cost: ``--cost-runs`` runs of the check itself (`vllm_watchdog.py check`, with a copy of the config in a
temporary directory: its own state file, dry run, no textfile) against the live server; CPU ms per check and the
largest max RSS.

``--set KEY=VALUE`` changes the installed config for the run (read at every check) and puts the file back at the
end; the period is the timer's (set it with -e vllm_service_watchdog_period=N in the play). The forced tool call
canary (rule structured) due at every idle check during the false alarms: ``--set tool_canary_interval=10 --set
tool_canary_retry=10 --set tool_canary_failures=1``.
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
from http.client import HTTPConnection, HTTPException
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# The lab checks' wait(): in the box it lies beside this file (watchdog_recovery.sh copies it), in the checkout under
# tests/integration.
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "integration")]
from lab_checks import wait  # noqa: E402  pylint: disable=wrong-import-position

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


def load(base, key, model, streams, tokens, stop, prompt="count: 1 2 3", timeout=600.0, unique=False):
    """``streams`` clients sending completions until stop; ``unique``: each prompt starts with a number of its own, so
    that the prefix cache serves none of it (a real prefill every time)."""
    def one():
        while not stop.is_set():
            text = ("%.6f " % time.time() + prompt) if unique else prompt
            http(base + "/v1/completions", {"model": model, "prompt": text, "max_tokens": tokens,
                                            "ignore_eos": True}, timeout, key)
    threads = [threading.Thread(target=one, daemon=True) for _stream in range(streams)]
    for t in threads:
        t.start()
    return threads


def open_stream(base, key, model, tokens):
    """A streamed completion on its own connection -> (connection, response), its first bytes read."""
    parts = urllib.parse.urlsplit(base)
    conn = HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    conn.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": "count: 1 2 3", "max_tokens": tokens,
                                                        "ignore_eos": True, "stream": True}), headers)
    resp = conn.getresponse()
    resp.read1(256)
    return conn, resp


def streams(base, key, model, n, tokens, stop, mode):
    """n streaming clients until stop: ``slow`` reads one chunk every 2 s, ``drop`` closes after 1 s."""
    def one():
        while not stop.is_set():
            try:
                conn, resp = open_stream(base, key, model, tokens)
                end = time.monotonic() + (1.0 if mode == "drop" else 600.0)
                while not stop.is_set() and time.monotonic() < end:
                    if not resp.read1(64):
                        break
                    if mode == "slow":
                        time.sleep(2.0)
                conn.close()
            except (OSError, HTTPException):
                time.sleep(1.0)
    threads = [threading.Thread(target=one, daemon=True) for _i in range(n)]
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


def invocation(unit):
    return subprocess.run(["systemctl", "show", "-p", "InvocationID", "--value", unit], capture_output=True, text=True,
                          check=False).stdout.strip()


def trial(cfg, key, args, pattern):
    base = cfg["base_url"]
    if not wait(lambda: serving(base, key) and state(cfg).get("phase") == "watching", args.ready_timeout, 2.0):
        return {"pattern": pattern, "error": "not serving and watched within %s s" % args.ready_timeout}
    model = model_of(base, key)
    before = state(cfg).get("restarts_total", 0)
    inv0 = invocation(cfg["unit"])
    stop = threading.Event()
    held = []
    if pattern == "long":
        load(base, key, model, 1, args.tokens, stop)
        wait(lambda: pending(base) > 0, 30, 0.2)
    elif pattern == "reader":
        held.append(open_stream(base, key, model, args.tokens))
        time.sleep(1.0)
    else:
        wait(lambda: pending(base) == 0, 30, 0.2)
    pids = engine_pids()
    t_freeze = time.time()
    m0 = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    answered = threading.Event()
    if pattern == "idle":
        time.sleep(1.0)
        load(base, key, model, 1, 8, stop)
    elif pattern == "retrying":
        def retry():
            while not stop.is_set():
                if serving(base, key, 10.0):
                    answered.set()
                    return
                time.sleep(2.0)
        threading.Thread(target=retry, daemon=True).start()
    hung_at = []

    def watch():
        st = state(cfg)
        if st.get("hung") and not hung_at:
            hung_at.append(time.time())
        if pattern == "retrying":
            return answered.is_set()
        return invocation(cfg["unit"]) not in (inv0, "") and serving(base, key, 5.0)
    ok = wait(watch, args.recover_timeout, 1.0)
    serving_s = time.monotonic() - m0
    stop.set()
    for conn, _resp in held:
        conn.close()
    st = state(cfg)
    verdict = st.get("last_verdict") or {}
    for pid in pids:  # if the watchdog did nothing, do not leave a frozen engine behind
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    to_verdict = round(verdict["at"] - t_freeze, 1) if verdict.get("at") and verdict["at"] > t_freeze else None
    return {"pattern": pattern, "frozen_pids": pids, "served_again": ok,
            "freeze_to_hung_s": round(hung_at[0] - t_freeze, 1) if hung_at else None,
            "freeze_to_verdict_s": to_verdict,
            "freeze_to_serving_s": round(serving_s, 1),
            "restart_cost_s": round(serving_s - to_verdict, 1) if to_verdict is not None else None,
            "rule": verdict.get("rule"), "restarts_made": st.get("restarts_total", 0) - before,
            "verdict": verdict}


def fit_prompt(base, key, model, limit):
    """A prompt of as many tokens as fit in ``limit`` (the server's /tokenize counts them) -> (text, count)."""
    n = limit
    while n > 16:
        words = " ".join("w%d" % i for i in range(n))
        status, body = http(base + "/tokenize", {"model": model, "prompt": words}, 60.0, key)
        count = json.loads(body).get("count") if status == 200 else None
        if count is not None and count <= limit:
            return words, count
        n = int(n * limit / count) - 2 if count else n // 2
    raise RuntimeError("no prompt fits in %d tokens" % limit)


def false_alarm(cfg, key, args, kind, wd):
    """One load that must not be judged hung -> {kind, restarts_made, hung_seen, canaries, alive}: ``canaries`` the
    watchdog's canary waited for its own answer, ``alive`` as the watchdog sends it (its wait ends when the engine's
    counters move), alternately, every 2 s."""
    base = cfg["base_url"]
    wait(lambda: serving(base, key) and state(cfg).get("phase") == "watching", args.ready_timeout, 2.0)
    model = model_of(base, key)
    before = state(cfg).get("restarts_total", 0)
    stop = threading.Event()
    out_extra = {}
    seqs, ctx = args.max_num_seqs, args.max_model_len
    if kind == "prefill":
        words, count = fit_prompt(base, key, model, ctx - 32)   # room for the unique number and 8 tokens out
        out_extra["prompt_tokens"] = count
        load(base, key, model, seqs, 8, stop, prompt=words, unique=True)
    elif kind == "slow-reader":
        streams(base, key, model, seqs, args.tokens, stop, "slow")
    elif kind == "disconnect":
        streams(base, key, model, seqs, args.tokens, stop, "drop")
    else:
        load(base, key, model, 2 * seqs, args.tokens, stop)
    reader = wd.load_metrics_reader()
    got_by = {"answer": ([], []), "alive": ([], [])}
    hung_seen = False
    end = time.monotonic() + args.load_seconds
    turn = 0
    while time.monotonic() < end:
        turn += 1
        if turn % 2:
            kind_of, got = "answer", wd.canary(base, key, 120.0)
        else:
            status, body = http(base + "/metrics")
            counters = wd.observe(body, reader)["counters"] if status == 200 else None
            kind_of, got = "alive", wd.canary(base, key, 120.0,
                                              lambda c=counters: wd.engine_moved(base, 10.0, reader, c))
        times, failed = got_by[kind_of]
        (times if got["ok"] else failed).append(got["seconds"] if got["ok"] else got["error"])
        hung_seen = hung_seen or bool(state(cfg).get("hung"))
        time.sleep(2.0)
    stop.set()
    time.sleep(2.0)
    st = state(cfg)

    def figures(pair):
        times, failed = pair
        return {"n": len(times), "max_s": max(times) if times else None,
                "mean_s": round(statistics.mean(times), 3) if times else None, "failed": failed[:3]}
    return {"kind": kind, "seconds": args.load_seconds, "restarts_made": st.get("restarts_total", 0) - before,
            "hung_seen": hung_seen, "canaries": figures(got_by["answer"]), "alive": figures(got_by["alive"]),
            **out_extra}


def cost(cfg, runs):
    tmp = tempfile.mkdtemp(prefix="wd-cost-")
    try:
        conf = dict(cfg, state_file=os.path.join(tmp, "state.json"), dry_run=True, textfile_dir="")
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
    ap.add_argument("--patterns", default="retrying,long,idle,reader",
                    help="freeze patterns, comma-separated (retrying, long, idle, reader; '' for none)")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--false-alarms", default="", help="prefill, slow-reader, disconnect, top (comma-separated)")
    ap.add_argument("--load-seconds", type=float, default=90.0)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a watchdog setting for the run")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--recover-timeout", type=float, default=900)
    ap.add_argument("--cost-runs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with open(CONFIG, encoding="utf-8") as fh:
        original = fh.read()
    cfg = json.loads(original)
    sys.path.insert(0, os.path.dirname(SCRIPT))
    # The canary's key, read as the watchdog reads it (the collection's env-file reader installed beside it), and
    # the watchdog's own canary.
    import vllm_watchdog as wd  # pylint: disable=import-outside-toplevel,import-error
    key = wd.api_key(cfg)
    shown = ("period", "stall_seconds", "unserved_seconds", "canary_interval", "canary_timeout", "canary_failures",
             "max_restarts", "tool_canary_interval", "tool_canary_retry", "tool_canary_failures")
    out = {"settings": {k: cfg.get(k) for k in shown}, "trials": [], "false_alarms": []}
    try:
        for item in args.set:
            name, _sep, value = item.partition("=")
            cfg[name] = json.loads(value)
            out["settings"][name] = cfg[name]
        if args.set:
            with open(CONFIG, "w", encoding="utf-8") as fh:
                json.dump(cfg, fh, indent=1)
        timer = subprocess.run(["systemctl", "show", "-p", "TimersMonotonic", cfg["timer"]], capture_output=True,
                               text=True, check=False).stdout.strip()
        out["settings"]["timer"] = timer
        for kind in [k for k in args.false_alarms.split(",") if k]:
            res = false_alarm(cfg, key, args, kind, wd)
            out["false_alarms"].append(res)
            if not args.json:
                print("false alarm %s: %s s, restarts %s, hung seen %s, canaries answered %s, alive %s%s" % (
                    kind, res["seconds"], res["restarts_made"], res["hung_seen"], res["canaries"], res["alive"],
                    ", prompt tokens %s" % res["prompt_tokens"] if "prompt_tokens" in res else ""), flush=True)
        for pattern in [p for p in args.patterns.split(",") if p]:
            for i in range(args.trials):
                res = trial(cfg, key, args, pattern)
                out["trials"].append(res)
                if not args.json:
                    print("%s %d: freeze -> hung %s s, -> verdict %s s, -> serving again %s s (restart %s s), rule %s, "
                          "restarts %s" % (pattern, i + 1, res.get("freeze_to_hung_s"), res.get("freeze_to_verdict_s"),
                                           res.get("freeze_to_serving_s"), res.get("restart_cost_s"), res.get("rule"),
                                           res.get("restarts_made")), flush=True)
        wait(lambda: serving(cfg["base_url"], key), args.ready_timeout, 2.0)
        if args.cost_runs:
            out["cost"] = cost(cfg, args.cost_runs)
    finally:
        with open(CONFIG, "w", encoding="utf-8") as fh:
            fh.write(original)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print("settings: %s" % out["settings"])
        print("check cost: %s" % out.get("cost"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
