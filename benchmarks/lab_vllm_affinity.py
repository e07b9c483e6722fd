"""Runs inside a lab box converged by site.yml (the real vLLM CPU build): what the server costs in CPU with its unit
as rendered and with CPUAffinity= on one core (a runtime drop-in, removed at the end, the server restarted as it was).

For each setting: one restart (seconds to /health 200, CPU seconds of the vllm user's processes at that point), then
a fixed load (N chat completions of T tokens, ignore_eos, at concurrency C, greedy): wall seconds, tok/s, the
server's CPU seconds, CPU ms per generated token. Standard library only; changes nothing it does not put back.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import pwd
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "integration")]
from lab_checks import wait  # noqa: E402  pylint: disable=wrong-import-position

DROPIN_DIR = "/run/systemd/system/vllm.service.d"
DROPIN = DROPIN_DIR + "/90-gpuhost-bench-affinity.conf"
HZ = os.sysconf("SC_CLK_TCK")


def server_cpu_s(uid: int) -> float:
    """utime + stime (with reaped children) of every process of the server's user."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except (OSError, IndexError, ValueError):
            continue
    return total / HZ


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def restart(port: int, uid: int) -> dict:
    start = time.monotonic()
    subprocess.run(["systemctl", "restart", "vllm.service"], check=True)
    time.sleep(1)
    if not wait(lambda: healthy(port), 600, 0.2):
        raise SystemExit("vllm.service did not serve within 600 s")
    return {"start_s": round(time.monotonic() - start, 1), "start_cpu_s": round(server_cpu_s(uid), 1)}


def load(port: int, uid: int, model: str, requests: int, concurrency: int, tokens: int) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Write a long story about GPUs."}],
                       "max_tokens": tokens, "ignore_eos": True, "temperature": 0})
    left, generated, lock = [requests], [0], threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                if not left[0]:
                    return
                left[0] -= 1
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            usage = json.loads(conn.getresponse().read())["usage"]
            with lock:
                generated[0] += usage["completion_tokens"]

    cpu0, start = server_cpu_s(uid), time.monotonic()
    threads = [threading.Thread(target=client) for _client in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.monotonic() - start, server_cpu_s(uid) - cpu0
    return {"load_s": round(wall, 1), "tok_s": round(generated[0] / wall, 1), "load_cpu_s": round(cpu, 1),
            "cpu_ms_per_token": round(1000 * cpu / max(generated[0], 1), 3)}


def set_affinity(cpus: str | None) -> None:
    if cpus is None:
        if os.path.exists(DROPIN):
            os.remove(DROPIN)
    else:
        os.makedirs(DROPIN_DIR, exist_ok=True)
        with open(DROPIN, "w", encoding="ascii") as fh:
            fh.write(f"[Service]\nCPUAffinity={cpus}\n")
    subprocess.run(["systemctl", "daemon-reload"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="0", help="CPUAffinity= of the confined run (default 0)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="tiny-qwen3")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    uid = pwd.getpwnam("vllm").pw_uid
    rows = []
    try:
        for label, cpus in (("as rendered", None), (f"CPUAffinity={args.cpus}", args.cpus)):
            set_affinity(cpus)
            started = restart(args.port, uid)
            for conc in args.concurrency:
                rows.append({"unit": label, "concurrency": conc, **started,
                             **load(args.port, uid, args.model, args.requests if conc > 1 else args.requests // 4,
                                    conc, args.tokens)})
    finally:
        set_affinity(None)
        restart(args.port, uid)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'unit':<16} {'conc':>4} {'start s':>8} {'start CPU s':>11} {'load s':>7} {'tok/s':>8} {'CPU s':>6} "
          f"{'CPU ms/tok':>10}")
    for row in rows:
        print(f"{row['unit']:<16} {row['concurrency']:>4} {row['start_s']:>8} {row['start_cpu_s']:>11} {row['load_s']:>7} "
              f"{row['tok_s']:>8} {row['load_cpu_s']:>6} {row['cpu_ms_per_token']:>10}")


if __name__ == "__main__":
    main()
