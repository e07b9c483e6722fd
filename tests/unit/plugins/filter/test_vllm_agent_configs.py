"""Unit tests of the coding agents' configs (plugins/filter/vllm_agent_configs.py): the output cap beside the
prompt, the base URL a user reaches, the served-name check, and each agent's file read back with its own parser
(JSON, TOML, a shell environment). Data-driven: tests/unit/data/vllm_agent_configs_cases.yaml.

The files are proved by the real agents against the real vLLM in molecule e2e (tests/test_agents.py).
"""
from __future__ import annotations

import json
import subprocess

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter import vllm_agent_configs as ac
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("vllm_agent_configs_cases.yaml")
BASE = {"label": "gpu1", "base_url": "http://127.0.0.1:8000", "client_host": "gpu1.lan", "model": "coder",
        "max_model_len": 32768, "output_tokens": 0, "api_key_env": "VLLM_API_KEY", "key_configured": True,
        "profile": "agents", "clients": ["openai", "claude_code", "codex", "opencode"]}


@pytest.mark.parametrize("case", CASES["output_cap"], ids=case_ids(CASES["output_cap"]))
def test_output_cap(case):
    assert ac.output_cap(case["max_model_len"], case["asked"]) == case["cap"]


@pytest.mark.parametrize("case", CASES["base_url"], ids=case_ids(CASES["base_url"]))
def test_client_base_url(case):
    assert ac.client_base_url(case["server"], case["host"], case.get("override", "")) == case["want"]


@pytest.mark.parametrize("case", CASES["name_problems"], ids=case_ids(CASES["name_problems"]))
def test_served_name_problems(case):
    problems = ac.served_name_problems(case["name"], case["clients"])
    assert len(problems) == case["count"]
    if "contains" in case:
        assert case["contains"] in problems[0]


def _files(inputs):
    out = ac.vllm_verify_agent_configs(inputs)
    return out, {f["name"]: f["content"] for f in out["files"]}


def test_every_agent_gets_its_files_sized_to_the_profile():
    out, files = _files(BASE)
    assert sorted(files) == ["claude-code.env", "claude-code.settings.json", "codex.config.toml", "openai.env",
                             "opencode.json"]
    assert [f["agent"] for f in out["files"]] == ["claude_code", "claude_code", "codex", "opencode", "openai"]
    assert out["context"] == 32768 and out["output_tokens"] == 4096 and out["warnings"] == []
    assert out["base_url"] == "http://gpu1.lan:8000"
    for content in files.values():
        assert "s3cret" not in content


