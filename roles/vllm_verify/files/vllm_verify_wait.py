#!/usr/bin/python3
"""Wait until the vLLM unit serves, or fail fast when it dies (run by ansible.builtin.script).

Every --interval seconds: `systemctl show` the unit (ActiveState, SubState, NRestarts,
InvocationID, Result); fail at once when it is failed, dead, waiting to auto-restart or has
restarted (NRestarts above --nrestarts); else GET /health and /v1/models and succeed when
/health is 200 and the models list the served name. On failure the journal tail of the
unit's last start (`journalctl -u UNIT _SYSTEMD_INVOCATION_ID=<id> -n 40`) comes back.

`--show UNIT...` only prints those properties of each unit ({unit: {property: value}}).

Prints one JSON object; exit status 0 when healthy, 1 when not. The API key is read from the
environment (VLLM_VERIFY_API_KEY), never from the command line. Python standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROPS = ("ActiveState", "SubState", "NRestarts", "InvocationID", "Result", "ExecMainStatus", "LoadState",
         "ActiveEnterTimestampMonotonic")


def unit_state(unit: str) -> dict:
    out = subprocess.run(["systemctl", "show", "-p", ",".join(PROPS), unit],
                         capture_output=True, text=True, check=False).stdout
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        state["NRestarts"] = int(state.get("NRestarts") or 0)
    except ValueError:
        state["NRestarts"] = 0
    return state


def journal_tail(unit: str, invocation: str, lines: int) -> list[str]:
    cmd = ["journalctl", "--no-pager", "-o", "cat", "-n", str(lines), "-u", unit]
    if invocation:
        cmd.append(f"_SYSTEMD_INVOCATION_ID={invocation}")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()
    if not out and invocation:
        return journal_tail(unit, "", lines)
    return out


def http_get(url: str, key: str, timeout: float) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our own server
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return 0, str(exc)


def dead_reason(state: dict, baseline: int) -> str | None:
    active, sub = state.get("ActiveState", ""), state.get("SubState", "")
    if state.get("LoadState") == "not-found":
        return "the unit is not installed"
    if active == "failed":
        return f"the unit failed (Result={state.get('Result')}, exit status {state.get('ExecMainStatus')})"
    if sub == "auto-restart":
        return (f"the server exited (Result={state.get('Result')}, exit status "
                f"{state.get('ExecMainStatus')}) and systemd is restarting it")
    if state["NRestarts"] > baseline:
        return f"the unit restarted (NRestarts {baseline} -> {state['NRestarts']})"
    if active in ("inactive", "deactivating"):
        return f"the unit is {active} (Result={state.get('Result')})"
    return None


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--show":
        print(json.dumps({unit: unit_state(unit) for unit in sys.argv[2:]}))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--interval", type=float, default=2)
    ap.add_argument("--nrestarts", type=int, default=-1, help="baseline; -1: as found now")
    ap.add_argument("--journal-lines", type=int, default=40)
    args = ap.parse_args()
    key = os.environ.get("VLLM_VERIFY_API_KEY", "")
    base = args.base_url.rstrip("/")
    started = time.monotonic()
    state = unit_state(args.unit)
    baseline = state["NRestarts"] if args.nrestarts < 0 else args.nrestarts
    invocation = state.get("InvocationID", "")
    polls, last = 0, ""
    while True:
        polls += 1
        state = unit_state(args.unit)
        invocation = state.get("InvocationID") or invocation
        reason = dead_reason(state, baseline)
        if reason is None:
            health, _ = http_get(base + "/health", key, 5)
            if health == 200:
                status, body = http_get(base + "/v1/models", key, 5)
                try:
                    names = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
                except ValueError:
                    names = []
                if args.model in names:
                    try:  # systemd's monotonic clock is CLOCK_MONOTONIC, as time.monotonic()
                        since = time.monotonic() - int(state.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
                    except ValueError:
                        since = None
                    print(json.dumps({
                        "since_start_s": round(since, 2) if since is not None else None,
                        "ok": True, "elapsed_s": round(time.monotonic() - started, 2), "polls": polls,
                        "invocation_id": invocation, "nrestarts": state["NRestarts"],
                        "active_state": state.get("ActiveState"), "models": names}))
                    return 0
                last = f"/v1/models answered {status} without '{args.model}' (has {names})"
            else:
                last = f"/health answered {health or 'no connection'}"
        elapsed = time.monotonic() - started
        if reason is None and elapsed >= args.timeout:
            reason = f"not healthy after {args.timeout:.0f} s ({last})"
        if reason is not None:
            print(json.dumps({
                "ok": False, "reason": reason, "elapsed_s": round(elapsed, 2), "polls": polls,
                "invocation_id": invocation, "nrestarts": state["NRestarts"],
                "active_state": state.get("ActiveState"), "sub_state": state.get("SubState"),
                "journal_tail": journal_tail(args.unit, invocation, args.journal_lines)}))
            return 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
