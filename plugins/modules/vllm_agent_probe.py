#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_agent_probe
short_description: Send a vLLM server what a coding agent sends - chat, Responses or Messages with tools
version_added: "1.2.0"
description:
  - O(surface) picks the API and the agent whose request shape is sent - V(chat) (C(/v1/chat/completions),
    the OpenAI SDK - Roo Code, Cline, opencode, any OpenAI client), V(responses) (C(/v1/responses), the
    OpenAI SDK - Codex) or V(messages) (C(/v1/messages?beta=true), the Anthropic SDK - Claude Code). The
    description below is the V(chat) surface; the others send the same sessions in their own words (see
    the notes).
  - Runs O(sessions) coding-agent sessions at once against an OpenAI-compatible server (vLLM), each
    of O(turns) turns of streaming C(POST /v1/chat/completions) with C(stream_options.include_usage),
    sampled (O(temperature), O(top_p), a seed per turn), C(tools) offered (four file and shell tools)
    and C(tool_choice) left at its default (C(auto)), as agents send it.
  - Every turn resends the session's whole history - a system prompt of about O(system_tokens)
    tokens shared by all sessions, the tool definitions, the turns so far - so the server's prefix
    cache is exercised as an agent exercises it. The session is sized to fit O(max_model_len)
    (the system prompt measured with the server's C(/tokenize); the reply length shrunk when needed).
  - Turn O(tool_turn) of each session forces a tool call (C(tool_choice=required) in even sessions,
    the named function C(read_file) in odd ones); the call must name an offered function (the named
    one when named) with arguments that parse as a JSON object. The next turn sends the tool's
    result back (a C(tool) message), as agents do.
  - The requests are sent with the OpenAI Python SDK of the interpreter that runs the module. Run it
    with the vLLM venv's python (C(ansible_python_interpreter)) - vLLM 0.28.0 depends on C(openai),
    so the SDK is on every box that runs vLLM.
  - Reads the prefix-cache counters (C(vllm:prefix_cache_hits_total), C(vllm:prefix_cache_queries_total))
    on C(/metrics) before and after and returns the hit rate over the level.
  - A turn that fails at the transport before any byte of an answer (the SDK's C(APIConnectionError) from the
    call that sends it - a connection refused or reset, a kept-alive connection closed without an answer - not a
    timeout) is sent again as the SDKs do with their default C(max_retries) (at most 2, after 0.5 s then 1 s less
    up to 25 % jitter) and counted in RV(retries); error statuses, error events and timeouts are not retried.
  - Never changes anything (C(changed) is always V(false)); in check mode it sends nothing.
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.inference.vllm_server
requirements:
  - openai (the Python SDK; a dependency of vLLM, in the vLLM venv)
  - anthropic (the Python SDK, for O(surface=messages); a dependency of vLLM)
  - aiohttp (the plain requests - C(/metrics), C(/tokenize), the auth check; a dependency of vLLM)
options:
  surface:
    description:
      - The API, and so the agent, whose requests are sent (see the description).
    type: str
    choices: [chat, responses, messages]
    default: chat
  model:
    description:
      - The served model name to request.
    type: str
    required: true
  sessions:
    description:
      - Sessions at once (each one a thread with its own history).
    type: int
    default: 4
  turns:
    description:
      - Turns per session (requests per session, the tool result turn included).
    type: int
    default: 4
  tool_turn:
    description:
      - The turn (1-based) that forces a tool call. V(0) forces none.
    type: int
    default: 2
  max_tokens:
    description:
      - The largest reply per turn (C(max_tokens)); halved until the session fits O(max_model_len).
    type: int
    default: 128
  system_tokens:
    description:
      - The size of the system prompt with the tool definitions, in tokens (at most a third of O(max_model_len)).
    type: int
    default: 1500
  max_model_len:
    description:
      - The server's context length; the whole session is sized to fit it.
    type: int
    required: true
  temperature:
    description:
      - The temperature of every turn.
    type: float
    default: 0.7
  top_p:
    description:
      - The top_p of every turn.
    type: float
    default: 0.95
  seed:
    description:
      - The seed of session N's turn T is O(seed) + 100 N + T, so the load repeats.
    type: int
    default: 1234
  request_timeout:
    description:
      - Seconds one turn may take; over it the turn is counted under the error key C(timeout).
    type: float
    default: 300
attributes:
  check_mode:
    support: full
    details: Sends no request and returns C(skipped=true).
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - "V(chat) sends C(parallel_tool_calls: false) (as Roo Code does) and returns in RV(reasoning_field) the delta
    field that carried reasoning (vLLM 0.28.0: C(reasoning); Cline and older Roo Code read only C(reasoning_content))."
  - "V(responses) sends Codex's shape: C(instructions), a C(developer) item then C(user) items, function tools,
    C(store: false) (the whole history resent), C(include: [reasoning.encrypted_content]), C(parallel_tool_calls),
    C(function_call) and C(function_call_output) items fed back. Two more requests offer Codex's C(apply_patch) as a
    freeform C(custom) tool and the same without it; C(checks.custom_tool.outcome) (RV(checks)) says what the server did -
    C(custom_tool_call) (what Codex expects), C(function_call) or C(not_in_prompt) (the prompt did not grow with the
    tool - vLLM 0.28.0; both the known upstream defect vllm-project/vllm#56418, reported, not a problem),
    C(no_call) or C(error) (the request refused - a problem)."
  - "V(messages) sends Claude Code's shape with the Anthropic SDK's beta client (C(?beta=true), an C(anthropic-beta)
    list, C(metadata)): system blocks with C(cache_control), tools with C(input_schema), C(tool_use) and
    C(tool_result) blocks fed back; it also calls C(/v1/messages/count_tokens) and tries both auth headers
    (C(x-api-key) and C(Authorization: Bearer)) - C(checks.auth) (RV(checks)) says which the server takes (vLLM 0.28.0: Bearer
    only, vllm-project/vllm#51572); the sessions use one it takes."
  - "Error keys are the HTTP status as a string (V(400), V(503)), V(timeout), V(connection), V(incomplete)
    (the stream ended without its usage chunk) and V(stream_error). A session stops at its first failed turn."
  - A server started without C(--enable-auto-tool-choice) and C(--tool-call-parser) answers every turn with
    HTTP 400 (C("auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set));
    the text is returned in RV(error_messages).
seealso:
  - module: gpuhost.inference.vllm_probe
  - name: Connecting coding agents (docs/agents.md)
    description: What each surface proves for which agent, and the agents' configs.
    link: https://github.com/gpuhost/inference/blob/main/docs/agents.md
  - name: vLLM tool calling
    description: The server flags that turn tool calling on.
    link: https://docs.vllm.ai/en/latest/features/tool_calling.html
"""

EXAMPLES = r"""
- name: Four agent sessions of four turns against the local vLLM, with the venv's SDK
  gpuhost.inference.vllm_agent_probe:
    base_url: http://127.0.0.1:8000
    model: coder
    max_model_len: 131072
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  register: __vllm_verify_agent

- name: Show what the agent's user feels
  ansible.builtin.debug:
    msg: >-
      later turns TTFT p95 {{ __vllm_verify_agent.ttft_later_s.p95 }} s,
      prefix cache hit rate {{ __vllm_verify_agent.prefix_cache.hit_rate }}
"""

RETURN = r"""
skipped:
  description: V(true) in check mode (nothing was sent).
  returned: check mode
  type: bool
sessions:
  description: Sessions run.
  returned: success
  type: int
requests:
  description: Turns sent over all sessions.
  returned: success
  type: int
ok:
  description: Turns answered in full.
  returned: success
  type: int
errors:
  description: Failed turns by error key.
  returned: success
  type: dict
  sample: {"400": 4}
errors_total:
  description: Failed turns.
  returned: success
  type: int
retries:
  description: Turns sent again after a transport failure before any answer (not failures; see the description).
  returned: success
  type: int
error_messages:
  description: The distinct error texts (the server's own message with the status), at most five.
  returned: success
  type: list
  elements: str
ttft_first_s:
  description: Time to first token of the sessions' first turns, seconds (mean, p50, p90, p95, p99, min, max, n).
  returned: success
  type: dict
ttft_later_s:
  description: Time to first token of the later turns (the history resent), seconds, same keys.
  returned: success
  type: dict
output_tokens:
  description: Output tokens over the answered turns (from C(usage)).
  returned: success
  type: int
prompt_tokens_last_turn:
  description: The largest prompt of the level in tokens (a session's last turn, from C(usage)).
  returned: success
  type: int
reasoning_chars:
  description: Characters the server returned as reasoning; 0 without a reasoning parser.
  returned: success
  type: int
reasoning_field:
  description: V(chat) - the delta field(s) that carried reasoning (C(reasoning), C(reasoning_content)); null when none came.
  returned: success
  type: str
surface:
  description: The surface sent (O(surface)).
  returned: success
  type: str
path:
  description: The route the turns went to.
  returned: success
  type: str
  sample: /v1/messages?beta=true
sdk:
  description: The SDK that sent the requests (C(openai) or C(anthropic)).
  returned: success
  type: str
sdk_version:
  description: The version of that SDK.
  returned: success
  type: str
checks:
  description:
    - The surface's own facts. V(chat) - C(parallel_tool_calls), C(reasoning_field). V(responses) - C(instructions),
      C(developer_item), C(store), C(include), C(custom_tool) (C(outcome), C(detail), C(known_defect),
      C(item_types)). V(messages) - C(auth) (the status per header, C(accepted)), C(auth_used), C(count_tokens)
      (C(input_tokens) or C(error)), C(beta_query), C(system_cache_control).
  returned: success
  type: dict
problems:
  description: The surface's own checks that failed (count_tokens, no auth header taken, the custom tool refused).
  returned: success
  type: list
  elements: str
forced_tool_calls:
  description: One entry per session - session, turn, tool_choice, ok, detail (the call or why it failed).
  returned: success
  type: list
  elements: dict
forced_ok:
  description: Forced tool calls answered with a valid call.
  returned: success
  type: int
prefix_cache:
  description: The counters before and after (C(hits), C(queries)) and C(hit_rate), null when /metrics has none.
  returned: success
  type: dict
plan:
  description: How the session was sized - sections, max_tokens, system_tokens, budget_tokens, fits.
  returned: success
  type: dict
wall_s:
  description: Seconds from the first turn sent to the last session's end.
  returned: success
  type: float
openai_version:
  description: The version of the OpenAI SDK that sent the requests.
  returned: success
  type: str
  sample: 2.8.1
"""

import importlib
import json
import sys

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_agent_surfaces import SDK, run_surface, surface_problems
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import AIOHTTP_IMPORT_ERROR, HAS_AIOHTTP, SERVER_ARGUMENT_SPEC, ClientError, Endpoint


def main():
    module = AnsibleModule(
        argument_spec=dict(
            SERVER_ARGUMENT_SPEC,
            surface=dict(type="str", default="chat", choices=["chat", "responses", "messages"]),
            model=dict(type="str", required=True),
            sessions=dict(type="int", default=4),
            turns=dict(type="int", default=4),
            tool_turn=dict(type="int", default=2),
            max_tokens=dict(type="int", default=128, no_log=False),
            system_tokens=dict(type="int", default=1500, no_log=False),
            max_model_len=dict(type="int", required=True),
            temperature=dict(type="float", default=0.7),
            top_p=dict(type="float", default=0.95),
            seed=dict(type="int", default=1234),
            request_timeout=dict(type="float", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problems = []
    for key in ("sessions", "turns", "max_tokens", "system_tokens", "max_model_len"):
        if p[key] < 1:
            problems.append("%s must be at least 1, got %d" % (key, p[key]))
    if not 0 <= p["tool_turn"] <= p["turns"]:
        problems.append("tool_turn must be 0 (none) or a turn 1-%d, got %d" % (p["turns"], p["tool_turn"]))
    if not 0 <= p["temperature"] <= 2 or not 0 < p["top_p"] <= 1:
        problems.append("temperature must be 0-2 and top_p above 0 and at most 1")
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        ep = Endpoint(p["base_url"], api_key=p["api_key"], timeout=30)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=False, skipped=True)
    if not HAS_AIOHTTP:
        module.fail_json(msg=missing_required_lib("aiohttp", reason="reading /metrics and /tokenize (in every vLLM venv: "
                                                  "run vllm_agent_probe with the venv's python)"),
                         exception=AIOHTTP_IMPORT_ERROR)
    name = SDK[p["surface"]]
    try:
        sdk = importlib.import_module(name)  # the SDK of the interpreter that runs us
    except ImportError:
        module.fail_json(
            msg="the %s Python SDK cannot be imported by %s (surface %s): run vllm_agent_probe with the vLLM venv's "
                "python (ansible_python_interpreter: <venv>/bin/python); vLLM 0.28.0 depends on openai and anthropic"
                % (name, sys.executable, p["surface"]))

    def get_text(path):
        status, body = ep.request("GET", path)
        return status, body.decode("utf-8", "replace")

    def post_json(path, payload):
        status, body = ep.request("POST", path, payload)
        try:
            return status, json.loads(body.decode("utf-8", "replace"))
        except ValueError:
            return status, None

    try:
        result = run_surface(
            p["surface"], sdk, ep.base_url, p["model"], api_key=p["api_key"], sessions=p["sessions"], turns=p["turns"],
            max_tokens=p["max_tokens"], system_tokens=p["system_tokens"], max_model_len=p["max_model_len"],
            temperature=p["temperature"], top_p=p["top_p"], seed=p["seed"], tool_turn=p["tool_turn"],
            request_timeout=p["request_timeout"], get_text=get_text, post_json=post_json,
        )
    except ClientError as exc:
        module.fail_json(msg=exc.msg)
    result["sdk_version"] = getattr(sdk, "__version__", None)
    result["openai_version"] = result["sdk_version"] if name == "openai" else None
    result["problems"] = surface_problems(result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
