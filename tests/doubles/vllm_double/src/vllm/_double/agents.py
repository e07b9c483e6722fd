"""The agent surfaces of the vLLM test double: POST /v1/chat/completions, /v1/responses, /v1/messages and
/v1/messages/count_tokens, answered as vLLM 0.28.0 answers them (tests/fixtures/vllm-0.28.0/agent_surfaces.json:
the streaming events, tool blocks, usage, the error bodies in each API's shape).

The text comes from the simulated engine (its pace, its words); a tool call comes when one is forced
(tool_choice required / a named function / Anthropic's any or tool), with arguments that fill the tool's
required properties (vLLM constrains a forced call to the tool's schema), and "auto" never calls a tool (the
tiny model seldom does). A freeform custom tool on /v1/responses is left out of the prompt, as vLLM 0.28.0's
non-Harmony path does (vllm-project/vllm#56418). The prompt is the rendered request (system, messages, tools),
counted with the double's tokenizer; its blocks feed the prefix-cache counters.
"""
from __future__ import annotations

import json
import time
import uuid

# What vLLM 0.28.0 sends for a request the engine finished with "error" (GenerationError, code 500).
ENGINE_ERROR = {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}
AUTO_TOOL_ERROR = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:16]


def render(*parts) -> str:
    """The prompt the double counts and caches: every part as compact JSON, in order."""
    return "\n".join(json.dumps(p, sort_keys=True, separators=(",", ":")) for p in parts if p is not None)


def example_arguments(schema) -> dict:
    """Arguments that satisfy the required properties of a JSON schema (what a constrained call produces)."""
    schema = schema if isinstance(schema, dict) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    out = {}
    for name in schema.get("required") or []:
        kind = (props.get(name) or {}).get("type")
        out[name] = {"integer": 1, "number": 1, "boolean": False, "array": [], "object": {}}.get(kind, "src/a.py")
    return out


def function_tools(tools, style: str) -> list[dict]:
    """[{name, parameters}] of the offered function tools (chat: nested, responses: flat, messages: input_schema);
    a custom or built-in tool is not a function tool."""
    found = []
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        if style == "chat" and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            found.append({"name": tool["function"].get("name"), "parameters": tool["function"].get("parameters")})
        elif style == "responses" and tool.get("type") == "function":
            found.append({"name": tool.get("name"), "parameters": tool.get("parameters")})
        elif style == "messages" and "input_schema" in tool:
            found.append({"name": tool.get("name"), "parameters": tool.get("input_schema")})
    return found


def forced_tool(tool_choice, tools: list[dict]):
    """The tool a tool_choice forces ({name, parameters}), or None for auto/none/absent."""
    off = isinstance(tool_choice, dict) and tool_choice.get("type") in ("auto", "none")
    if not tools or tool_choice in (None, "auto", "none") or off:
        return None
    if isinstance(tool_choice, dict):
        name = tool_choice.get("name") or (tool_choice.get("function") or {}).get("name")
        if name:
            return next((t for t in tools if t["name"] == name), None)
    return tools[0]  # required / any: the first offered tool


def tool_for(handler, tools: list[dict], choice, auto: bool):
    """The tool ``choice`` forces (None: none), after vLLM's refusal of an automatic tool choice (``auto``: the request
    asks for one) on a server started without --enable-auto-tool-choice and a --tool-call-parser."""
    raw = handler.state.args.raw
    if tools and auto and not (raw.get("enable_auto_tool_choice") and raw.get("tool_call_parser")):
        handler._fail(400, AUTO_TOOL_ERROR)
    return forced_tool(choice, tools)


class Turn:
    """What the engine produced for one request: text pieces (as they came), a forced call, the usage."""

    def __init__(self, prompt_tokens: int, cached: int):
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.pieces: list[str] = []
        self.generated = 0
        self.finish = None
        self.call = None
        self.error = False  # the engine finished it with "error" (the forced_tool_call_error fault)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def run_to_end(handler, seq, tool) -> Turn:
    """The engine's whole answer, none of it sent as it comes (a request without stream, or a forced call)."""
    for _piece in generate(handler, seq, tool):
        pass
    return handler._agent_turn