def test_claude_code_settings():
    _out, files = _files(BASE)
    env = json.loads(files["claude-code.settings.json"])["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://gpu1.lan:8000"
    for tier in ("OPUS", "SONNET", "HAIKU"):
        assert env["ANTHROPIC_DEFAULT_%s_MODEL" % tier] == "coder"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0" and env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "ANTHROPIC_AUTH_TOKEN" not in env and "ANTHROPIC_API_KEY" not in env  # the key comes from the shell
    # Below Claude Code's 100k minimum the compact window is left out (it would read as 100k, past the context).
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in env


@pytest.mark.parametrize("context,window", [(32768, None), (99999, None), (100000, "100000"), (262144, "262144")])
def test_claude_code_compact_window_only_from_its_minimum(context, window):
    _out, files = _files(dict(BASE, max_model_len=context))
    env = json.loads(files["claude-code.settings.json"])["env"]
    assert env.get("CLAUDE_CODE_AUTO_COMPACT_WINDOW") == window
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(context)


# Sourced by the user's shell: sh (dash here) and bash (5.2 read a quote inside the key's error message as an opening
# quote: the file did not source, found on the demo box).
@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_claude_code_env_takes_bearer_from_the_users_variable(shell):
    _out, files = _files(BASE)
    script = files["claude-code.env"] + 'printf "%s|%s" "$ANTHROPIC_AUTH_TOKEN" "${ANTHROPIC_API_KEY-unset}"\n'
    got = subprocess.run([shell, "-c", script], env={"VLLM_API_KEY": "s3cret", "ANTHROPIC_API_KEY": "x"},
                         capture_output=True, text=True, check=True)
    assert got.stdout == "s3cret|unset"
    missing = subprocess.run([shell, "-c", script], env={}, capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "set VLLM_API_KEY to the API key of the server" in missing.stderr


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_openai_env_takes_the_key_from_the_users_variable(shell):
    _out, files = _files(BASE)
    script = files["openai.env"] + 'printf "%s" "$OPENAI_API_KEY"\n'
    got = subprocess.run([shell, "-c", script], env={"VLLM_API_KEY": "s3cret"}, capture_output=True, text=True, check=True)
    assert got.stdout == "s3cret"
    missing = subprocess.run([shell, "-c", script], env={}, capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "set VLLM_API_KEY to the API key of the server" in missing.stderr


@pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11+")
def test_codex_config_is_toml_with_the_responses_wire_api():
    _out, files = _files(BASE)
    doc = tomllib.loads(files["codex.config.toml"])
    provider = doc["model_providers"][doc["model_provider"]]
    assert doc["model"] == "coder" and doc["model_context_window"] == 32768
    assert doc["model_auto_compact_token_limit"] == 32768 - 4096
    assert provider == {"name": "vLLM on gpu1", "base_url": "http://gpu1.lan:8000/v1", "wire_api": "responses",
                        "env_key": "VLLM_API_KEY"}


def test_opencode_has_the_models_limit():
    _out, files = _files(BASE)
    doc = json.loads(files["opencode.json"])
    provider = doc["provider"]["gpuhost-gpu1"]
    assert doc["model"] == "gpuhost-gpu1/coder"
    assert provider["options"] == {"baseURL": "http://gpu1.lan:8000/v1", "apiKey": "{env:VLLM_API_KEY}"}
    assert provider["models"]["coder"]["limit"] == {"context": 32768, "output": 4096}


def test_without_a_key_no_variable_is_needed():
    _out, files = _files(dict(BASE, key_configured=False))
    assert json.loads(files["claude-code.settings.json"])["env"]["ANTHROPIC_AUTH_TOKEN"] == "no-key"
    assert "env_key" not in files["codex.config.toml"]
    got = subprocess.run(["sh", "-c", files["openai.env"] + 'printf %s "$OPENAI_BASE_URL $OPENAI_API_KEY"'],
                         env={}, capture_output=True, text=True, check=True)
    assert got.stdout == "http://gpu1.lan:8000/v1 no-key"


def test_a_slash_name_skips_claude_code_only():
    out, files = _files(dict(BASE, model="Qwen/Qwen3-Coder"))
    assert "claude-code.settings.json" not in files and "codex.config.toml" in files
    assert "has a '/'" in out["skipped"]["claude_code"] and out["warnings"] == [out["skipped"]["claude_code"]]


def test_a_small_context_warns_per_agent():
    out, _files_ = _files(dict(BASE, max_model_len=2048))
    assert [w.split(":")[0] for w in out["warnings"]] == ["claude_code", "codex", "opencode"]
    assert "leaves 1024 beside the 1024 output tokens" in out["warnings"][0]


@pytest.mark.parametrize("bad, message", [
    ({"max_model_len": "many"}, "max_model_len must be an integer"),
    ({"api_key_env": "VLLM API KEY"}, "api_key_env must be an environment variable name"),
    ({"base_url": "ftp://x"}, "base_url must be http(s)://HOST[:PORT]"),
])
def test_bad_input_is_named(bad, message):
    with pytest.raises(AnsibleFilterError) as err:
        ac.vllm_verify_agent_configs(dict(BASE, **bad))
    assert message in str(err.value)


# vllm_service's defaults as the endpoint roles read them (roles/vllm_service/defaults/main.yml).
def _service_defaults():
    import os
    import yaml
    path = os.path.join(os.path.dirname(ac.__file__), "..", "..", "roles", "vllm_service", "defaults", "main.yml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("case", CASES["endpoint_workers"], ids=case_ids(CASES["endpoint_workers"]))
def test_endpoint_workers(case):
    got = ac.endpoint_workers(case["names"], case["hostvars"], _service_defaults())
    want = case["want"]
    assert len(got["errors"]) == want["errors"], got["errors"]
    if "contains" in want:
        assert want["contains"] in got["errors"][0]
    for key in ("model", "max_model_len", "profile"):
        if key in want:
            assert got[key] == want[key]


@pytest.mark.parametrize("case", CASES["ca_file"], ids=case_ids(CASES["ca_file"]))
def test_endpoint_ca_file(case):
    inputs = dict(BASE, label="door1", base_url="https://door1.lan:443", ca_file="/home/u/ca.crt", writer="front_door")
    _out, files = _files(inputs)
    assert case["line"] in files[case["file"]].splitlines()
    _plain, plain_files = _files(BASE)
    assert "/home/u/ca.crt" not in plain_files[case["file"]]


def test_endpoint_files_name_their_writer_and_keep_the_https_url():
    inputs = dict(BASE, label="door1", base_url="https://door1.lan:8443", ca_file="/home/u/ca.crt", writer="front_door")
    out, files = _files(inputs)
    assert out["base_url"] == "https://door1.lan:8443"
    assert "Written by gpuhost.inference.front_door" in files["codex.config.toml"]
    assert tomllib is None or tomllib.loads(files["codex.config.toml"])["model_providers"]["gpuhost-door1"][
        "base_url"] == "https://door1.lan:8443/v1"
