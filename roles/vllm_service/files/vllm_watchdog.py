# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM watchdog: is the engine making forward progress? (The unit's start-up check for orphaned workers is
vllm_orphans.py beside this file.)

Python standard library only and free of any import from the collection, because vllm_service
copies this file to the box (/usr/local/lib/gpuhost-inference/vllm_watchdog.py) where the
watchdog's root oneshot unit runs it with the system python3 every period. The API key of the canary
is read from the secrets file with the collection's one env-file reader (plugins/module_utils/systemd_env.py,
which vllm_service installs beside this file and this file loads by path; config key env_reader), so the
canary sends the key systemd gave the server. /metrics is read the same way, with the collection's one reader of
Prometheus text (plugins/module_utils/prometheus_text.py, installed beside this file; config key metrics_reader):

    python3 vllm_watchdog.py check --config /etc/vllm/watchdog.json   # one check (the timer's unit)
    python3 vllm_watchdog.py status --config /etc/vllm/watchdog.json  # print config + state, read-only

The judging is one pure function, ``judge(state, sample, settings) -> (state, decision)``, fed with
what one check saw (the unit's systemctl properties, /health, /metrics, the canary's answer) and
unit-tested over recorded /metrics sequences (tests/unit/data/vllm_watchdog_cases.yaml). Its rules:

stalled       work is pending (vllm:num_requests_running + vllm:num_requests_waiting > 0) and none
              of the progress counters (PROGRESS: generated and prompt tokens, engine steps,
              finished requests) has moved for ``stall_seconds`` (counted from the later of the last
              move and the moment work became pending). The engine steps counter
              (vllm:iteration_tokens_total_count) moves at every scheduler step, also during a long
              chunked prefill when no token counter moves yet: slow-but-moving is not stalled.
unresponsive  /health or /metrics did not answer 200 within ``timeout`` ``unresponsive_checks``
              checks in a row.
silent        nothing pending and no progress for ``canary_interval`` seconds: one tiny completion
              (max_tokens 1) is sent and must be answered within ``canary_timeout``; ``canary_failures``
              failed canaries in a row are a verdict. Never sent while work is pending (so it cannot
              misfire under load), nor when real traffic moved the counters recently.
              The canary is due sooner, after ``unserved_seconds``, when the API server holds requests
              (its /load, vLLM's --enable-server-load-tracking, which vllm_service turns on with the
              watchdog) that the engine never reports: an engine that froze while idle reports nothing
              new, so its gauges stay at 0 while the requests sent to it wait. A client that keeps
              a finished stream open looks the same; the canary, answered, tells the two apart, and
              that many requests are not asked about again (only more of them are).