def generate(handler, seq, tool):
    """Run the engine sequence; yield (piece, turn) as text comes (nothing for a forced call), then the turn."""
    turn = handler._agent_turn
    first = True
    for tokens, finish in handler._events(seq):
        if first:
            handler.state.observe_ttft(seq.first_token_at - seq.arrival)
            first = False
        turn.generated = seq.generated
        turn.finish = finish or turn.finish
        if tool is None:
            piece = "".join(t for _tid, t in tokens)
            turn.pieces.append(piece)
            yield piece
    turn.generated = seq.generated
    if tool is not None and handler.state.faults.get("forced_tool_call_error"):
        turn.error = True
        handler._engine_error_log(seq.request_id)
    elif tool is not None:
        turn.call = {"id": _id("chatcmpl-tool-"), "name": tool["name"],
                     "arguments": json.dumps(example_arguments(tool["parameters"]))}


# ----------------------------------------------------------------------------------------- chat


def chat(handler, body: dict) -> None:
    st = handler.state
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        handler._fail(400, "messages must be a non-empty list", "messages")
    tools = function_tools(body.get("tools"), "chat")
    choice = body.get("tool_choice", "auto" if tools else None)
    tool = tool_for(handler, tools, choice, choice == "auto")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    seq = handler._agent_submit(render(body.get("tools"), messages), max_tokens, tool)
    model, created, rid = st.args.names[0], int(time.time()), _id("chatcmpl-")
    turn = handler._agent_turn
    try:
        if not body.get("stream"):
            if run_to_end(handler, seq, tool).error:
                handler._engine_error()
            message = {"role": "assistant", "content": None if turn.call else turn.text, "reasoning": None,
                       "tool_calls": ([{"id": turn.call["id"], "type": "function",
                                        "function": {"name": turn.call["name"], "arguments": turn.call["arguments"]}}]
                                      if turn.call else [])}
            handler._send(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                                "choices": [{"index": 0, "message": message, "logprobs": None,
                                             "finish_reason": "tool_calls" if turn.call else turn.finish,
                                             "stop_reason": None}],
                                "usage": _chat_usage(turn)})
            st.success += 1
            return
        handler._sse_start()

        def chunk(delta, finish=None):
            handler._sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                          "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        chunk({"role": "assistant", "content": ""})
        for piece in generate(handler, seq, tool):
            chunk({"content": piece})
        if turn.error:  # vLLM's chat stream: the error as a data line, then [DONE]
            handler._sse({"error": ENGINE_ERROR})
            handler._sse_end(done=True, error=True)
            return
        if turn.call:
            chunk({"tool_calls": [{"id": turn.call["id"], "type": "function", "index": 0,
                                   "function": {"name": turn.call["name"], "arguments": turn.call["arguments"]}}]})
        chunk({}, "tool_calls" if turn.call else turn.finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            handler._sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                          "choices": [], "usage": _chat_usage(turn)})
        handler._sse_end(done=True)
    finally:
        st.engine.cancel(seq)


def _chat_usage(turn: Turn) -> dict:
    return {"prompt_tokens": turn.prompt_tokens, "total_tokens": turn.prompt_tokens + turn.generated,
            "completion_tokens": turn.generated, "prompt_tokens_details": None}


# ------------------------------------------------------------------------------------ responses


