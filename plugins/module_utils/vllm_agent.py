# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Coding-agent sessions against an OpenAI-compatible server, sent with the OpenAI Python SDK.

One job: what a coding agent sends. N sessions at once, each M turns of streaming
``/v1/chat/completions`` with ``tools`` offered (``tool_choice`` left at its default, ``auto``),
``stream_options.include_usage``, each turn resending the session's whole history (a system
prompt, the tool definitions, the turns so far); one turn per session forces a tool call
(``tool_choice: required`` or a named function) and the next turn sends the tool's result back,
as agents do. The SDK is imported from the interpreter that runs this code (the vLLM venv's
python: vLLM depends on ``openai``), so the requests are the SDK's, not a hand-written client's.

A turn that fails at the transport before any byte of an answer (open_stream: the SDK's
APIConnectionError from the call that sends the request, not a timeout) is sent again as the SDK
itself would with its default ``max_retries`` (vllm_http.retry_delay), and counted in the turn's
``retries``; the SDK's own retries stay off (``max_retries=0``), as they would also resend error
statuses (408, 409, 429, 5xx), which the verification reports as the failures they are.
"""
from __future__ import annotations

import json
import threading
import time

from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import samples as _metric_samples
from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import total as _metric_total
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import MAX_RETRIES, retry_delay
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_stats import summarize

# What a coding agent offers: the usual file and shell tools, with JSON-schema parameters.
TOOLS = [
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a file of the repository and return its text.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "maxLength": 64, "description": "Path relative to the repository root."},
            "start_line": {"type": "integer", "minimum": 1, "maximum": 99999, "description": "First line (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "maximum": 99999, "description": "Last line."}},
            "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Replace the whole text of a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "maxLength": 64}, "content": {"type": "string", "maxLength": 64}},
            "required": ["path", "content"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "run_command",
        "description": "Run a shell command in the repository and return its output and exit status.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "maxLength": 64},
            "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600}},
            "required": ["command"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_code",
        "description": "Search the repository for a regular expression; return matching lines.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "maxLength": 64}, "glob": {"type": "string", "maxLength": 32}},
            "required": ["pattern"], "additionalProperties": False}}},
]
# The reply budget of the forced tool-call turn (a call's JSON must close within it).
TOOL_TURN_MIN_TOKENS = 512
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]

_RULES = (
    "You are a coding agent working in a git repository on the user's machine. Read the code before "
    "you change it, keep changes small, run the tests after each change and report what you ran. "
    "Use the tools to read files, search the code, write files and run commands; never invent a "
    "file's content. When a command fails, read its output and fix the cause, not the symptom. "
    "Prefer the project's own conventions: its formatter, its test runner, its naming. "
)
_USER_TURNS = (
    "Session {s}: the unit tests of the parser fail after the last refactor. Find out why.",
    "Look at the function that splits the input into tokens and tell me what changed.",
    "Write a fix and a test that fails without it.",
    "Run the whole test suite and summarize the result.",
    "Now update the changelog with one line about the fix.",
    "Check that the linter is clean on the files you touched.",
)


def system_prompt(sections):
    """An agent's system prompt: the rules, then ``sections`` numbered repository notes."""
    notes = "".join(
        "\n## Note %d\nThe module mod_%d handles step %d of the pipeline; its tests live in tests/test_mod_%d.py "
        "and it must stay free of network access. " % (n, n, n, n) for n in range(1, sections + 1)
    )
    return _RULES + notes


def prefix_cache_counters(metrics_text):
    """{'hits': float, 'queries': float} summed over label sets from /metrics text; None when absent."""
    parsed = _metric_samples(metrics_text or "")
    found = {"hits": _metric_total(parsed, "vllm:prefix_cache_hits_total"),
             "queries": _metric_total(parsed, "vllm:prefix_cache_queries_total")}
    if found["hits"] is None or found["queries"] is None:
        return None
    return found


def hit_rate(before, after):
    """The prefix-cache hit rate over a window (the counters' deltas), None when unknown or no query."""
    if not before or not after:
        return None
    queries = after["queries"] - before["queries"]
    if queries <= 0:
        return None
    return round((after["hits"] - before["hits"]) / queries, 4)


