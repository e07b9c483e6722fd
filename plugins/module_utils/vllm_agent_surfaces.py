# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent level by surface: what each coding agent sends, with that surface's own SDK.

- ``chat``: ``/v1/chat/completions`` with the OpenAI SDK (Roo Code, Cline, opencode, Aider, any OpenAI
  client): vllm_agent.run_agent's sessions, with ``parallel_tool_calls: false`` as Roo Code sends it.
- ``responses``: ``/v1/responses`` with the OpenAI SDK, Codex's request shape: ``instructions``, a
  developer item and the user's items, function tools, ``store: false`` (the whole history resent),
  ``include: ["reasoning.encrypted_content"]``, ``parallel_tool_calls``, ``function_call`` /
  ``function_call_output`` items fed back; one extra request offers a freeform ``custom`` tool
  (Codex's ``apply_patch``) and reports what the server did with it.
- ``messages``: ``/v1/messages?beta=true`` with the Anthropic SDK, Claude Code's request shape: system
  blocks with ``cache_control``, tools with ``input_schema``, ``tool_use`` / ``tool_result`` blocks fed
  back, ``count_tokens``, and which auth header (``x-api-key`` or ``Authorization: Bearer``) the server
  takes.

Every surface runs the same sessions (sized by vllm_agent.plan_session, one forced tool call per session,
the history resent every turn) and returns vllm_agent.summarize_agent's figures plus its own facts.
"""
from __future__ import annotations

import json
import time

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_agent as va
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import ClientError, Endpoint

SURFACES = ("chat", "responses", "messages")
# The SDK each surface is sent with (a module of the vLLM venv: vLLM 0.28.0 depends on both).
SDK = {"chat": "openai", "responses": "openai", "messages": "anthropic"}
# What the server does with a freeform custom tool, and what that means for Codex.
CUSTOM_TOOL_OUTCOMES = {
    "custom_tool_call": "answered as a custom_tool_call item (what Codex expects)",
    "function_call": ("answered as a function_call item, not a custom_tool_call: vLLM's non-Harmony Responses "
                      "path (known upstream defect vllm-project/vllm#56418)"),
    "not_in_prompt": ("not offered to the model: the prompt has the same input tokens with and without it (vLLM's "
                      "non-Harmony Responses path renders only function tools; known upstream defect "
                      "vllm-project/vllm#56418); answered without a call of it"),
    "no_call": "offered to the model (the prompt grew with it) and answered without a call of it",
    "error": "refused",
}
# The upstream defect that a custom-tool outcome other than a custom_tool_call is reported as.
CUSTOM_TOOL_DEFECT = "vllm-project/vllm#56418"
_DEVELOPER = ("You are running in a sandbox with workspace-write access; ask before any command that needs the "
              "network. Keep answers short.")
_PATCH_GRAMMAR = ('start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
                  'end_patch: "*** End Patch" LF?\nhunk: "*** Update File: " /(.+)/ LF /(.+)/ LF\n%import common.LF\n')


def responses_tools():
    """The agent's tools as Responses function tools (flat: type, name, description, parameters).

    Without ``strict``: Codex sends ``strict: false``, and with it vLLM 0.28.0 constrains a forced call only to
    a JSON object, not to the tool's schema (seen: ``{}`` for a tool whose ``path`` is required; junk keys that
    never close on a random-weight model); without it the forced call follows the schema, as chat's does."""
    return [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
             "parameters": t["function"]["parameters"]} for t in va.TOOLS]


def messages_tools():
    """The agent's tools as Anthropic tools (name, description, input_schema)."""
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in va.TOOLS]


def forced_choice(surface, session):
    """The forced tool choice of a session in a surface's words: even sessions any tool, odd ones read_file."""
    if surface == "messages":
        return {"type": "any"} if session % 2 == 0 else {"type": "tool", "name": "read_file"}
    if surface == "responses":
        return "required" if session % 2 == 0 else {"type": "function", "name": "read_file"}
    return "required" if session % 2 == 0 else {"type": "function", "function": {"name": "read_file"}}


