"""Every coding agent connects (issue 34), on the real vLLM 0.28.0 CPU build.

side_effect_agents.yml served `lab_agents` (32k context), verified it with every agent surface (chat, responses,
messages: each agent's request shape with the SDKs of the vLLM venv), wrote the agents' configs on the controller,
and ran the real CLIs headless with those files: Claude Code (`claude -p`) and Codex (`codex exec`), pinned in
scripts/agents.sh. Here: the surfaces' gates and report rows, the configs sized to the profile, each CLI's turn
completed without an API error, and the first call of the OpenAI-client and opencode configs made with what the
files say.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shlex

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OUT = os.path.join(REPO, "reports", "agents-e2e")
CONTEXT = 32768
OUTPUT_CAP = 4096   # an eighth of the context (vllm_agent_configs.output_cap)


def _pins():
    """{package: version} of the agents' CLIs as scripts/agents.sh installs them."""
    with open(os.path.join(REPO, "scripts", "agents.sh"), encoding="utf-8") as fh:
        text = fh.read()
    return dict(re.findall(r"(@[a-z-]+/[a-z-]+)@([0-9][0-9.]*)", text))


@pytest.fixture(scope="module")
def hostname(host):
    return host.check_output("hostname").strip()


@pytest.fixture(scope="module")
def configs(hostname):
    return os.path.join(OUT, hostname, "agents")


@pytest.fixture(scope="module")
def report(hostname):
    found = sorted(glob.glob(os.path.join(OUT, hostname, "*-lab_agents.json")))
    assert found, "no lab_agents report under %s" % OUT
    with open(found[-1], encoding="utf-8") as fh:
        return json.load(fh)


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_every_surface_passed_on_the_real_server(report):
    rows = {r["surface"]: r for r in report["agent_surfaces"]}
    assert list(rows) == ["chat", "responses", "messages"], report["agent_surfaces"]
    gates = {g["name"]: g for g in report["gates"]}
    for surface, gate in (("chat", "agent"), ("responses", "agent_responses"), ("messages", "agent_messages")):
        row = rows[surface]
        assert row["ran"] and row["requests"] == row["sessions"] * row["turns"] > 0, row
        assert row["errors_total"] == 0 and row["problems"] == [], row
        assert row["forced"] == row["forced_ok"] == row["sessions"], row["forced_tool_calls"]
        assert row["prefix_cache_hit_rate"] is not None and row["prefix_cache_hit_rate"] > 0, row
        assert gates[gate]["ok"] is True, gates[gate]
    assert rows["messages"]["path"] == "/v1/messages?beta=true" and rows["messages"]["sdk"] == "anthropic"
    assert rows["responses"]["path"] == "/v1/responses" and rows["chat"]["checks"]["parallel_tool_calls"] is False


def test_the_surfaces_own_facts_are_reported(report):
    rows = {r["surface"]: r for r in report["agent_surfaces"]}
    messages = rows["messages"]["checks"]
    assert isinstance(messages["count_tokens"]["input_tokens"], int) and messages["count_tokens"]["input_tokens"] > 0
    # No key on the lab box: the server takes any header; the sessions use Bearer (what vLLM 0.28.0 takes).
    assert messages["auth"]["accepted"] == ["x-api-key", "bearer"] and messages["auth_used"] == "bearer"
    custom = rows["responses"]["checks"]["custom_tool"]
    # What vLLM 0.28.0 does with Codex's freeform apply_patch (non-Harmony path): not in the prompt, no call.
    assert custom["outcome"] == "not_in_prompt", custom
    assert custom["known_defect"] == "vllm-project/vllm#56418"
    assert custom["prompt_tokens"][0] == custom["prompt_tokens"][1] > 0, custom
    # No reasoning parser on the lab profile: nothing carried reasoning.
    assert rows["chat"]["reasoning_field"] is None


