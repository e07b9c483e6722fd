# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""First start of vLLM from a hub id, with the weights pre-fetched vs without: run INSIDE a lab box
(benchmarks/first_start_weights.sh BOX copies this file, the hub double and the fetch script in and runs it).

The hub is tests/doubles/hf_hub_double.py in this process, on loopback, serving /srv/models/tiny-qwen3 as
gpuhost-lab/tiny-qwen3 (``--rate`` bytes/s per download emulates a link; 0 = loopback speed). Each round
starts a fresh server as the service user with the lab profile's flags on a port of its own, from the hub
id, with an empty hub cache:

  without  vLLM downloads from the hub itself while it starts (HF_ENDPOINT = the double)
  with     vllm_service's fetch (files/vllm_fetch_weights.py, as the role runs it), then vLLM with
           HF_HUB_OFFLINE=1 (what vllm_service_hf_offline auto sets after a fetch)

and measures until the first completion is answered. Prints one row per round and the means: the
fetch's seconds, start to first completion, the total, and what the hub was asked while vLLM started
(requests, bytes). A measurement, not a test: nothing is asserted. The box's vllm.service is stopped
for the rounds (the figures then measure one server) and started again at the end when it was running.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# In the box the double and the fetch script lie beside this file; in the checkout, under tests/ and roles/.
FETCH = os.path.join(HERE, "vllm_fetch_weights.py")
if not os.path.exists(FETCH):
    FETCH = os.path.join(HERE, "..", "roles", "vllm_service", "files", "vllm_fetch_weights.py")
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "doubles")]
from hf_hub_double import HubDouble  # noqa: E402  pylint: disable=wrong-import-position