def responses(handler, body: dict) -> None:
    st = handler.state
    items = body.get("input")
    if not isinstance(items, (str, list)) or not items:
        handler._fail(400, "input must be a string or a non-empty list", "input")
    tools = function_tools(body.get("tools"), "responses")
    choice = body.get("tool_choice", "auto")
    tool = tool_for(handler, tools, choice, choice == "auto")
    # Only function tools reach the prompt (a custom tool does not: vllm-project/vllm#56418).
    prompt = render(body.get("instructions"), [t for t in body.get("tools") or [] if t.get("type") == "function"], items)
    seq = handler._agent_submit(prompt, body.get("max_output_tokens"), tool)
    turn = handler._agent_turn
    rid, created = _id("resp_"), int(time.time())
    base = {"id": rid, "created_at": created, "incomplete_details": None, "instructions": body.get("instructions"),
            "metadata": body.get("metadata"), "model": st.args.names[0], "object": "response", "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True), "temperature": body.get("temperature", 1.0),
            "tool_choice": choice, "tools": body.get("tools") or [], "top_p": body.get("top_p", 1.0),
            "background": False, "max_output_tokens": body.get("max_output_tokens"), "previous_response_id": None,
            "reasoning": None, "service_tier": "auto", "status": "in_progress", "text": None, "truncation": "disabled",
            "usage": None, "user": None}
    try:
        if not body.get("stream"):
            if run_to_end(handler, seq, tool).error:
                handler._engine_error()
            handler._send(200, _responses_final(base, turn))
            st.success += 1
            return
        handler._sse_start()
        counter = iter(range(1 << 30))

        def event(kind, **fields):
            fields.update(sequence_number=next(counter), type=kind)
            handler._sse(fields, event=kind)

        event("response.created", response=base)
        event("response.in_progress", response=base)
        if tool is None:
            mid = uuid.uuid4().hex[:16]
            event("response.output_item.added", output_index=0,
                  item={"id": mid, "content": [], "role": "assistant", "status": "in_progress", "type": "message"})
            event("response.content_part.added", content_index=0, item_id=mid, output_index=0,
                  part={"annotations": [], "text": "", "type": "output_text", "logprobs": []})
            for piece in generate(handler, seq, tool):
                event("response.output_text.delta", content_index=0, delta=piece, item_id=mid, logprobs=[],
                      output_index=0)
            part = {"annotations": [], "text": turn.text, "type": "output_text", "logprobs": None}
            event("response.output_text.done", content_index=0, item_id=mid, logprobs=[], output_index=0,
                  text=turn.text)
            event("response.content_part.done", content_index=0, item_id=mid, output_index=0, part=part)
            event("response.output_item.done", output_index=0,
                  item={"id": mid, "content": [part], "role": "assistant", "status": "completed", "type": "message"})
        else:
            if run_to_end(handler, seq, tool).error:
                event("error", code=ENGINE_ERROR["type"], message=ENGINE_ERROR["message"], param=None)
                handler._sse_end(done=False, error=True)
                return
            fid = uuid.uuid4().hex[:16]
            item = {"arguments": "", "call_id": "call_" + uuid.uuid4().hex[:16], "name": turn.call["name"],
                    "type": "function_call", "id": fid, "status": "in_progress"}
            event("response.output_item.added", item=dict(item), output_index=0)
            event("response.function_call_arguments.delta", delta=turn.call["arguments"], item_id=fid, output_index=0)
            event("response.function_call_arguments.done", arguments=turn.call["arguments"], item_id=fid,
                  output_index=0, name=turn.call["name"])
            item.update(arguments=turn.call["arguments"], status="completed")
            event("response.output_item.done", item=item, output_index=0)
        event("response.completed", response=_responses_final(base, turn))
        handler._sse_end(done=False)
    finally:
        st.engine.cancel(seq)