structured    the path agents need beside plain text: a forced tool call (structured output, the grammar) is
              sent at a low rate - after ``tool_canary_interval`` seconds since the last one, only when the engine
              did nothing since the last check and owes nothing (no request pending, held or arrived: never while
              it is merely busy) -, and
              ``tool_canary_failures`` of them in a row that the engine answered with an error (HTTP 5xx: vLLM
              0.28.0's "Internal server error" of a request it terminated, e.g. "grammar rejected tokens") are a
              verdict; after a failed one the next is due after ``tool_canary_retry`` seconds. A refusal (4xx: no
              tool calling on this profile, a wrong key), a timeout or no answer proves nothing here (the plain
              canary and the rules above judge an engine that does not answer). Issue 45: after a host incident a
              server answered plain completions and failed every forced tool call until a restart.

Nothing counts before the first readiness (/health and /metrics answer 200) of the unit's current
invocation (systemd's InvocationID): model loading, a weights download or a restart never look like
a stall. A verdict restarts the unit (the whole cgroup goes) unless ``max_restarts`` restarts were
made in the last hour: then the watchdog holds, logs at crit at every check, and acts again when
the hour has passed. The restart is `systemctl kill --signal=SIGKILL`, `systemctl reset-failed`, then
`systemctl restart`: a hung engine cannot stop gracefully, and SIGTERM would wait TimeoutStopSec for nothing; the
watchdog's restarts are bounded by ``max_restarts``, so they do not spend the unit's StartLimitBurst, which is
left whole for crash restarts (without the reset, a few verdicts plus a crash or two would leave the unit refusing
to start). ``dry_run`` judges and logs, never restarts.
"""
from __future__ import annotations

import argparse
import copy
import http.client
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

__all__ = [
    "DEFAULTS",
    "PENDING",
    "PROGRESS",
    "api_done",
    "api_in_flight",
    "api_key",
    "judge",
    "load_env_reader",
    "load_metrics_reader",
    "observe",
    "parse_metrics",
    "textfile_families",
    "write_textfile",
]

# The counters whose movement is forward progress (summed over their label sets).
PROGRESS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:request_success_total",
)
PENDING = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# The API server's own count of the requests it finished (prometheus-fastapi-instrumentator in vLLM 0.28.0), counted
# for the handlers that hand work to the engine: a request the engine never saw (a client that timed out on a frozen
# engine) is counted here when it ends, though the engine's counters never move for it.
API_DONE = "http_requests_total"
INFERENCE_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/score",
                      "/v1/rerank", "/v2/rerank", "/rerank", "/score", "/pooling", "/classify", "/invocations",
                      "/v1/audio/transcriptions", "/v1/audio/translations", "/v1/messages")
# What the watchdog writes for node exporter's textfile collector at every check (docs/watchdog.md, "hung").
VERDICT_RULES = ("stalled", "unserved", "silent", "unresponsive", "structured")
DEFAULTS = {
    "period": 15,
    "stall_seconds": 120,
    "timeout": 10,
    "unresponsive_checks": 3,
    "canary_interval": 300,
    "canary_timeout": 60,
    "canary_failures": 2,
    "unserved_seconds": 30,
    "max_restarts": 3,
    "restart_window": 3600,
    "dry_run": False,
    # the forced tool call canary (rule structured): off unless configured (vllm_service turns it on)
    "tool_canary_interval": 0,
    "tool_canary_retry": 60,
    "tool_canary_failures": 3,
}
UNIT_PROPS = ("ActiveState", "SubState", "InvocationID", "ActiveEnterTimestamp", "NRestarts", "MainPID")
CANARY_PROMPT = "ping"
# The forced tool call canary's one tool: no parameters, so the constrained answer is a few tokens.
CANARY_TOOL = {"type": "function", "function": {"name": "gpuhost_watchdog_canary", "description": "Answer the canary.",
                                                "parameters": {"type": "object", "properties": {}}}}
# The env-file reader vllm_service installs beside this file (the collection's plugins/module_utils/systemd_env.py).
ENV_READER = "systemd_env.py"
STATE_VERSION = 1
# syslog priorities as journald reads them from a line's "<N>" prefix
CRIT, ERR, WARNING, NOTICE, INFO = 2, 3, 4, 5, 6
LEVELS = {"crit": CRIT, "err": ERR, "warning": WARNING, "notice": NOTICE, "info": INFO}

# The collection's one reader of Prometheus text (plugins/module_utils/prometheus_text.py), installed beside this
# file by vllm_service (config key metrics_reader); in the collection's tree it is found where it lives.
METRICS_READER = "prometheus_text.py"
# The collection's one writer of node exporter textfiles (plugins/module_utils/gpuhost_textfile.py), beside it too.
TEXTFILE_WRITER = "gpuhost_textfile.py"
_HERE = os.path.dirname(os.path.abspath(__file__))
_READER_PLACES = (os.path.join(_HERE, METRICS_READER),
                  os.path.join(_HERE, "..", "..", "..", "plugins", "module_utils", METRICS_READER))
_loaded_readers = {}


# -- /metrics ------------------------------------------------------------------------------------

def _load_by_path(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("not a Python file: %s" % path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_metrics_reader(path=None):
    """The collection's Prometheus text reader, loaded by path (``path``, else beside this file, else in the
    collection's tree); loaded once per path. ImportError naming the places tried when there is none."""
    places = (path,) if path else _READER_PLACES
    for place in places:
        if place in _loaded_readers:
            return _loaded_readers[place]
        if os.path.isfile(place):
            _loaded_readers[place] = _load_by_path("gpuhost_prometheus_text", place)
            return _loaded_readers[place]
    raise ImportError("no Prometheus text reader (%s) at %s" % (METRICS_READER, ", ".join(places)))


def parse_metrics(text, names=PROGRESS + PENDING, reader=None):
    """Prometheus text -> {name: value summed over its label sets} for the ``names`` present (NaN left out)."""
    return (reader or load_metrics_reader()).totals(text, names)


def api_done(series):
    """The API server's finished inference requests from its http_requests_total series ([(labels, value)]): the
    handlers of INFERENCE_HANDLERS, any status but 4xx (refused before the engine); None when it has none."""
    if not series:
        return None
    return sum(value for labels, value in series
               if labels.get("handler") in INFERENCE_HANDLERS and not labels.get("status", "").startswith("4"))


def observe(text, reader=None):
    """/metrics text -> {running, waiting, pending, counters: {name: value}, api_done} (missing gauges: 0;
    api_done: see api_done(), None without the API server's counters)."""
    reader = reader or load_metrics_reader()
    parsed = reader.samples(text)
    values = parse_metrics(parsed, reader=reader)
    running = int(values.get("vllm:num_requests_running", 0))
    waiting = int(values.get("vllm:num_requests_waiting", 0))
    counters = {name: values[name] for name in PROGRESS if name in values}
    return {"running": running, "waiting": waiting, "pending": running + waiting, "counters": counters,
            "api_done": api_done(reader.series(parsed, API_DONE))}


# -- judging -------------------------------------------------------------------------------------

def _fresh_invocation(st, invocation):
    st.update({
        "invocation": invocation,
        "ready": False,
        "ready_at": None,
        "counters": None,
        "progress_at": None,
        "pending_since": None,
        "last_activity": None,
        "fails": 0,
        "canary_fails": 0,
        "last_canary_at": None,
        "last_canary": None,
        "tool_canary_fails": 0,
        "last_tool_canary_at": None,
        "last_tool_canary": None,
        "api_answered": 0,
        "api_done_base": None,
        "hung": False,
        "hung_since": None,
        "owed": None,
        "unmoved_s": None,
    })


def new_state():
    st = {"version": STATE_VERSION, "restarts": [], "restarts_total": 0, "last_verdict": None,
          "held": False, "checks": 0, "verdicts": {}}
    _fresh_invocation(st, None)
    return st


def _moved(before, after):
    """Did any progress counter change (a counter present only on one side counts as a change)?"""
    if before is None:
        return False
    return any(before.get(name) != after.get(name) for name in set(before) | set(after))


# The canaries' one judgement, each with its rule as data: which answers count as a failure (by HTTP status; 0 is
# a timeout or no answer) and its name in the notes. The plain canary (silent, unserved, stalled): every answer but a
# refusal (4xx proves nothing); the forced tool call canary (structured): only an engine error (5xx; a refusal, a
# timeout or no answer prove nothing here: the plain canary and the other rules judge an engine that does not
# answer). A canary NAME keeps its state in NAME_fails, last_NAME_at and last_NAME; NAME_failures failures in a row
# (the settings) are its verdict.
CANARY_RULES = {
    "canary": {"called": "the canary", "counts": lambda status: not 400 <= status < 500},
    "tool_canary": {"called": "the forced tool call canary", "counts": lambda status: 500 <= status < 600},
}


def _judge_canary(st, cfg, name, answer, now, wall):
    """Record canary NAME's answer in the state and count it by its rule -> (outcome, level, note): outcome
    "answered" (the note is the caller's), "not counted", "failed" (fewer than NAME_failures in a row) or "verdict"."""
    rule = CANARY_RULES[name]
    fails = name + "_fails"
    st["last_%s_at" % name] = now
    st["last_" + name] = dict(answer, at=wall)
    status = answer.get("status") or 0
    if answer.get("ok"):
        st[fails] = 0
        return "answered", "notice", None
    if not rule["counts"](status):
        return "not counted", "notice", "%s got %s (%s): it proves nothing, not counted" % (
            rule["called"], status or "no answer", answer.get("error"))
    st[fails] = int(st.get(fails) or 0) + 1
    note = "%s failed %d time(s) in a row (need %d): %s" % (
        rule["called"], st[fails], cfg[name + "_failures"], answer.get("error") or status)
    return ("verdict" if st[fails] >= int(cfg[name + "_failures"]) else "failed"), "warning", note


def judge(state, sample, settings):
    """One check: (the previous state, what this check saw, the settings) -> (new state, decision).

    ``sample``: {now: monotonic s, wall: epoch s, unit: {ActiveState, InvocationID, ...},
    health: {ok, status, error}, metrics: {ok, status, error, running, waiting, pending, counters,
    api_in_flight (the API server's /load: requests it holds; absent when it did not answer)},
    canary: None or {ok, status, error, seconds}, tool_canary: None or {ok, status, error, seconds}}.

    ``decision``: {action: none | canary | tool_canary | restart | hold, phase, note, verdict: None or {rule, ...}}.
    ``canary`` (``tool_canary``) asks the caller to send the canary (the forced tool call canary) and judge the same
    sample again with its answer.
    The input state is not changed.
    """
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in (settings or {}).items() if v is not None})
    st = copy.deepcopy(state) if state else new_state()
    for key, value in new_state().items():
        st.setdefault(key, value)
    now = float(sample["now"])
    wall = float(sample.get("wall", now))
    unit = sample.get("unit") or {}
    if not sample.get("again"):   # a second look within the same check (the next canary) is not another check
        st["checks"] = int(st.get("checks", 0)) + 1
    st["last_check_at"] = wall

    def decide(action, phase, note, verdict=None, level="info", hung=None):
        if phase != st.get("phase") and level == "info":
            level = "notice"  # a change of phase is worth a line in the journal
        st["phase"] = phase
        st["note"] = note
        hung = bool(st.get("hung")) if hung is None else hung
        return st, {"action": action, "phase": phase, "note": note, "verdict": verdict, "level": level, "hung": hung}

    if unit.get("ActiveState") != "active":
        # stopped by a person, failed, or systemd restarting it: systemd's business, not ours
        if st.get("invocation") != unit.get("InvocationID"):
            _fresh_invocation(st, unit.get("InvocationID") or None)
        return decide("none", "down", "the unit is %s/%s: nothing to judge" % (
            unit.get("ActiveState", "?"), unit.get("SubState", "?")))

    invocation = unit.get("InvocationID") or None
    if invocation != st.get("invocation"):
        _fresh_invocation(st, invocation)

    st["hung"] = False   # set again below when /metrics answers and the engine owes work it does not do
    health = sample.get("health") or {}
    metrics = sample.get("metrics") or {}
    answered = bool(health.get("ok")) and bool(metrics.get("ok"))

    if not st["ready"]:
        if not answered:
            return decide("none", "starting", "not ready yet (/health %s, /metrics %s): nothing counts before the "
                          "first readiness" % (health.get("status") or health.get("error") or "-",
                                               metrics.get("status") or metrics.get("error") or "-"))
        st.update({"ready": True, "ready_at": wall, "counters": metrics.get("counters") or {},
                   "progress_at": now, "last_activity": now, "fails": 0, "canary_fails": 0,
                   "tool_canary_fails": 0, "last_tool_canary_at": now})
        st["pending_since"] = now if metrics.get("pending", 0) > 0 else None
        return decide("none", "ready", "ready: /health and /metrics answer; watching from now on")

    verdict = None
    action = "none"
    note = "ok"
    level = "info"
    if not answered:
        level = "warning"
        st["fails"] = int(st.get("fails", 0)) + 1
        note = "no answer %d time(s) in a row (need %d): /health %s, /metrics %s" % (
            st["fails"], cfg["unresponsive_checks"], health.get("status") or health.get("error") or "-",
            metrics.get("status") or metrics.get("error") or "-")
        if st["fails"] >= int(cfg["unresponsive_checks"]):
            verdict = {"rule": "unresponsive", "checks_in_a_row": st["fails"], "timeout_s": cfg["timeout"],
                       "health": health, "metrics": {k: metrics.get(k) for k in ("ok", "status", "error")}}
    else:
        st["fails"] = 0
        counters = metrics.get("counters") or {}
        pending = int(metrics.get("pending", 0))
        api = int(metrics.get("api_in_flight") or 0)
        done = metrics.get("api_done")
        moved = _moved(st.get("counters"), counters)
        if moved:
            st["progress_at"] = now
            st["last_activity"] = now
            st["canary_fails"] = 0
        # What the engine owes (docs/watchdog.md, "hung"): its own pending requests, the requests the API server holds
        # beyond those an answered canary explained (a client keeping a finished stream open), and the inference
        # requests the API server finished (a client that gave up, a timeout) since the engine last moved.
        st["api_answered"] = min(int(st.get("api_answered") or 0), api)
        if done is not None and (moved or st.get("api_done_base") is None or done < st["api_done_base"]):
            st["api_done_base"] = done
        arrived = int(done - st["api_done_base"]) if done is not None else 0
        owed = {"pending": pending, "api_held": max(0, api - st["api_answered"]), "api_arrived": arrived}
        unmoved = now - st["progress_at"]
        hung = not moved and any(owed.values()) and unmoved >= float(cfg["unserved_seconds"])
        seen_before = st.get("hung_since") is not None
        st["hung_since"] = (st.get("hung_since") or now) if hung else None
        st["hung"] = hung
        st["owed"] = owed
        st["unmoved_s"] = round(unmoved, 1)
        if pending > 0:
            if st.get("pending_since") is None:
                st["pending_since"] = now
        else:
            st["pending_since"] = None
        still = now - max(st["progress_at"], st["pending_since"]) if pending > 0 else 0.0
        canary = sample.get("canary")
        tool = sample.get("tool_canary")
        quiet = now - max(st["last_activity"], st.get("last_canary_at") or 0.0)
        tool_fails = int(st.get("tool_canary_fails") or 0)
        tool_due = (float(cfg["tool_canary_interval"] or 0) > 0 and not moved and pending == 0 and not any(owed.values())
                    and now - float(now if st.get("last_tool_canary_at") is None else st["last_tool_canary_at"]) >= float(
                        cfg["tool_canary_retry"] if tool_fails else cfg["tool_canary_interval"]))
        evidence = {"pending": pending, "running": metrics.get("running", 0), "waiting": metrics.get("waiting", 0),
                    "api_in_flight": metrics.get("api_in_flight"), "api_arrived": arrived, "counters": counters,
                    "unmoved_s": round(unmoved, 1), "unchanged_since": round(wall - unmoved, 3)}
        if canary is not None:
            outcome, level, note = _judge_canary(st, cfg, "canary", canary, now, wall)
            if outcome == "answered":
                st["last_activity"] = now
                note = ("the canary was answered in %s s" % canary.get("seconds") if canary.get("by") != "progress" else
                        "the engine moved %s s after the canary went: alive" % canary.get("seconds"))
                if hung:
                    # the engine serves: what the API server holds is not waiting for it
                    st["api_answered"] = api
                    st["api_done_base"] = done if done is not None else st.get("api_done_base")
                    st["hung_since"] = None
                    st["hung"] = False
                    note += " (owed %s, unmoved %.0f s: not hung)" % (owed, unmoved)
            elif outcome == "failed":
                action = "canary"   # the next one at once (the caller looks again first)
            elif outcome == "verdict":
                rule = ("stalled" if pending > 0 else "unserved") if hung else "silent"
                verdict = dict(evidence, rule=rule, canary_failures=st["canary_fails"], canary=canary,
                               canary_timeout_s=cfg["canary_timeout"], owed=owed,
                               quiet_s=round(now - st["last_activity"], 1))
        elif tool is not None:
            outcome, level, note = _judge_canary(st, cfg, "tool_canary", tool, now, wall)
            if outcome == "answered":
                note = "the forced tool call canary was answered in %s s" % tool.get("seconds")
            elif outcome == "verdict":
                verdict = dict(evidence, rule="structured", tool_canary_failures=st["tool_canary_fails"],
                               tool_canary=tool, owed=owed)
        elif pending > 0 and still >= float(cfg["stall_seconds"]):
            # the backstop without a canary (one refused, say): work pending and nothing moved for stall_seconds
            note = "%d pending, progress %.0f s ago" % (pending, still)
            verdict = dict(evidence, rule="stalled", stalled_s=round(still, 1), stall_seconds=cfg["stall_seconds"])
        elif hung and (seen_before or st.get("canary_fails", 0) > 0):
            action = "canary"
            level = "warning"
            note = "hung? the engine has not moved for %.0f s and owes %s: a canary is due" % (unmoved, owed)
        elif hung:
            level = "warning"
            note = ("hung? the engine has not moved for %.0f s and owes %s: the canary goes at the next check "
                    "(the alert first)" % (unmoved, owed))
        elif pending == 0 and (st.get("canary_fails", 0) > 0 or quiet >= float(cfg["canary_interval"])):
            action = "canary"
            note = "idle for %.0f s: a canary is due" % quiet
        elif tool_due:
            action = "tool_canary"
            note = "nothing owed: a forced tool call canary is due%s" % (
                " (%d failed in a row)" % tool_fails if tool_fails else "")
        elif pending > 0:
            note = "%d pending, progress %.0f s ago" % (pending, still)
        elif any(owed.values()):
            note = "idle per the engine; owed %s, unmoved %.0f s" % (owed, unmoved)
        else:
            note = "idle"
        st["counters"] = counters

    if verdict is None:
        st["held"] = False
        return decide(action, "watching", note, level=level)

    # the suspicion stays raised until the restart is made (the next check starts over)
    hung = bool(st.get("hung")) or verdict["rule"] in ("stalled", "unserved")
    window = float(cfg["restart_window"])
    recent = [t for t in st.get("restarts", []) if wall - t < window]
    st["restarts"] = recent
    verdict.update({"at": wall, "invocation": st.get("invocation"), "ready_at": st.get("ready_at"),
                    "restarts_last_hour": len(recent), "max_restarts": cfg["max_restarts"]})
    if cfg.get("dry_run"):
        verdict["action"] = "dry_run"
        action = "none"
    elif len(recent) >= int(cfg["max_restarts"]):
        verdict["action"] = "held"
        st["held"] = True
        action = "hold"
    else:
        verdict["action"] = "restart"
        st["restarts"] = recent + [wall]
        st["restarts_total"] = int(st.get("restarts_total", 0)) + 1
        verdict["restarts_last_hour"] = len(st["restarts"])
        st["held"] = False
        action = "restart"
        # the next check starts over: a restarted unit is judged only after it is ready again
        _fresh_invocation(st, "restarting")
    st["last_verdict"] = verdict
    st["verdicts"] = dict(st.get("verdicts") or {})
    st["verdicts"][verdict["rule"]] = int(st["verdicts"].get(verdict["rule"], 0)) + 1
    return decide(action, "verdict", "%s: %s" % (verdict["rule"], note), verdict, "err", hung)