def judge_forced(rec, choice):
    """vllm_agent's judgement of a forced call, with the surface's choice turned into chat's words."""
    named = None
    if isinstance(choice, dict) and choice.get("type") != "any":
        named = choice.get("name") or (choice.get("function") or {}).get("name")
    return va._judge_forced(rec, {"function": {"name": named}} if named else "required")  # pylint: disable=protected-access


def _new_rec(max_tokens):
    return {"ttft_s": None, "e2e_s": None, "prompt_tokens": None, "completion_tokens": None, "max_tokens": max_tokens,
            "text": "", "reasoning_chars": 0, "tool_calls": [], "error": None, "message": None, "cached_tokens": None,
            "retries": 0}


def _field(obj, name, default=None):
    """An attribute of an SDK object or a key of a dict."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _fail(rec, exc, sdk, t0):
    rec["error"], rec["message"] = va._error_of(exc, sdk)  # pylint: disable=protected-access
    rec["e2e_s"] = time.perf_counter() - t0
    return rec


def responses_turn(client, sdk, model, instructions, items, max_tokens, sampling, tool_choice, timeout,
                   tools=None, parallel=True):
    """One streamed Responses turn as Codex sends it -> a record (see vllm_agent._turn) with ``items``:
    the output items of response.output_item.done (function calls with their call_id and arguments)."""
    rec = _new_rec(max_tokens)
    rec["items"] = []
    kwargs = {"model": model, "instructions": instructions, "input": items,
              "tools": responses_tools() if tools is None else tools, "max_output_tokens": max_tokens,
              "stream": True, "store": False, "include": ["reasoning.encrypted_content"],
              "parallel_tool_calls": parallel, "timeout": timeout}
    kwargs.update(sampling)
    kwargs["tool_choice"] = tool_choice if tool_choice is not None else "auto"
    t0 = time.perf_counter()
    completed = False
    try:
        stream, t0 = va.open_stream(client.responses.create, kwargs, sdk, rec)
        for event in stream:
            kind = _field(event, "type", "")
            if kind in ("response.output_text.delta", "response.function_call_arguments.delta",
                        "response.custom_tool_call_input.delta", "response.reasoning_text.delta"):
                va.first_token(rec, t0)
                if kind == "response.output_text.delta":
                    rec["text"] += _field(event, "delta", "") or ""
                elif kind == "response.reasoning_text.delta":
                    rec["reasoning_chars"] += len(_field(event, "delta", "") or "")
            elif kind == "response.output_item.done":
                item = _field(event, "item")
                item = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else dict(item or {})
                rec["items"].append(item)
                va.first_token(rec, t0)
                if item.get("type") == "function_call":
                    rec["tool_calls"].append({"id": item.get("call_id"), "name": item.get("name") or "",
                                              "arguments": item.get("arguments") or ""})
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                response = _field(event, "response")
                usage = _field(response, "usage")
                if usage is not None:
                    rec["prompt_tokens"] = _field(usage, "input_tokens")
                    rec["completion_tokens"] = _field(usage, "output_tokens")
                    details = _field(usage, "input_tokens_details")
                    rec["cached_tokens"] = _field(details, "cached_tokens") if details is not None else None
                if kind == "response.failed":
                    err = _field(response, "error")
                    rec["error"], rec["message"] = "failed", str(_field(err, "message", err))
                completed = True
            elif kind == "error":
                rec["error"], rec["message"] = "stream_error", str(_field(event, "message", event))
        rec["e2e_s"] = time.perf_counter() - t0
    except Exception as exc:  # pylint: disable=broad-except  # every failure is a counted, reported error
        return _fail(rec, exc, sdk, t0)
    if rec["error"] is None and not completed:
        rec["error"], rec["message"] = "incomplete", "the stream ended without response.completed"
    elif rec["error"] is None and rec["completion_tokens"] is None:
        rec["error"], rec["message"] = "incomplete", "response.completed carried no usage"
    return rec


def messages_turn(client, sdk, model, system, messages, max_tokens, sampling, tool_choice, timeout, betas):
    """One streamed Messages turn as Claude Code sends it (``/v1/messages?beta=true``, system blocks with
    cache_control) -> a record (see vllm_agent._turn) with ``content``: the assistant's blocks to resend."""
    rec = _new_rec(max_tokens)
    rec["content"] = []
    kwargs = {"model": model, "system": system, "messages": messages, "tools": messages_tools(),
              "max_tokens": max_tokens, "stream": True, "timeout": timeout, "betas": betas,
              "metadata": {"user_id": "gpuhost-verify"}}
    # The Anthropic SDK 2.x has no temperature / top_p arguments; vLLM takes them in the body.
    kwargs["extra_body"] = dict(sampling)
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    blocks = {}
    stopped = False
    t0 = time.perf_counter()
    try:
        stream, t0 = va.open_stream(client.beta.messages.create, kwargs, sdk, rec)
        for event in stream:
            kind = _field(event, "type", "")
            if kind == "message_start":
                usage = _field(_field(event, "message"), "usage")
                rec["prompt_tokens"] = _field(usage, "input_tokens")
                rec["cached_tokens"] = _field(usage, "cache_read_input_tokens")
            elif kind == "content_block_start":
                block = _field(event, "content_block")
                slot = {"type": _field(block, "type"), "text": "", "json": ""}
                if slot["type"] == "tool_use":
                    slot.update(id=_field(block, "id"), name=_field(block, "name") or "")
                blocks[_field(event, "index", len(blocks))] = slot
            elif kind == "content_block_delta":
                va.first_token(rec, t0)
                delta = _field(event, "delta")
                slot = blocks.setdefault(_field(event, "index", 0), {"type": "text", "text": "", "json": ""})
                dtype = _field(delta, "type")
                if dtype == "text_delta":
                    slot["text"] += _field(delta, "text", "") or ""
                elif dtype == "input_json_delta":
                    slot["json"] += _field(delta, "partial_json", "") or ""
                elif dtype == "thinking_delta":
                    rec["reasoning_chars"] += len(_field(delta, "thinking", "") or "")
            elif kind == "message_delta":
                usage = _field(event, "usage")
                if usage is not None:
                    rec["completion_tokens"] = _field(usage, "output_tokens")
                    if _field(usage, "input_tokens") is not None:
                        rec["prompt_tokens"] = _field(usage, "input_tokens")
            elif kind == "message_stop":
                stopped = True
            elif kind == "error":
                rec["error"], rec["message"] = "stream_error", str(_field(_field(event, "error"), "message", event))
        rec["e2e_s"] = time.perf_counter() - t0
    except Exception as exc:  # pylint: disable=broad-except  # every failure is a counted, reported error
        return _fail(rec, exc, sdk, t0)
    for key in sorted(blocks):
        slot = blocks[key]
        if slot["type"] == "tool_use":
            rec["tool_calls"].append({"id": slot.get("id"), "name": slot.get("name") or "", "arguments": slot["json"]})
        elif slot["type"] == "text":
            rec["text"] += slot["text"]
    if rec["error"] is None and not stopped:
        rec["error"], rec["message"] = "incomplete", "the stream ended without message_stop"
    elif rec["error"] is None and rec["completion_tokens"] is None:
        rec["error"], rec["message"] = "incomplete", "message_delta carried no output_tokens"
    return rec


