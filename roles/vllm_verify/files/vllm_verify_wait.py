#!/usr/bin/python3
"""Wait until the vLLM unit serves, or fail fast when it dies (run by ansible.builtin.script).

Serving means all three, in this order:
  1. GET /health answers 200;
  2. GET /v1/models lists the served name;
  3. one short completion is answered (POST /v1/completions, 4 tokens, sampled as clients sample:
     temperature and top_p from the command line and NO seed, as clients send it: on vLLM's CPU build
     only an unseeded sampled request goes through the sampler that torch inductor compiles on first
     use, the path that needs a C++ compiler on the box), HTTP 200 with a choice.
Every --interval seconds `systemctl show` the unit (ActiveState, SubState, NRestarts, InvocationID,
Result): fail at once when it is failed, dead, waiting to auto-restart or has restarted (NRestarts
above --nrestarts). A server that is up but answers the completion with an error --completion-tries
times in a row is not serving: fail with the server's message. When /health turns 503 after it was
200, the engine died: say so. On failure the journal tail of the unit's last start
(`journalctl -u UNIT _SYSTEMD_INVOCATION_ID=<id> -n N`) comes back.

`--show UNIT... [--health-url URL]` only prints those properties of each unit ({unit: {property:
value}}), and with --health-url the HTTP status of that URL under the key "health" (0: no answer),
plus the journal tail of the first unit's start when that status is not 200.

The API key never travels on a command line or in the environment: with --key-file the script
reads VLLM_API_KEY from that root-only env file itself (the file the server's unit reads).

Prints one JSON object; exit status 0 when serving, 1 when not. Python standard library only.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROPS = ("ActiveState", "SubState", "NRestarts", "InvocationID", "Result", "ExecMainStatus", "LoadState",
         "ActiveEnterTimestampMonotonic")
PROMPT = "vllm_verify readiness: say hello"
# vLLM 0.28.0's lines when its engine dies (as _vllm_verify_engine_death_regex in the role's vars).
DEATH = "EngineDeadError|EngineCore encountered a fatal error|Engine core initialization failed"


def read_key(path: str) -> str:
    """VLLM_API_KEY from an env file (KEY=value lines, optional quotes); '' when absent."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        if line.startswith("VLLM_API_KEY="):
            value = line.split("=", 1)[1]
            try:
                parts = shlex.split(value)
            except ValueError:
                parts = [value]
            return parts[0] if parts else ""
    return ""


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


def http(url: str, key: str, timeout: float, payload: dict | None = None) -> tuple[int, str]:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our own server
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return 0, str(exc)


def error_text(body: str) -> str:
    """The server's error message of an OpenAI-style error body, else the body's first 300 characters."""
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:300]
    if isinstance(err, str):
        return err[:300]
    return body.strip()[:300]