# -- the box -------------------------------------------------------------------------------------

def load_env_reader(path=None):
    """The collection's env-file reader (plugins/module_utils/systemd_env.py, installed beside this file by
    vllm_service), loaded by path: this file reads no env file itself."""
    return _load_by_path("gpuhost_systemd_env", path or os.path.join(_HERE, ENV_READER))


def api_key(config):
    """VLLM_API_KEY as systemd gives it to the server from the secrets file (config key_file), read with the
    collection's one reader (config env_reader); '' when there is none. A key that cannot be read is logged and
    the canary goes without one: the server refuses it (401), which never counts as a failed canary."""
    path = config.get("key_file")
    if not path:
        return ""
    try:
        reader = load_env_reader(config.get("env_reader"))
        env = reader.read_env_file(path)
    except FileNotFoundError as exc:
        if exc.filename == path:
            return ""   # no secrets file: no key (the server's unit reads it with EnvironmentFile=-)
        failure = exc
    except Exception as exc:  # pylint: disable=broad-except  # whatever stops the read, the check goes on
        failure = exc
    else:
        return env.get("VLLM_API_KEY", "")
    log(ERR, "cannot read VLLM_API_KEY from %s (%s: %s): the canary goes without the key" % (
        path, type(failure).__name__, failure))
    return ""