def test_configs_sized_to_the_profile(configs):
    assert sorted(os.listdir(configs)) == ["claude-code.env", "claude-code.settings.json", "codex.config.toml",
                                           "openai.env", "opencode.json"]
    env = json.loads(_read(os.path.join(configs, "claude-code.settings.json")))["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000" and env["ANTHROPIC_DEFAULT_SONNET_MODEL"] == "tiny-qwen3"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == str(OUTPUT_CAP) and env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(CONTEXT)
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    toml = _read(os.path.join(configs, "codex.config.toml"))
    assert 'wire_api = "responses"' in toml and 'base_url = "http://127.0.0.1:8000/v1"' in toml
    assert "model_context_window = %d" % CONTEXT in toml
    opencode = json.loads(_read(os.path.join(configs, "opencode.json")))
    model = next(iter(opencode["provider"].values()))["models"]["tiny-qwen3"]
    assert model["limit"] == {"context": CONTEXT, "output": OUTPUT_CAP}


def _run(name):
    meta = json.loads(_read(os.path.join(OUT, name + ".json")))
    return meta, _read(os.path.join(OUT, name + ".out")), _read(os.path.join(OUT, name + ".err"))


def test_claude_code_completed_a_turn(configs):
    meta, out, err = _run("claude-code")
    assert meta["rc"] == 0, (meta, out[-2000:], err[-2000:])
    assert meta["version"].startswith(_pins()["@anthropic-ai/claude-code"]), meta
    result = json.loads(out)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["api_error_status"] is None, result
    usage = result["modelUsage"]["tiny-qwen3"]
    # The window it took from the config (a model it does not know is otherwise taken for 1m tokens).
    assert usage["contextWindow"] == CONTEXT and usage["inputTokens"] > 10000, usage


def test_codex_completed_a_turn():
    meta, out, err = _run("codex")
    assert meta["rc"] == 0, (meta, out[-2000:], err[-2000:])
    assert meta["version"].endswith(_pins()["@openai/codex"]), meta
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, events
    errors = [e["item"]["message"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "error"]
    # The one error item Codex 0.169.0 prints for a model it has no metadata for (a warning: the turn completes).
    assert all(m.startswith("Model metadata for `tiny-qwen3` not found") for m in errors), errors
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] > 5000, usage


def _env_file(path):
    found = dict(re.findall(r"^export ([A-Z_]+)=(\S+)$", _read(path), re.M))
    return {k: shlex.split(v)[0] for k, v in found.items()}


def _first_call(host, base_url, key, model, max_tokens):
    """A streamed chat turn with a tool offered, sent from the box with the OpenAI SDK of the vLLM venv."""
    script = (
        "import openai, sys\n"
        "c = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)\n"
        "tools = [{'type': 'function', 'function': {'name': 'read_file', 'parameters': {'type': 'object',"
        " 'properties': {'path': {'type': 'string'}}, 'required': ['path']}}}]\n"
        "s = c.chat.completions.create(model=sys.argv[3], messages=[{'role': 'user', 'content': 'hi'}], tools=tools,"
        " max_tokens=int(sys.argv[4]), stream=True, stream_options={'include_usage': True})\n"
        "print([ch.usage.completion_tokens for ch in s if ch.usage][-1])\n")
    cmd = "/opt/vllm/venv/bin/python -c %s %s %s %s %d" % (
        shlex.quote(script), shlex.quote(base_url), shlex.quote(key), shlex.quote(model), max_tokens)
    return int(host.check_output(cmd).strip())


def test_openai_env_makes_its_first_call(host, configs):
    env = _env_file(os.path.join(configs, "openai.env"))
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8000/v1" and env["OPENAI_MODEL"] == "tiny-qwen3"
    assert _first_call(host, env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"], env["OPENAI_MODEL"], 8) > 0


def test_opencode_config_makes_its_first_call(host, configs):
    doc = json.loads(_read(os.path.join(configs, "opencode.json")))
    provider_id, model = doc["model"].split("/", 1)
    provider = doc["provider"][provider_id]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    # The box serves `lab` again (2048 tokens): a small reply, the base URL, key and model as the file says.
    limit = provider["models"][model]["limit"]["output"]
    assert _first_call(host, provider["options"]["baseURL"], provider["options"]["apiKey"], model, min(limit, 8)) > 0