def completion(base: str, key: str, model: str, args: argparse.Namespace) -> tuple[bool, str, dict]:
    """One short sampled completion -> (answered, why not, figures)."""
    payload = {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": args.temperature,
               "top_p": args.top_p, "stream": False}
    if args.seed is not None:
        payload["seed"] = args.seed
    t0 = time.monotonic()
    status, body = http(base + "/v1/completions", key, args.completion_timeout, payload)
    figures = {"status": status, "seconds": round(time.monotonic() - t0, 3),
               "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed}
    if status != 200:
        return False, f"a {args.temperature}/{args.top_p} sampled completion answered {status or 'no connection'}: " \
                      f"{error_text(body)}", figures
    try:
        data = json.loads(body)
        choices = data.get("choices") or []
        figures["completion_tokens"] = (data.get("usage") or {}).get("completion_tokens")
    except (ValueError, AttributeError):
        return False, f"a completion answered 200 with a body that is not JSON: {body[:200]}", figures
    if not choices:
        return False, "a completion answered 200 without a choice", figures
    return True, "", figures


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


def show(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vllm_verify_wait.py --show")
    ap.add_argument("units", nargs="+")
    ap.add_argument("--health-url", default="")
    ap.add_argument("--journal-lines", type=int, default=40)
    args = ap.parse_args(argv)
    out: dict = {unit: unit_state(unit) for unit in args.units}
    if args.health_url:
        status, body = http(args.health_url, "", 10)
        out["health"] = status
        if status != 200:
            first = out[args.units[0]]
            out["health_detail"] = error_text(body) if status else body[:300]
            out["journal_tail"] = journal_tail(args.units[0], first.get("InvocationID", ""), args.journal_lines)
    print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--show":
        return show(argv[1:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--key-file", default="", help="env file holding VLLM_API_KEY (read here, never passed)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--interval", type=float, default=2)
    ap.add_argument("--nrestarts", type=int, default=-1, help="baseline; -1: as found now")
    ap.add_argument("--journal-lines", type=int, default=40)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=None, help="default: none, as clients send it")
    ap.add_argument("--completion-timeout", type=float, default=120)
    ap.add_argument("--completion-tries", type=int, default=3)
    ap.add_argument("--death-pattern", default=DEATH, help="journal lines that mean the engine died (regex)")
    args = ap.parse_args(argv)
    key = read_key(args.key_file)
    base = args.base_url.rstrip("/")
    started = time.monotonic()
    state = unit_state(args.unit)
    baseline = state["NRestarts"] if args.nrestarts < 0 else args.nrestarts
    invocation = state.get("InvocationID", "")
    polls, last, was_healthy, failed_completions = 0, "", False, 0
    while True:
        polls += 1
        state = unit_state(args.unit)
        invocation = state.get("InvocationID") or invocation
        reason = dead_reason(state, baseline)
        if reason is not None and last:
            reason += f"; before that: {last}"
        engine_dead = False
        if reason is None:
            health, _body = http(base + "/health", key, 5)
            if health == 200:
                was_healthy = True
                status, body = http(base + "/v1/models", key, 5)
                try:
                    names = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
                except (ValueError, AttributeError):
                    names = []
                if args.model in names:
                    answered, why, figures = completion(base, key, args.model, args)
                    if answered:
                        try:  # systemd's monotonic clock is CLOCK_MONOTONIC, as time.monotonic()
                            since = time.monotonic() - int(state.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
                        except ValueError:
                            since = None
                        print(json.dumps({
                            "since_start_s": round(since, 2) if since is not None else None,
                            "ok": True, "elapsed_s": round(time.monotonic() - started, 2), "polls": polls,
                            "invocation_id": invocation, "nrestarts": state["NRestarts"],
                            "active_state": state.get("ActiveState"), "models": names,
                            "first_completion": figures}))
                        return 0
                    failed_completions += 1
                    last = why
                    if failed_completions >= args.completion_tries:
                        reason = f"the server is up but does not serve: {why} ({failed_completions} tries)"
                else:
                    last = f"/v1/models answered {status} without '{args.model}' (has {names})"
            elif health == 503 and was_healthy:
                engine_dead = True
                reason = "engine death: /health answered 503 after it had answered 200" + (
                    f" ({last})" if last else "")
            else:
                last = f"/health answered {health or 'no connection'}"
        elapsed = time.monotonic() - started
        if reason is None and elapsed >= args.timeout:
            reason = f"not serving after {args.timeout:.0f} s ({last})"
        if reason is not None:
            time.sleep(0.5)  # let the journal catch up with a dying process
            tail = journal_tail(args.unit, invocation, args.journal_lines)
            deaths = [line for line in tail if re.search(args.death_pattern, line)]
            if deaths and not engine_dead:
                engine_dead = True
                reason = f"engine death ({deaths[0].strip()[:200]}): {reason}"
            print(json.dumps({
                "ok": False, "reason": reason, "engine_dead": engine_dead,
                "elapsed_s": round(elapsed, 2), "polls": polls,
                "invocation_id": invocation, "nrestarts": state["NRestarts"],
                "active_state": state.get("ActiveState"), "sub_state": state.get("SubState"),
                "journal_tail": tail}))
            return 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