def _responses_final(base: dict, turn: Turn) -> dict:
    out = dict(base)
    if turn.call:
        out["output"] = [{"arguments": turn.call["arguments"], "call_id": turn.call["id"], "name": turn.call["name"],
                          "type": "function_call", "id": _id("fc_"), "status": "completed"}]
    else:
        out["output"] = [{"id": _id("msg_"), "content": [{"annotations": [], "text": turn.text, "type": "output_text",
                                                          "logprobs": None}],
                          "role": "assistant", "status": "completed", "type": "message"}]
    length = turn.finish == "length" and not turn.call
    out.update(status="incomplete" if length else "completed",
               incomplete_details={"reason": "max_output_tokens"} if length else None,
               usage={"input_tokens": turn.prompt_tokens,
                      "input_tokens_details": {"cached_tokens": turn.cached},
                      "output_tokens": turn.generated,
                      "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0},
                      "total_tokens": turn.prompt_tokens + turn.generated})
    return out


# ------------------------------------------------------------------------------------- messages


def _messages_prompt(body: dict) -> str:
    return render(body.get("system"), body.get("tools"), body.get("messages"))


def count_tokens(handler, body: dict) -> None:
    from vllm._double.server import count_text_tokens  # pylint: disable=import-outside-toplevel

    if not isinstance(body.get("messages"), list):
        handler._fail(400, "messages: Field required", "messages")
    tokens = count_text_tokens(_messages_prompt(body))
    handler._send(200, {"input_tokens": tokens, "context_management": {"original_input_tokens": tokens}})


def messages(handler, body: dict) -> None:
    st = handler.state
    if not isinstance(body.get("messages"), list) or not isinstance(body.get("max_tokens"), int):
        handler._fail(400, "messages and max_tokens: Field required", "messages")
    tools = function_tools(body.get("tools"), "messages")
    choice = body.get("tool_choice") or ({"type": "auto"} if tools else None)
    tool = tool_for(handler, tools, choice, isinstance(choice, dict) and choice.get("type") == "auto")
    seq = handler._agent_submit(_messages_prompt(body), body["max_tokens"], tool)
    turn = handler._agent_turn
    mid = _id("chatcmpl-")
    model = st.args.names[0]
    try:
        if not body.get("stream"):
            if run_to_end(handler, seq, tool).error:
                handler._engine_error()
            content = ([{"type": "tool_use", "id": turn.call["id"], "name": turn.call["name"],
                         "input": json.loads(turn.call["arguments"])}] if turn.call
                       else [{"type": "text", "text": turn.text}])
            handler._send(200, {"id": mid, "type": "message", "role": "assistant", "content": content, "model": model,
                                "stop_reason": _stop_reason(turn),
                                "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": turn.generated}})
            st.success += 1
            return
        handler._sse_start()

        def event(kind, **fields):
            handler._sse(dict(type=kind, **fields), event=kind)

        event("message_start", message={"id": mid, "type": "message", "role": "assistant", "content": [],
                                        "model": model, "stop_reason": None, "stop_sequence": None,
                                        "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": 0}})
        if tool is None:
            event("content_block_start", content_block={"type": "text", "text": ""}, index=0)
            for piece in generate(handler, seq, tool):
                event("content_block_delta", delta={"type": "text_delta", "text": piece}, index=0)
        else:
            if run_to_end(handler, seq, tool).error:
                event("error", error={"type": "internal_error", "message": ENGINE_ERROR["message"]})
                handler._sse_end(done=False, error=True)
                return
            event("content_block_start", content_block={"type": "tool_use", "id": turn.call["id"],
                                                        "name": turn.call["name"], "input": {}}, index=0)
            event("content_block_delta", delta={"type": "input_json_delta", "partial_json": turn.call["arguments"]},
                  index=0)
        event("content_block_stop", index=0)
        event("message_delta", delta={"stop_reason": _stop_reason(turn)},
              usage={"input_tokens": turn.prompt_tokens, "output_tokens": turn.generated})
        event("message_stop")
        handler._sse_end(done=False)
    finally:
        st.engine.cancel(seq)


def _stop_reason(turn: Turn) -> str:
    if turn.call:
        return "tool_use"
    return "max_tokens" if turn.finish == "length" else "end_turn"