def _session(surface, client, sdk, idx, conf, system, out):
    """One agent session on a Responses or Messages surface: the history resent each turn (store=false /
    no server state), the forced turn's calls answered with their results; stops at the first error."""
    history = []
    log = va.SessionLog(idx, conf, judge_forced)
    next_user = 0
    pending_results = False
    betas = ["interleaved-thinking-2025-05-14", "fine-grained-tool-streaming-2025-05-14"]
    system_blocks = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    for turn in range(conf["turns"]):
        if not pending_results:
            text = va.user_text(conf, idx, next_user)
            next_user += 1
            if surface == "responses":
                if turn == 0:
                    history.append({"role": "developer", "content": _DEVELOPER})
                history.append({"role": "user", "content": [{"type": "input_text", "text": text}]})
            else:
                history.append({"role": "user", "content": [{"type": "text", "text": text}]})
        choice = forced_choice(surface, idx) if turn == conf["tool_turn"] else None
        sampling = {"temperature": conf["temperature"], "top_p": conf["top_p"]}
        tokens = conf["tool_max_tokens"] if choice is not None else conf["max_tokens"]
        if surface == "responses":
            rec = responses_turn(client, sdk, conf["model"], system, list(history), tokens, sampling, choice,
                                 conf["request_timeout"])
        else:
            rec = messages_turn(client, sdk, conf["model"], system_blocks, list(history), tokens, sampling, choice,
                                conf["request_timeout"], betas)
        if not log.add(rec, turn, choice):
            break
        pending_results = bool(rec["tool_calls"])
        if surface == "responses":
            _feed_responses(history, rec, idx, turn)
        else:
            _feed_messages(history, rec, idx, turn)
    out[idx] = log.result()