REPO = "gpuhost-lab/tiny-qwen3"
FLAGS = ["--max-model-len", "2048", "--max-num-seqs", "8", "--max-num-batched-tokens", "8192",
         "--kv-cache-memory-bytes", "268435456", "--enforce-eager", "--host", "127.0.0.1"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def completion(port: int) -> int:
    body = json.dumps({"model": "tiny-qwen3", "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def chown_tree(path: str, uid: int, gid: int) -> None:
    for base, dirs, names in os.walk(path):
        os.chown(base, uid, gid)
        for name in dirs + names:
            os.lchown(os.path.join(base, name), uid, gid)


def one_round(args, hub, mode: str, index: int) -> dict:
    pw = pwd.getpwnam(args.user)
    work = os.path.join(args.work, "%s-%d" % (mode, index))
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("hf", "vllm-cache", "tmp", "home"):
        os.makedirs(os.path.join(work, sub))
    chown_tree(work, pw.pw_uid, pw.pw_gid)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.path.join(work, "home"), "HF_HOME": os.path.join(work, "hf"),
           "VLLM_CACHE_ROOT": os.path.join(work, "vllm-cache"), "TMPDIR": os.path.join(work, "tmp"),
           "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", "HF_ENDPOINT": hub.url}
    row = {"mode": mode, "round": index, "fetch_s": 0.0}
    t0 = time.monotonic()   # total = the fetch + the start to the first completion (not the server's stop)
    if mode == "with":
        fetch = subprocess.run([args.python, FETCH, "--user", args.user,
                                "--cache-dir", os.path.join(work, "hf", "hub"), "--hf-home", os.path.join(work, "hf"),
                                "--endpoint", hub.url, "--log", os.path.join(work, "fetch.log"), "--", REPO],
                               capture_output=True, text=True, env=env, check=False)
        answer = json.loads(fetch.stdout.strip().splitlines()[-1])
        if not answer.get("ok"):
            raise SystemExit("the fetch failed: %s" % answer.get("error"))
        row["fetch_s"] = round(time.monotonic() - t0, 2)
        row["fetched_bytes"] = answer["fetched_bytes"]
        env["HF_HUB_OFFLINE"] = "1"
    asked = len(hub.requests)
    port = free_port()
    log_path = os.path.join(work, "server.log")
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        server = subprocess.Popen([args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", REPO,
                                   "--served-model-name", "tiny-qwen3", "--port", str(port), *FLAGS],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, cwd=env["HOME"], user=pw.pw_uid,
                                  group=pw.pw_gid, extra_groups=[], start_new_session=True)
    try:
        status = 0
        while time.monotonic() - started < args.timeout:
            if server.poll() is not None:
                break
            status = completion(port)
            if status == 200:
                break
            time.sleep(0.5)
        row["start_s"] = round(time.monotonic() - started, 2)
        row["served"] = status == 200
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(10)
    during = hub.requests[asked:]
    row.update(total_s=round(row["fetch_s"] + row["start_s"], 2), hub_requests_during_start=len(during),
               hub_bytes_during_start=sum(r["bytes"] for r in during))
    if not row["served"]:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            row["log_tail"] = fh.read()[-2000:]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each mode, alternating (default 2)")
    ap.add_argument("--rate", type=float, default=0, help="hub bytes/s per download (0: loopback speed)")
    ap.add_argument("--model-dir", default="/srv/models/tiny-qwen3")
    ap.add_argument("--python", default="/opt/vllm/venv/bin/python")
    ap.add_argument("--user", default="vllm")
    ap.add_argument("--work", default="/var/tmp/gpuhost-bench-weights")
    ap.add_argument("--unit", default="vllm.service", help="stopped during the rounds when running ('' = leave it)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="keep each round's directory (server.log, fetch.log)")
    ap.add_argument("--json", action="store_true", help="also print the rows as one JSON line")
    args = ap.parse_args(argv)
    was_active = bool(args.unit) and subprocess.run(["systemctl", "is-active", "--quiet", args.unit], check=False).returncode == 0
    if was_active:
        subprocess.run(["systemctl", "stop", args.unit], check=True)
    rows = []
    try:
        with HubDouble({REPO: args.model_dir}, rate=args.rate or None) as hub:
            for index in range(1, args.rounds + 1):
                for mode in (("without", "with") if index % 2 else ("with", "without")):
                    row = one_round(args, hub, mode, index)
                    rows.append(row)
                    print("round %d %-7s fetch %6.2f s  start->first completion %6.2f s  total %6.2f s  "
                          "hub during start: %d requests, %d bytes%s" % (
                              index, mode, row["fetch_s"], row["start_s"], row["total_s"],
                              row["hub_requests_during_start"], row["hub_bytes_during_start"],
                              "" if row["served"] else "  NOT SERVED:\n" + row.get("log_tail", "")), flush=True)
    finally:
        if was_active:
            subprocess.run(["systemctl", "start", args.unit], check=False)
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print("\nfirst start from %s, hub rate %s, %d round(s) each (means):" % (
        REPO, "%.0f B/s" % args.rate if args.rate else "loopback", args.rounds))
    means = {}
    for mode in ("without", "with"):
        mine = [r for r in rows if r["mode"] == mode and r["served"]]
        if not mine:
            print("  %-7s  no round served" % mode)
            continue
        keys = ("fetch_s", "start_s", "total_s", "hub_requests_during_start")
        mean = {k: round(sum(r[k] for r in mine) / len(mine), 2) for k in keys}
        means[mode] = mean
        print("  %-7s  fetch %6.2f s  start->first completion %6.2f s  total %6.2f s  hub requests during start %.0f" % (
            mode, mean["fetch_s"], mean["start_s"], mean["total_s"], mean["hub_requests_during_start"]))
    if len(means) == 2:
        print("  the start itself with the weights on disk: %.2fx the start that downloads them (%.2f s saved at the "
              "start; %.2f s end to end)" % (means["with"]["start_s"] / means["without"]["start_s"],
                                             means["without"]["start_s"] - means["with"]["start_s"],
                                             means["without"]["total_s"] - means["with"]["total_s"]))
    if args.json:
        print(json.dumps({"rows": rows, "means": means, "rate": args.rate, "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