def http_get(base_url, path, timeout, key="", payload=None):
    """One request -> {ok, status, error, body, seconds}; never raises."""
    parts = urlsplit(base_url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    body = None
    if payload is not None:
        body = json.dumps(payload).encode("utf-8")
        headers["Content-Type"] = "application/json"
    t0 = time.monotonic()
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST" if body is not None else "GET", parts.path.rstrip("/") + path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        status = resp.status
        err = None if status == 200 else "HTTP %d: %s" % (status, data[:200].decode("utf-8", "replace"))
        return {"ok": status == 200, "status": status, "error": err, "body": data.decode("utf-8", "replace"),
                "seconds": round(time.monotonic() - t0, 3)}
    except (OSError, http.client.HTTPException) as exc:
        kind = "timeout" if isinstance(exc, (TimeoutError, OSError)) and "timed out" in str(exc) else "no answer"
        return {"ok": False, "status": 0, "error": "%s after %.1f s: %s" % (kind, time.monotonic() - t0, exc),
                "body": "", "seconds": round(time.monotonic() - t0, 3)}
    finally:
        conn.close()


def unit_props(unit):
    out = subprocess.run(["systemctl", "show", "-p", ",".join(UNIT_PROPS), "--", unit],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def log(priority, message, data=None):
    """One journal line (journald reads the <N> prefix of a unit's stdout as the priority)."""
    line = "<%d>vllm-watchdog: %s" % (priority, message)
    if data is not None:
        line += " " + json.dumps(data, sort_keys=True, default=str)
    print(line, flush=True)


def load_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def save_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def api_in_flight(answer):
    """The /load answer ({"server_load": N}: the requests the API server holds) -> N, or None."""
    if not answer.get("ok"):
        return None
    try:
        return max(0, int(json.loads(answer["body"])["server_load"]))
    except (ValueError, TypeError, KeyError):
        return None


def canary(base_url, key, timeout, moved=None):
    """A one-token completion to the first served model -> {ok, status, error, seconds, by}. ``moved``: asked about once
    a second while the canary waits; when it says the engine's progress counters moved, the wait ends as answered
    (by "progress" instead of "answer"): the engine is alive, whatever queue the canary waits in behind busy slots."""
    if moved is None:
        return dict(_canary(base_url, key, timeout), by="answer")
    result = {}
    t0 = time.monotonic()
    sender = threading.Thread(target=lambda: result.update(_canary(base_url, key, timeout)), daemon=True)
    sender.start()
    while True:
        sender.join(1.0)
        if not sender.is_alive():
            return dict(result, by="answer")
        if moved():
            return {"ok": True, "status": 0, "error": None, "seconds": round(time.monotonic() - t0, 3), "by": "progress"}


def _canary(base_url, key, timeout):
    t0 = time.monotonic()
    models = http_get(base_url, "/v1/models", timeout, key)
    model = None
    if models["ok"]:
        try:
            model = (json.loads(models["body"]).get("data") or [{}])[0].get("id")
        except (ValueError, AttributeError, IndexError):
            model = None
    if model is None:
        return {"ok": False, "status": models["status"], "error": "GET /v1/models: %s" % (
            models["error"] or "no model listed"), "seconds": models["seconds"]}
    left = max(1.0, timeout - (time.monotonic() - t0))
    res = http_get(base_url, "/v1/completions", left, key,
                   {"model": model, "prompt": CANARY_PROMPT, "max_tokens": 1, "temperature": 0})
    return {"ok": res["ok"], "status": res["status"], "error": res["error"],
            "seconds": round(time.monotonic() - t0, 3)}


def tool_canary(base_url, key, timeout):
    """A forced tool call (tool_choice required, one tool without parameters, a few tokens) to the first served model,
    not streamed -> {ok, status, error, seconds, tool_calls}. An engine error is vLLM's 500; a 200 is an answer
    whatever it holds (a reasoning model may spend the tokens before the call: not the engine's failure)."""
    t0 = time.monotonic()
    models = http_get(base_url, "/v1/models", timeout, key)
    try:
        model = (json.loads(models["body"]).get("data") or [{}])[0].get("id") if models["ok"] else None
    except (ValueError, AttributeError, IndexError):
        model = None
    if model is None:
        return {"ok": False, "status": models["status"], "error": "GET /v1/models: %s" % (
            models["error"] or "no model listed"), "seconds": models["seconds"], "tool_calls": 0}
    left = max(1.0, timeout - (time.monotonic() - t0))
    res = http_get(base_url, "/v1/chat/completions", left, key,
                   {"model": model, "messages": [{"role": "user", "content": CANARY_PROMPT}], "tools": [CANARY_TOOL],
                    "tool_choice": "required", "max_tokens": 32, "temperature": 0})
    calls = 0
    if res["ok"]:
        try:
            calls = len(((json.loads(res["body"]).get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or [])
        except (ValueError, AttributeError, IndexError):
            calls = 0
    return {"ok": res["ok"], "status": res["status"], "error": res["error"],
            "seconds": round(time.monotonic() - t0, 3), "tool_calls": calls}


def textfile_families(writer, state, decision, unit, settings):
    """What one check saw, as Prometheus families (``writer``: the collection's textfile writer module): the hung
    suspicion (docs/watchdog.md), what the engine owes, verdicts by rule, restarts, held, checks."""
    lb = {"unit": unit}
    fam = writer.Family
    owed = state.get("owed") or {}
    out = [
        fam("gpuhost_watchdog_hung", "gauge", "1 while the watchdog suspects the engine hangs: it has not moved for "
            "unserved_seconds and owes requests (pending, held or arrived at the API server since it last moved); "
            "the restart follows when canary_failures canaries fail").add(bool(decision.get("hung")), **lb),
        fam("gpuhost_watchdog_engine_unmoved_seconds", "gauge", "seconds since a check last saw the engine's progress "
            "counters move").add(state.get("unmoved_s") if state.get("ready") else None, **lb),
        fam("gpuhost_watchdog_owed_requests", "gauge", "requests the engine owes, by kind: pending (its own gauges), "
            "api_held (held by the API server beyond those an answered canary explained), api_arrived (finished by "
            "the API server since the engine last moved)"),
        fam("gpuhost_watchdog_canary_failures", "gauge", "canaries failed in a row").add(
            int(state.get("canary_fails") or 0), **lb),
        fam("gpuhost_watchdog_tool_canary_failures", "gauge", "forced tool call canaries the engine failed in a "
            "row").add(int(state.get("tool_canary_fails") or 0), **lb),
        fam("gpuhost_watchdog_unanswered_checks", "gauge", "checks in a row whose /health or /metrics did not "
            "answer").add(int(state.get("fails") or 0), **lb),
        fam("gpuhost_watchdog_verdicts_total", "counter", "verdicts by rule (a held verdict counts at every check)"),
        fam("gpuhost_watchdog_restarts_total", "counter", "restarts the watchdog made").add(
            int(state.get("restarts_total") or 0), **lb),
        fam("gpuhost_watchdog_held", "gauge", "1 when a verdict was not acted on: max_restarts restarts in the "
            "last hour").add(bool(state.get("held")), **lb),
        fam("gpuhost_watchdog_dry_run", "gauge", "1 when the watchdog judges without acting").add(
            bool(settings.get("dry_run")), **lb),
        fam("gpuhost_watchdog_checks_total", "counter", "checks made").add(int(state.get("checks") or 0), **lb),
        fam("gpuhost_watchdog_last_check_timestamp_seconds", "gauge", "when the last check was made").add(
            state.get("last_check_at"), **lb),
        fam("gpuhost_watchdog_phase", "gauge", "the watchdog's phase (down, starting, ready, watching, "
            "verdict)").add(1, phase=decision.get("phase") or "-", **lb),
    ]
    for kind in ("pending", "api_held", "api_arrived"):
        out[2].add(owed.get(kind) if state.get("ready") and owed else None, kind=kind, **lb)
    verdicts = state.get("verdicts") or {}
    for rule in VERDICT_RULES:
        out[6].add(int(verdicts.get(rule, 0)), rule=rule, **lb)
    return out


def write_textfile(config, state, decision):
    """The check's state for node exporter's textfile collector, written atomically, only when the directory
    (config textfile_dir) exists; never stops the check (a failure is logged)."""
    directory = config.get("textfile_dir")
    if not directory or not os.path.isdir(directory):
        return None
    path = os.path.join(directory, config.get("textfile_name") or "gpuhost_watchdog.prom")
    try:
        writer = _load_by_path("gpuhost_textfile", config.get("textfile_writer")
                               or os.path.join(_HERE, TEXTFILE_WRITER))
        settings = {k: config.get(k) for k in DEFAULTS}
        writer.write_atomic(path, writer.render(textfile_families(writer, state, decision, config["unit"], settings)))
    except Exception as exc:  # pylint: disable=broad-except  # the metrics must never stop the check
        log(ERR, "cannot write %s (%s: %s)" % (path, type(exc).__name__, exc))
        return None
    return path


def engine_moved(base, timeout, reader, before):
    """Have the engine's progress counters moved since ``before`` (a fresh /metrics)? False when it does not answer."""
    got = http_get(base, "/metrics", timeout)
    return bool(got["ok"]) and before is not None and _moved(before, observe(got["body"], reader)["counters"])


def check(config):
    """One check on the box: sample, judge, (canaries), act, save, log. Returns the exit status (0)."""
    settings = {k: config.get(k) for k in DEFAULTS}
    unit = config["unit"]
    state_file = config["state_file"]
    state = load_json(state_file)
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        state = new_state()
    try:
        reader = load_metrics_reader(config.get("metrics_reader"))
    except Exception as exc:  # pylint: disable=broad-except  # no reader: judge nothing rather than misjudge
        log(ERR, "cannot load the /metrics reader (%s: %s): no check made" % (type(exc).__name__, exc))
        return 1
    timeout = float(settings["timeout"] or DEFAULTS["timeout"])
    base = config["base_url"]

    def look():
        props = unit_props(unit)
        sample = {"now": time.monotonic(), "wall": time.time(), "unit": props}
        if props.get("ActiveState") == "active":
            sample["health"] = {k: v for k, v in http_get(base, "/health", timeout).items() if k != "body"}
            got = http_get(base, "/metrics", timeout)
            sample["metrics"] = {k: v for k, v in got.items() if k != "body"}
            if got["ok"]:
                sample["metrics"].update(observe(got["body"], reader))
                in_flight = api_in_flight(http_get(base, "/load", timeout))
                if in_flight is not None:
                    sample["metrics"]["api_in_flight"] = in_flight
        return sample

    sample = look()
    new, decision = judge(state, sample, settings)
    # The suspicion is on record (journal, textfile) before any canary goes, hence before any restart.
    write_textfile(config, new, decision)
    key = None
    sent = 0
    while decision["action"] == "canary" and sent < max(1, int(settings["canary_failures"] or 1)):
        if key is None:
            key = api_key(config)
        if sent > 0:
            # the previous canary failed: look again (the engine may have moved meanwhile), judge, and send the next
            # one at once, without waiting a period
            log(LEVELS[decision["level"]], decision["note"], sample.get("canary"))
            state = new
            sample = dict(look(), again=True)
            new, decision = judge(state, sample, settings)
            if decision["action"] != "canary":
                break
        before = (sample.get("metrics") or {}).get("counters")
        sample["canary"] = canary(base, key, float(settings["canary_timeout"] or 60),
                                  lambda before=before: engine_moved(base, timeout, reader, before))
        # judged when its answer came (the verdict's time is the restart's)
        sample = dict(sample, now=time.monotonic(), wall=time.time())
        sent += 1
        new, decision = judge(state, sample, settings)
    if decision["action"] == "tool_canary":
        if key is None:
            key = api_key(config)
        sample["tool_canary"] = tool_canary(base, key, float(settings["canary_timeout"] or 60))
        sample = dict(sample, now=time.monotonic(), wall=time.time())
        new, decision = judge(state, sample, settings)
    new["settings"] = settings
    new["unit"] = unit
    new["last_sample"] = {k: sample.get(k) for k in ("health", "metrics", "canary", "tool_canary")}
    new["last_decision"] = decision
    verdict = decision["verdict"]
    if verdict is not None:
        if decision["action"] == "hold":
            log(CRIT, "VERDICT %s on %s, but %d restarts were made in the last hour (max_restarts %s): NOT "
                "restarting; a person must look (journalctl -u %s)" % (
                    verdict["rule"], unit, verdict["restarts_last_hour"], settings["max_restarts"], unit), verdict)
        elif decision["action"] == "restart":
            log(ERR, "VERDICT %s: restarting %s (restart %d in the last hour, %d in all)" % (
                verdict["rule"], unit, verdict["restarts_last_hour"], new["restarts_total"]), verdict)
        else:
            log(WARNING, "VERDICT %s (dry run: not restarting %s)" % (verdict["rule"], unit), verdict)
    else:
        log(LEVELS[decision["level"]], decision["note"],
            sample.get("canary") if sample.get("canary") is not None else sample.get("tool_canary"))
    save_json(state_file, new)
    write_textfile(config, new, decision)
    if decision["action"] == "restart":
        # A hung engine cannot stop gracefully: SIGKILL to the whole cgroup first (systemd's SIGTERM would wait
        # TimeoutStopSec for it), then a restart, which also clears what is left.
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", "--", unit], capture_output=True, text=True,
                       check=False, timeout=30)
        # The watchdog's own budget (max_restarts) bounds its restarts: the unit's start counter is left to crashes.
        subprocess.run(["systemctl", "reset-failed", "--", unit], capture_output=True, text=True, check=False,
                       timeout=30)
        res = subprocess.run(["systemctl", "restart", "--", unit], capture_output=True, text=True, check=False,
                             timeout=float(config.get("restart_timeout") or 600))
        if res.returncode != 0:
            log(ERR, "systemctl restart %s failed (%d): %s" % (unit, res.returncode, res.stderr.strip()))
        else:
            log(NOTICE, "%s restarted" % unit, unit_props(unit))
    return 0


def status(config):
    """{config, state, timer: {UnitFileState, ActiveState}} (read-only)."""
    timer = config.get("timer")
    out = {"config": config, "state": load_json(config.get("state_file") or "", None), "timer": {}}
    if timer:
        res = subprocess.run(["systemctl", "show", "-p", "UnitFileState,ActiveState,LastTriggerUSec", "--", timer],
                             capture_output=True, text=True, check=False).stdout
        out["timer"] = dict(line.split("=", 1) for line in res.splitlines() if "=" in line)
    print(json.dumps(out, indent=1, sort_keys=True, default=str))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="vllm_watchdog.py", description=__doc__.split("\n", maxsplit=1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "status"):
        p = sub.add_parser(name)
        p.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    config = load_json(args.config)
    if not isinstance(config, dict):
        log(ERR, "cannot read the config %s" % args.config)
        return 1
    if args.cmd == "status":
        return status(config)
    if not config.get("enabled", True):
        log(INFO, "disabled in %s" % args.config)
        return 0
    return check(config)


if __name__ == "__main__":
    sys.exit(main())