def plan_session(max_model_len, turns, max_tokens, system_tokens, measure):
    """Size a session to fit the context: {sections, max_tokens, system_tokens, budget}.

    ``measure(sections)`` -> prompt tokens of the system prompt with that many notes plus the tool
    definitions (the server's /tokenize), or None when it cannot say (then 1 token per 4 characters).
    Every turn may add a user message (~40 tokens), an assistant reply of ``max_tokens`` (counted
    1.5x: a sampled reply re-tokenizes longer) and, on the tool turn, a tool result (~120 tokens).
    """
    def per_turn(tokens):
        return 40 + int(1.5 * tokens) + 16

    tool_result = 120
    target = min(int(system_tokens), max(64, int(max_model_len) // 3))

    def size(sections):
        got = measure(sections)
        if got is None:
            got = len(system_prompt(sections) + json.dumps(TOOLS)) // 4
        return got

    base = size(0)
    one = max(1, size(1) - base)
    sections = max(0, (target - base) // one)
    system = size(sections)
    tokens = int(max_tokens)
    tool = TOOL_TURN_MIN_TOKENS

    def need(tokens, tool):
        # The forced call's reply may be longer than a turn's; it is resent compact (its parsed arguments).
        return system + turns * per_turn(tokens) + tool_result + max(tokens, tool)

    while tokens > 16 and need(tokens, tool) > max_model_len:
        tokens = max(16, tokens // 2)
    while sections > 0 and need(tokens, tool) > max_model_len:
        sections = sections // 2
        system = size(sections)
    if need(tokens, tool) > max_model_len:
        # A small context: the forced call gets what is left.
        tool = max(tokens, max_model_len - need(tokens, 0) + tokens)
    budget = need(tokens, tool)
    return {"sections": sections, "max_tokens": tokens, "tool_max_tokens": max(tokens, tool),
            "system_tokens": system, "budget_tokens": budget, "fits": budget <= max_model_len}


def _error_of(exc, openai):
    """(kind, message) of an SDK exception: the HTTP status and the server's own text."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = None
        if isinstance(body, dict):
            err = body.get("error", body)
            message = err.get("message") if isinstance(err, dict) else str(err)
        return str(exc.status_code), message or str(exc)
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", str(exc)
    if isinstance(exc, openai.APIConnectionError):
        return "connection", str(exc)
    return "stream_error", "%s: %s" % (type(exc).__name__, exc)


def transport_hiccup(exc, sdk):
    """An SDK error that means no byte of an answer came: APIConnectionError (connection refused or reset, the
    server closing a kept-alive connection without answering), not its subclass APITimeoutError."""
    return isinstance(exc, sdk.APIConnectionError) and not isinstance(exc, sdk.APITimeoutError)


def open_stream(create, kwargs, sdk, rec, sleep=time.sleep):
    """``create(**kwargs)``, a streamed SDK call (it returns once the answer's head came), retried after a
    transport hiccup at most MAX_RETRIES times with the SDKs' pauses; counts ``rec["retries"]``.
    -> (stream, perf_counter time the answered attempt was sent)."""
    while True:
        t0 = time.perf_counter()
        try:
            return create(**kwargs), t0
        except Exception as exc:  # pylint: disable=broad-except  # anything but a hiccup is raised as it came
            if not transport_hiccup(exc, sdk) or rec["retries"] >= MAX_RETRIES:
                raise
            sleep(retry_delay(rec["retries"]))
            rec["retries"] += 1


def first_token(rec, t0):
    """A turn's time to first token: at its first piece of anything (text, reasoning, a tool call), from ``t0``."""
    if rec["ttft_s"] is None:
        rec["ttft_s"] = time.perf_counter() - t0


def _forced_choice(session):
    """Even sessions: tool_choice 'required'; odd ones: the named function read_file."""
    if session % 2 == 0:
        return "required"
    return {"type": "function", "function": {"name": "read_file"}}


def _turn(client, openai, model, messages, max_tokens, sampling, tool_choice, timeout):
    """One streamed turn -> a record (ttft_s, e2e_s, usage, text, tool_calls, error)."""
    rec = {"ttft_s": None, "e2e_s": None, "prompt_tokens": None, "completion_tokens": None, "max_tokens": max_tokens,
           "text": "", "reasoning_chars": 0, "tool_calls": [], "error": None, "message": None, "retries": 0}
    # parallel_tool_calls false: what Roo Code sends (one call per turn).
    kwargs = {"model": model, "messages": messages, "tools": TOOLS, "max_tokens": max_tokens, "stream": True,
              "stream_options": {"include_usage": True}, "parallel_tool_calls": False, "timeout": timeout}
    kwargs.update(sampling)
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    calls = {}
    t0 = time.perf_counter()
    try:
        stream, t0 = open_stream(client.chat.completions.create, kwargs, openai, rec)
        for chunk in stream:
            if chunk.usage is not None:
                rec["prompt_tokens"] = chunk.usage.prompt_tokens
                rec["completion_tokens"] = chunk.usage.completion_tokens
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is None:
                    continue
                reasoning = None
                for field in ("reasoning", "reasoning_content"):  # vLLM 0.28.0: reasoning; Cline reads the other
                    if getattr(delta, field, None):
                        reasoning = getattr(delta, field)
                        rec.setdefault("reasoning_fields", set()).add(field)
                if delta.content or reasoning or delta.tool_calls:
                    first_token(rec, t0)
                if delta.content:
                    rec["text"] += delta.content
                if reasoning:
                    rec["reasoning_chars"] += len(reasoning)
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index or 0, {"id": None, "name": "", "arguments": ""})
                    if call.id:
                        slot["id"] = call.id
                    if call.function is not None:
                        if call.function.name:
                            slot["name"] += call.function.name
                        if call.function.arguments:
                            slot["arguments"] += call.function.arguments
        rec["e2e_s"] = time.perf_counter() - t0
    except Exception as exc:  # pylint: disable=broad-except  # every failure is a counted, reported error
        rec["error"], rec["message"] = _error_of(exc, openai)
        rec["e2e_s"] = time.perf_counter() - t0
    rec["tool_calls"] = [calls[k] for k in sorted(calls)]
    if rec["error"] is None and rec["completion_tokens"] is None:
        rec["error"], rec["message"] = "incomplete", "the stream ended without a usage chunk"
    return rec


_TOOL_RESULT = "1  import re\n2  \n3  def split_tokens(text):\n4      return re.findall(r'\\w+|\\S', text)\n"


def _json_object(text):
    """The arguments as a dict (agents keep them parsed and send them back re-serialized), else None."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _cut_at_budget(rec):
    """Whether the turn's reply used its whole token budget (the server cut it at ``max_tokens``)."""
    used, budget = rec.get("completion_tokens"), rec.get("max_tokens")
    return isinstance(used, int) and isinstance(budget, int) and budget > 0 and used >= budget


def _judge_forced(rec, choice):
    """A forced call is answered with tool_calls naming the function, arguments parsing as a JSON object (or cut
    at the turn's token budget: the model wrote past it, vLLM closed the cut JSON)."""
    if rec["error"] is not None:
        return False, "the request failed (%s): %s" % (rec["error"], rec["message"])
    if not rec["tool_calls"]:
        return False, "no tool_calls in the answer (content: %r)" % rec["text"][:120]
    call = rec["tool_calls"][0]
    wanted = choice["function"]["name"] if isinstance(choice, dict) else None
    if wanted and call["name"] != wanted:
        return False, "tool_choice named %s but the call names %r" % (wanted, call["name"])
    if call["name"] not in TOOL_NAMES:
        return False, "the call names %r, not an offered tool (%s)" % (call["name"], ", ".join(TOOL_NAMES))
    try:
        args = json.loads(call["arguments"] or "")
    except ValueError as exc:
        if _cut_at_budget(rec):
            # The server forced the call; the model's arguments ran past the probe's reply budget, and vLLM 0.28.0
            # closes a cut call's JSON itself (not always validly). A model's limit, not the server's setup.
            return True, "%s(cut at the %d-token budget: %s)" % (call["name"], rec["max_tokens"], exc)
        return False, "the arguments of %s are not JSON (%s): %r" % (call["name"], exc, call["arguments"][:120])
    if not isinstance(args, dict):
        return False, "the arguments of %s are not a JSON object: %r" % (call["name"], call["arguments"][:120])
    return True, "%s(%s)" % (call["name"], ", ".join(sorted(args)))


def choice_label(choice):
    """'auto', 'required', 'any' or 'function:NAME' / 'tool:NAME' for the report (a tool choice in any surface's
    words: chat's, the Responses API's, the Messages API's)."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "any":
        return "any"
    name = choice.get("name") or (choice.get("function") or {}).get("name")
    return "%s:%s" % ("tool" if choice.get("type") == "tool" else "function", name)


def user_text(conf, idx, n):
    """Session ``idx``'s n-th user message (0-based); the first one starts with the run and the session, so that
    sessions share only the system prompt."""
    text = _USER_TURNS[n % len(_USER_TURNS)].format(s=idx)
    return "[%s/%d] %s" % (conf["run_id"], idx, text) if n == 0 else text


class SessionLog:
    """What one session reports, on every surface: its turns' records and the verdict on its forced tool call
    (``judge(rec, choice) -> (ok, detail)``, the surface's judgement)."""

    def __init__(self, idx, conf, judge):
        self.idx = idx
        self.conf = conf
        self.judge = judge
        self.turns = []
        self.forced = None

    def add(self, rec, turn, choice):
        """Record turn ``turn`` (0-based), sent with tool choice ``choice`` (None: auto; else the forced turn) ->
        whether the session goes on (it stops at the first error)."""
        rec.update({"session": self.idx, "turn": turn + 1, "tool_choice": choice_label(choice)})
        if choice is not None:
            ok, detail = self.judge(rec, choice)
            self.forced = {"session": self.idx, "turn": turn + 1, "tool_choice": rec["tool_choice"], "ok": ok,
                           "detail": detail}
        self.turns.append(rec)
        return rec["error"] is None

    def result(self):
        forced = self.forced
        if forced is None and self.conf["tool_turn"] < self.conf["turns"]:
            forced = {"session": self.idx, "turn": self.conf["tool_turn"] + 1, "tool_choice": "", "ok": False,
                      "detail": "the session ended before its forced tool-call turn"}
        return {"turns": self.turns, "forced": forced}


def _session(client, openai, idx, conf, system, out):
    """One agent session: turns in order, the history resent each time; stops at the first error."""
    messages = [{"role": "system", "content": system}]
    log = SessionLog(idx, conf, _judge_forced)
    next_user = 0
    for turn in range(conf["turns"]):
        if turn == 0 or messages[-1]["role"] != "tool":
            messages.append({"role": "user", "content": user_text(conf, idx, next_user)})
            next_user += 1
        choice = _forced_choice(idx) if turn == conf["tool_turn"] else None
        sampling = {"temperature": conf["temperature"], "top_p": conf["top_p"], "seed": conf["seed"] + idx * 100 + turn}
        rec = _turn(client, openai, conf["model"], list(messages),
                    conf["tool_max_tokens"] if choice is not None else conf["max_tokens"], sampling, choice,
                    conf["request_timeout"])
        if not log.add(rec, turn, choice):
            break
        # The history an agent keeps: its reply, and the result of every tool it called (a call whose
        # arguments do not parse is kept with {} and answered with an error, as agents answer it).
        reply = {"role": "assistant", "content": rec["text"] or None}
        results = []
        for n, c in enumerate(rec["tool_calls"]):
            call_id = c["id"] or "call_%d_%d_%d" % (idx, turn, n)
            args = _json_object(c["arguments"])
            valid = args is not None
            reply.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function",
                 "function": {"name": c["name"] or "read_file",
                              "arguments": json.dumps(args, separators=(",", ":")) if valid else "{}"}})
            results.append({"role": "tool", "tool_call_id": call_id,
                            "content": _TOOL_RESULT if valid else "error: the arguments were not a JSON object"})
        messages.append(reply)
        messages.extend(results)
    out[idx] = log.result()


def run_agent(openai, base_url, model, api_key=None, sessions=4, turns=4, max_tokens=128, system_tokens=1500,
              max_model_len=None, temperature=0.7, top_p=0.95, seed=1234, tool_turn=2, request_timeout=300.0,
              get_text=None, post_json=None, run_id=None):
    """Run the sessions; return the agent level's figures (see the vllm_agent_probe module's RETURN).

    ``openai``: the imported SDK module. ``get_text(path)`` -> (status, text) reads /metrics;
    ``post_json(path, payload)`` -> (status, obj) asks /tokenize. Both may be None (no hit rate; a
    character estimate of the prompt size).
    """
    run_id = run_id or "agent-%x" % int(time.time() * 1000)

    def measure(sections):
        if post_json is None:
            return None
        try:
            status, obj = post_json("/tokenize", {"model": model, "tools": TOOLS, "add_generation_prompt": True,
                                                  "messages": [{"role": "system", "content": system_prompt(sections)}]})
        except Exception:  # pylint: disable=broad-except  # an estimate replaces the server's count
            return None
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("count"), int):
            return obj["count"]
        return None

    limit = int(max_model_len) if max_model_len else 8192
    plan = plan_session(limit, turns, max_tokens, system_tokens, measure)
    system = system_prompt(plan["sections"])
    conf = {"model": model, "turns": int(turns), "max_tokens": plan["max_tokens"],
            "tool_max_tokens": plan["tool_max_tokens"], "temperature": temperature,
            "top_p": top_p, "seed": int(seed), "tool_turn": int(tool_turn) - 1, "request_timeout": request_timeout,
            "run_id": run_id}
    client = openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key or "EMPTY", max_retries=0)
    return run_sessions(lambda idx, out: _session(client, openai, idx, conf, system, out), sessions, get_text,
                        plan, conf)


def read_prefix_cache_counters(get_text):
    """The prefix-cache counters from the server's /metrics through ``get_text`` (None without one, or when
    /metrics does not answer 200: no hit rate, said in the result)."""
    if get_text is None:
        return None
    try:
        status, text = get_text("/metrics")
    except Exception:  # pylint: disable=broad-except  # no hit rate, said in the result
        return None
    return prefix_cache_counters(text) if status == 200 else None


def run_sessions(session, sessions, get_text, plan, conf):
    """``sessions`` agent sessions at once (``session(idx, out)`` fills ``out[idx]``), the prefix-cache counters
    read before and after; summarize_agent's figures. One runner for every surface."""
    before = read_prefix_cache_counters(get_text)
    out = {}
    t0 = time.perf_counter()
    threads = [threading.Thread(target=session, args=(i, out), daemon=True) for i in range(int(sessions))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    after = read_prefix_cache_counters(get_text)
    return summarize_agent(out, plan, before, after, wall, conf)


def summarize_agent(out, plan, before, after, wall_s, conf):
    """The figures of the level from the sessions' records."""
    records = [rec for idx in sorted(out) for rec in out[idx]["turns"]]
    forced = [out[idx]["forced"] for idx in sorted(out) if out[idx]["forced"] is not None]
    failed = [r for r in records if r["error"] is not None]
    errors = {}
    for r in failed:
        errors[r["error"]] = errors.get(r["error"], 0) + 1
    messages = []
    for r in failed:
        text = "HTTP %s: %s" % (r["error"], r["message"]) if r["error"].isdigit() else "%s: %s" % (r["error"], r["message"])
        if text not in messages:
            messages.append(text)
    ok = [r for r in records if r["error"] is None]
    first = [r["ttft_s"] for r in ok if r["turn"] == 1]
    later = [r["ttft_s"] for r in ok if r["turn"] > 1]
    last_prompt = max((r["prompt_tokens"] or 0 for r in ok), default=None)
    return {
        "sessions": len(out),
        "turns": conf["turns"],
        "requests": len(records),
        "ok": len(ok),
        "errors": dict(sorted(errors.items())),
        "errors_total": len(failed),
        "error_messages": messages[:5],
        # Turns sent again after a transport hiccup before any answer (open_stream); not failures.
        "retries": sum(r.get("retries", 0) for r in records),
        "ttft_first_s": summarize(first),
        "ttft_later_s": summarize(later),
        "output_tokens": sum(r["completion_tokens"] or 0 for r in ok),
        "prompt_tokens_last_turn": last_prompt,
        "reasoning_chars": sum(r["reasoning_chars"] for r in ok),
        # The delta field(s) that carried reasoning (chat), None when none came.
        "reasoning_field": ", ".join(sorted(set().union(*[r.get("reasoning_fields") or set() for r in ok]))) or None,
        "forced_tool_calls": forced,
        "forced_ok": sum(1 for f in forced if f["ok"]),
        "prefix_cache": {"before": before, "after": after, "hit_rate": hit_rate(before, after)},
        "plan": plan,
        "max_tokens": conf["max_tokens"],
        "temperature": conf["temperature"],
        "top_p": conf["top_p"],
        "wall_s": round(wall_s, 3),
    }