def _feed_responses(history, rec, idx, turn):
    """What Codex resends with store=false: its output items (the text, each function_call) and one
    function_call_output per call (an error text for arguments that do not parse)."""
    if rec["text"]:
        history.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": rec["text"]}]})
    for n, call in enumerate(rec["tool_calls"]):
        call_id = call["id"] or "call_%d_%d_%d" % (idx, turn, n)
        args = va._json_object(call["arguments"])  # pylint: disable=protected-access
        history.append({"type": "function_call", "call_id": call_id, "name": call["name"] or "read_file",
                        "arguments": json.dumps(args if args is not None else {}, separators=(",", ":"))})
        history.append({"type": "function_call_output", "call_id": call_id,
                        "output": va._TOOL_RESULT if args is not None  # pylint: disable=protected-access
                        else "error: the arguments were not a JSON object"})


def _feed_messages(history, rec, idx, turn):
    """What Claude Code resends: the assistant's text and tool_use blocks, then a user turn of tool_result
    blocks (is_error for arguments that do not parse)."""
    content = []
    if rec["text"]:
        content.append({"type": "text", "text": rec["text"]})
    results = []
    for n, call in enumerate(rec["tool_calls"]):
        call_id = call["id"] or "toolu_%d_%d_%d" % (idx, turn, n)
        args = va._json_object(call["arguments"])  # pylint: disable=protected-access
        content.append({"type": "tool_use", "id": call_id, "name": call["name"] or "read_file",
                        "input": args if args is not None else {}})
        results.append({"type": "tool_result", "tool_use_id": call_id,
                        "content": va._TOOL_RESULT if args is not None  # pylint: disable=protected-access
                        else "error: the arguments were not a JSON object", "is_error": args is None})
    if not content:
        content.append({"type": "text", "text": "(no answer)"})
    history.append({"role": "assistant", "content": content})
    if results:
        history.append({"role": "user", "content": results})


def classify_custom(rec, without=None, name="apply_patch"):
    """The outcome of a turn that offered the freeform custom tool NAME (``without``: the same turn without it):
    custom_tool_call, function_call, not_in_prompt (no call, and the prompt did not grow with the tool),
    no_call or error (see CUSTOM_TOOL_OUTCOMES)."""
    if rec.get("error") is not None:
        return "error"
    types = [(i.get("type"), i.get("name")) for i in rec.get("items") or []]
    if ("custom_tool_call", name) in types:
        return "custom_tool_call"
    if ("function_call", name) in types:
        return "function_call"
    if (without and without.get("error") is None and isinstance(rec.get("prompt_tokens"), int)
            and rec.get("prompt_tokens") == without.get("prompt_tokens")):
        return "not_in_prompt"
    return "no_call"


def custom_tool_probe(client, sdk, model, instructions, conf):
    """Codex's apply_patch: a freeform custom tool (a Lark grammar) beside the function tools, tool_choice
    auto (as Codex sends it), and the same request without it (whether the tool reached the prompt).
    Returns {outcome, detail, known_defect, item_types, prompt_tokens: [without, with], error, message}."""
    tools = responses_tools() + [{
        "type": "custom", "name": "apply_patch",
        "description": "Use the apply_patch tool to edit files. The input is a patch in the apply_patch format.",
        "format": {"type": "grammar", "syntax": "lark", "definition": _PATCH_GRAMMAR}}]
    items = [{"role": "developer", "content": _DEVELOPER},
             {"role": "user", "content": [{"type": "input_text", "text": "Use apply_patch to fix the typo in README.md."}]}]
    sampling = {"temperature": conf["temperature"], "top_p": conf["top_p"]}
    without = responses_turn(client, sdk, model, instructions, items, 16, sampling, None, conf["request_timeout"])
    rec = responses_turn(client, sdk, model, instructions, items, conf["max_tokens"], sampling, None,
                         conf["request_timeout"], tools=tools)
    outcome = classify_custom(rec, without)
    detail = CUSTOM_TOOL_OUTCOMES[outcome]
    if outcome == "error":
        detail = "refused: %s %s" % (rec["error"], rec["message"])
    return {"outcome": outcome, "detail": detail,
            "known_defect": CUSTOM_TOOL_DEFECT if outcome in ("function_call", "not_in_prompt") else None,
            "item_types": sorted({i.get("type") for i in rec["items"] if i.get("type")}),
            "prompt_tokens": [without.get("prompt_tokens"), rec.get("prompt_tokens")],
            "error": rec["error"], "message": rec["message"]}


def auth_probe(base_url, model, api_key, timeout=30.0):
    """Which auth header the server takes on /v1/messages/count_tokens, each sent alone with a plain HTTP request
    (the Anthropic SDK 2.x sends its api_key as Authorization, so it cannot show what x-api-key gets):
    {x-api-key: status, bearer: status, accepted: [...], key_configured}. With no key configured the server takes
    any (both 200). A request that got no answer is reported by the error's name."""
    endpoint = Endpoint(base_url, api_key=None, timeout=timeout)
    key = api_key or "EMPTY"
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    found = {}
    for header, headers in (("x-api-key", {"x-api-key": key}), ("bearer", {"Authorization": "Bearer " + key})):
        try:
            found[header] = endpoint.request("POST", "/v1/messages/count_tokens", body, timeout=timeout,
                                             headers=dict(headers, **{"anthropic-version": "2023-06-01"}))[0]
        except ClientError as exc:
            found[header] = "%s: %s" % (exc.kind, exc.msg)
    found["accepted"] = [h for h in ("x-api-key", "bearer") if found.get(h) == 200]
    found["key_configured"] = bool(api_key)
    return found


def count_tokens_probe(client, model, system, conf):
    """count_tokens of the session's first request (system blocks, tools, the first user turn)."""
    try:
        got = client.beta.messages.count_tokens(
            model=model, system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            tools=messages_tools(), messages=[{"role": "user", "content": va.user_text(conf, 0, 0)}],
            betas=["token-counting-2024-11-01"])
        return {"input_tokens": _field(got, "input_tokens"), "error": None}
    except Exception as exc:  # pylint: disable=broad-except  # reported, fails the surface
        status = getattr(exc, "status_code", None)
        return {"input_tokens": None, "error": "%s %s" % (status or type(exc).__name__, exc)}


def run_surface(surface, sdk, base_url, model, api_key=None, sessions=4, turns=4, max_tokens=128,
                system_tokens=1500, max_model_len=None, temperature=0.7, top_p=0.95, seed=1234, tool_turn=2,
                request_timeout=300.0, get_text=None, post_json=None, run_id=None):
    """The agent level on one surface; vllm_agent.summarize_agent's figures plus ``surface``, ``sdk`` and
    the surface's own facts (``checks``)."""
    if surface not in SURFACES:
        raise ValueError("surface must be one of %s, got %r" % (", ".join(SURFACES), surface))
    if surface == "chat":
        result = va.run_agent(sdk, base_url, model, api_key=api_key, sessions=sessions, turns=turns,
                              max_tokens=max_tokens, system_tokens=system_tokens, max_model_len=max_model_len,
                              temperature=temperature, top_p=top_p, seed=seed, tool_turn=tool_turn,
                              request_timeout=request_timeout, get_text=get_text, post_json=post_json,
                              run_id=run_id)
        result.update(surface=surface, sdk=SDK[surface], path="/v1/chat/completions")
        result["checks"] = {"parallel_tool_calls": False, "reasoning_field": result.get("reasoning_field")}
        return result
    run_id = run_id or "%s-%x" % (surface, int(time.time() * 1000))

    def measure(sections):
        if post_json is None:
            return None
        try:
            status, obj = post_json("/tokenize", {"model": model, "tools": va.TOOLS, "add_generation_prompt": True,
                                                  "messages": [{"role": "system", "content": va.system_prompt(sections)}]})
        except Exception:  # pylint: disable=broad-except  # an estimate replaces the server's count
            return None
        return obj["count"] if status == 200 and isinstance(obj, dict) and isinstance(obj.get("count"), int) else None

    plan = va.plan_session(int(max_model_len) if max_model_len else 8192, turns, max_tokens, system_tokens, measure)
    system = va.system_prompt(plan["sections"])
    conf = {"model": model, "turns": int(turns), "max_tokens": plan["max_tokens"],
            "tool_max_tokens": plan["tool_max_tokens"], "temperature": temperature, "top_p": top_p,
            "seed": int(seed), "tool_turn": int(tool_turn) - 1, "request_timeout": request_timeout, "run_id": run_id}
    checks = {}
    if surface == "responses":
        client = sdk.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key or "EMPTY", max_retries=0)
        checks.update(instructions=True, developer_item=True, store=False, include=["reasoning.encrypted_content"])
    else:
        checks["auth"] = auth_probe(base_url, model, api_key, timeout=min(float(request_timeout), 30.0))
        # Bearer when the server takes it (vLLM 0.28.0 takes only Bearer), else x-api-key.
        if "bearer" in checks["auth"]["accepted"] or "x-api-key" not in checks["auth"]["accepted"]:
            client = sdk.Anthropic(base_url=base_url.rstrip("/"), auth_token=api_key or "EMPTY", max_retries=0)
            checks["auth_used"] = "bearer"
        else:
            client = sdk.Anthropic(base_url=base_url.rstrip("/"), api_key=api_key or "EMPTY", max_retries=0)
            checks["auth_used"] = "x-api-key"
        checks.update(beta_query=True, system_cache_control=True)
        checks["count_tokens"] = count_tokens_probe(client, model, system, conf)

    result = va.run_sessions(lambda idx, out: _session(surface, client, sdk, idx, conf, system, out), sessions,
                             get_text, plan, conf)
    if surface == "responses":
        checks["custom_tool"] = custom_tool_probe(client, sdk, model, system, conf)
    result.update(surface=surface, sdk=SDK[surface], checks=checks,
                  path="/v1/responses" if surface == "responses" else "/v1/messages?beta=true")
    return result


def surface_problems(result):
    """The surface's own checks that failed (beyond the turns and forced calls): count_tokens, the custom
    tool refused. A custom tool answered as a function call or not called is the known upstream defect,
    reported, not a failure."""
    problems = []
    checks = (result or {}).get("checks") or {}
    count = checks.get("count_tokens")
    if isinstance(count, dict) and count.get("error"):
        problems.append("count_tokens failed: %s" % count["error"])
    elif isinstance(count, dict) and not isinstance(count.get("input_tokens"), int):
        problems.append("count_tokens answered no input_tokens")
    auth = checks.get("auth")
    if isinstance(auth, dict) and not auth.get("accepted"):
        problems.append("the server took neither x-api-key nor Bearer (%s)" % auth)
    custom = checks.get("custom_tool")
    if isinstance(custom, dict) and custom.get("outcome") == "error":
        problems.append("the freeform custom tool was %s" % custom.get("detail"))
    return problems
