# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The coding agents' configs for a served model, sized to the served profile (vllm_verify writes them on the
controller next to the report), and the check of a served name against the enabled agents.

Each agent works or fails by its config: Claude Code and opencode ask for 32,000 output tokens by default
(vLLM answers 400 when that and the prompt pass the context), Claude Code assumes a 1m window for a model it
does not know, and sends x-api-key from ANTHROPIC_API_KEY (vLLM 0.28.0 takes Bearer only: ANTHROPIC_AUTH_TOKEN).
The key is never written: each config names the environment variable the user sets.
"""
from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import host_var_getter
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name

# The agents a config is written for, in order.
AGENT_CLIENTS = ("claude_code", "codex", "opencode", "openai")
# The output-token cap beside the agent's prompt: an eighth of the context, at least 1,024, at most 32,000
# (Claude Code's and opencode's own default); a 32k context gets 4,096, which left room for Claude Code's
# first request (about 20k tokens of system prompt and tools) on the lab box.
OUTPUT_SHARE = 8
OUTPUT_MIN = 1024
OUTPUT_MAX = 32000
# An agent's first request in tokens, about (measured against a capturing backend; the lab's tokenizer):
# below this a context cannot hold it beside the output cap.
FIRST_REQUEST_TOKENS = {"claude_code": 20000, "codex": 10000, "opencode": 10000, "openai": 0}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def output_cap(max_model_len, asked=0):
    """The output-token cap of the agents' configs: ``asked`` when > 0, else an eighth of the context
    (1,024-32,000); never more than half the context."""
    limit = int(max_model_len)
    cap = int(asked) if asked and int(asked) > 0 else min(OUTPUT_MAX, max(OUTPUT_MIN, limit // OUTPUT_SHARE))
    return max(1, min(cap, limit // 2))


def client_base_url(server_url, client_host, override=""):
    """The base URL an agent on another machine uses: ``override`` when set, else the server's URL with a loopback
    or wildcard host (127.0.0.1, localhost, 0.0.0.0, ::, ::1) replaced by ``client_host`` (the box's address)."""
    if override:
        return str(override).rstrip("/")
    match = re.match(r"^(https?://)(\[[0-9A-Fa-f:.]*\]|[^/:]+)(:[0-9]+)?(/.*)?$", str(server_url or ""))
    if not match:
        raise AnsibleFilterError("vllm_verify_agent_configs: base_url must be http(s)://HOST[:PORT], got %r" % (server_url,))
    scheme, host, port, path = match.groups()
    if host.strip("[]") in ("127.0.0.1", "localhost", "0.0.0.0", "::", "::1") and client_host:
        host = "[%s]" % client_host if ":" in str(client_host) else str(client_host)
    return (scheme + host + (port or "") + (path or "")).rstrip("/")


def served_name_problems(name, clients):
    """Why an enabled agent cannot use the served model name: [] when every one can."""
    problems = []
    if "claude_code" in (clients or []) and "/" in str(name or ""):
        problems.append(
            "the served model name %r has a '/': Claude Code cannot use it (vLLM's Claude Code page: serve the model "
            "under a name without '/'). Set vllm_service_served_model_name to a name without '/' (for example %r), "
            "or leave claude_code out of vllm_verify_agent_clients"
            % (name, str(name).rstrip("/").rsplit("/", 1)[-1] or "coder"))
    return problems


def _toml_str(value):
    return json.dumps(str(value))


# Claude Code (2.1.328) reads a CLAUDE_CODE_AUTO_COMPACT_WINDOW below 100k as 100k ("treats it as the 100k
# minimum"): on a smaller context it would compact only past the served limit. Below it the variable is left out and
# Claude Code compacts by CLAUDE_CODE_MAX_CONTEXT_TOKENS, its context window.
CLAUDE_CODE_MIN_COMPACT_WINDOW = 100000


def _claude_code(c):
    env = {
        "ANTHROPIC_BASE_URL": c["base_url"],
        "ANTHROPIC_MODEL": c["model"],
        "ANTHROPIC_DEFAULT_OPUS_MODEL": c["model"],
        "ANTHROPIC_DEFAULT_SONNET_MODEL": c["model"],
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": c["model"],
        "CLAUDE_CODE_SUBAGENT_MODEL": c["model"],
        # The attribution header changes the system prompt per request: the prefix cache never hits.
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(c["output_tokens"]),
        # A model it does not know is taken for a 1m window: the box's context instead.
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(c["context"]),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if c["context"] >= CLAUDE_CODE_MIN_COMPACT_WINDOW:
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(c["context"])
    if not c["key_configured"]:
        # The server takes any token; Claude Code needs one to skip its login.
        env["ANTHROPIC_AUTH_TOKEN"] = "no-key"
    return json.dumps({"env": dict(sorted(env.items()))}, indent=2) + "\n"


def _codex(c):
    provider = c["provider_id"]
    lines = [
        "# Codex CLI (~/.codex/config.toml, or CODEX_HOME=<dir> with this file in it) for %s." % c["label"],
        "# Written by gpuhost.inference.%s: profile %s, context %d tokens." % (c["writer"], c["profile"], c["context"]),
        "model = %s" % _toml_str(c["model"]),
        "model_provider = %s" % _toml_str(provider),
        "model_context_window = %d" % c["context"],
        "model_auto_compact_token_limit = %d" % (c["context"] - c["output_tokens"]),
        "",
        "[model_providers.%s]" % provider,
        "name = %s" % _toml_str("vLLM on " + c["label"]),
        "base_url = %s" % _toml_str(c["base_url"] + "/v1"),
        "wire_api = \"responses\"",
    ]
    if c["key_configured"]:
        lines.append("env_key = %s" % _toml_str(c["api_key_env"]))
    if c["ca_file"]:
        lines[2:2] = ["# The server's certificate is signed by a CA of its own: run codex with SSL_CERT_FILE=%s" % c["ca_file"]]
    lines += ["", "[analytics]", "enabled = false", ""]
    return "\n".join(lines)


def _opencode(c):
    provider = c["provider_id"]
    options = {"baseURL": c["base_url"] + "/v1"}
    options["apiKey"] = "{env:%s}" % c["api_key_env"] if c["key_configured"] else "no-key"
    doc = {
        "$schema": "https://opencode.ai/config.json",
        "model": "%s/%s" % (provider, c["model"]),
        "share": "disabled",
        "autoupdate": False,
        "provider": {provider: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "vLLM on " + c["label"],
            "options": options,
            "models": {c["model"]: {"name": c["model"], "tool_call": True,
                                    "limit": {"context": c["context"], "output": c["output_tokens"]}}},
        }},
    }
    return json.dumps(doc, indent=2) + "\n"


def _openai(c):
    lines = [
        "# Any OpenAI client (the openai SDK, Aider, Continue, Roo Code, Cline): source this file.",
        "# Written by gpuhost.inference.%s for %s: profile %s, context %d tokens; ask for at most"
        % (c["writer"], c["label"], c["profile"], c["context"]),
        "# %d output tokens beside the prompt." % c["output_tokens"],
        "export OPENAI_BASE_URL=%s" % c["base_url"] + "/v1",
        "export OPENAI_MODEL=%s" % c["model"],
    ]
    if c["ca_file"]:
        # The server's own CA: Python's httpx/requests and Rust clients read SSL_CERT_FILE, Node ones NODE_EXTRA_CA_CERTS.
        lines += ["export SSL_CERT_FILE=%s" % c["ca_file"], "export REQUESTS_CA_BUNDLE=%s" % c["ca_file"],
                  "export NODE_EXTRA_CA_CERTS=%s" % c["ca_file"]]
    if c["key_configured"]:
        lines.append(_from_users_variable("OPENAI_API_KEY", c["api_key_env"]))
    else:
        lines.append("export OPENAI_API_KEY=no-key")
    return "\n".join(lines) + "\n"


def _from_users_variable(name, variable):
    """`export NAME="${VARIABLE:?...}"`: the key from the user's own variable, a clear error without it. No quote in
    the message: bash 5.2 reads a ' inside "${...:?...}" as an opening quote, and the file would not source."""
    return 'export %s="${%s:?set %s to the API key of the server}"' % (name, variable, variable)


def _claude_code_env(c):
    lines = [
        "# Claude Code: source this file, then run claude with --settings claude-code.settings.json (or merge that",
        "# file's env into ~/.claude/settings.json). vLLM 0.28.0 takes only Authorization: Bearer (vllm#51572), which",
        "# Claude Code sends from ANTHROPIC_AUTH_TOKEN; ANTHROPIC_API_KEY would send x-api-key and get 401.",
        "unset ANTHROPIC_API_KEY",
    ]
    if c["ca_file"]:
        # Node reads it at start only: the settings file's env comes too late for it.
        lines.append("export NODE_EXTRA_CA_CERTS=%s" % c["ca_file"])
    if c["key_configured"]:
        lines.append(_from_users_variable("ANTHROPIC_AUTH_TOKEN", c["api_key_env"]))
    return "\n".join(lines) + "\n"


FILES = {
    "claude_code": (("claude-code.settings.json", _claude_code), ("claude-code.env", _claude_code_env)),
    "codex": (("codex.config.toml", _codex),),
    "opencode": (("opencode.json", _opencode),),
    "openai": (("openai.env", _openai),),
}


def vllm_verify_agent_configs(inputs):
    """The agents' configs: {files: [{name, agent, content}], context, output_tokens, warnings, skipped}.

    ``inputs``: label (the host or the router), base_url (the server's URL as the role reaches it, no /v1),
    client_host (the box's address for a user elsewhere: replaces a loopback or wildcard host), client_base_url
    (set: the URL the user reaches, taken as it is), model
    (the served name), max_model_len, output_tokens (0: output_cap's share), api_key_env (the variable the user
    sets to the key), key_configured (the server has a key), profile, clients (a subset of AGENT_CLIENTS).
    An agent that cannot use the served name gets no file (skipped, with the reason)."""
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("vllm_verify_agent_configs: its input must be a dict, got %s" % type_name(inputs))
    try:
        context = int(inputs.get("max_model_len"))
    except (TypeError, ValueError):
        raise AnsibleFilterError("vllm_verify_agent_configs: max_model_len must be an integer, got %r"
                                 % (inputs.get("max_model_len"),))
    env_name = str(inputs.get("api_key_env") or "VLLM_API_KEY")
    if not _ENV_NAME.match(env_name):
        raise AnsibleFilterError("vllm_verify_agent_configs: api_key_env must be an environment variable name, got %r"
                                 % env_name)
    label = str(inputs.get("label") or "vllm")
    base_url = client_base_url(inputs.get("base_url"), inputs.get("client_host"), inputs.get("client_base_url") or "")
    conf = {
        "label": label, "base_url": base_url, "model": str(inputs.get("model")),
        "context": context, "output_tokens": output_cap(context, inputs.get("output_tokens") or 0),
        "api_key_env": env_name, "key_configured": bool(inputs.get("key_configured")),
        "profile": str(inputs.get("profile") or "?"),
        "provider_id": "gpuhost-" + re.sub(r"[^A-Za-z0-9_-]", "-", label),
        "ca_file": str(inputs.get("ca_file") or ""),
        "writer": str(inputs.get("writer") or "vllm_verify"),
    }
    clients = [c for c in AGENT_CLIENTS if c in (inputs.get("clients") or [])]
    files, warnings, skipped = [], [], {}
    for client in clients:
        problems = served_name_problems(conf["model"], [client])
        if problems:
            skipped[client] = problems[0]
            warnings.append(problems[0])
            continue
        need = FIRST_REQUEST_TOKENS[client]
        if need and context - conf["output_tokens"] < need:
            warnings.append(
                "%s: the context of %d tokens leaves %d beside the %d output tokens; its first request is about %d "
                "tokens (serve a profile with a larger max_model_len)"
                % (client, context, context - conf["output_tokens"], conf["output_tokens"], need))
        for name, render in FILES[client]:
            files.append({"name": name, "agent": client, "content": render(conf)})
    return {"files": files, "context": context, "output_tokens": conf["output_tokens"], "warnings": warnings,
            "skipped": skipped, "base_url": conf["base_url"], "model": conf["model"],
            "api_key_env": env_name if conf["key_configured"] else None}


def _merged(base, over):
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in (over.items() if isinstance(over, dict) else ()):
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _settings_len(settings):
    for key in ("max_model_len", "max-model-len"):
        if key in settings:
            return settings[key]
    return None


def endpoint_workers(names, hostvars, service_defaults=None):
    """What an endpoint in front of vLLM boxes (the router, the front door) serves, read from each box's host vars
    the way vllm_router finds its workers (vllm_service's defaults where a host leaves a variable unset):
    {model, max_model_len (the SMALLEST of the boxes'), profile, workers: [{host, model, profile, max_model_len}],
    errors}. A box whose active profile sets no integer max_model_len, or boxes serving different names, are errors
    naming the host and the variable."""
    defaults = service_defaults if isinstance(service_defaults, dict) else {}
    hostvars = hostvars if hostvars is not None else {}
    workers, errors = [], []
    for name in list(names or []):
        by_name = host_var_getter(hostvars, name)

        def get(key, by_name=by_name):
            return by_name(key, defaults.get(key))

        model = str(get("vllm_service_served_model_name") or get("vllm_service_model") or "")
        profile = str(get("vllm_service_profile_override") or get("vllm_service_profile") or "default")
        profiles = _merged(get("vllm_service_profiles") or {}, get("vllm_service_extra_profiles") or {})
        if profile not in profiles:
            errors.append("worker %s: vllm_service_profile %r is not one of vllm_service_profiles (%s)"
                          % (name, profile, ", ".join(sorted(profiles)) or "none"))
            continue
        settings = _merged(get("vllm_service_settings") or {}, (profiles[profile] or {}).get("settings") or {})
        length = _settings_len(settings)
        try:
            length = int(length)
        except (TypeError, ValueError):
            length = None
        if not model:
            errors.append("worker %s: vllm_service_model and vllm_service_served_model_name are empty" % name)
            continue
        if length is None or length <= 0:
            errors.append("worker %s: the profile %r sets no max_model_len (an integer) in vllm_service_profiles or "
                          "vllm_service_settings, so the agents' context window is unknown" % (name, profile))
            continue
        workers.append({"host": name, "model": model, "profile": profile, "max_model_len": length})
    if not workers and not errors:
        errors.append("no worker: the endpoint's worker group has no hosts in this inventory")
    models = sorted({w["model"] for w in workers})
    if len(models) > 1:
        errors.append("the workers serve different model names (%s): an agent sends one name; set one "
                      "vllm_service_served_model_name for the group"
                      % ", ".join("%s: %s" % (w["host"], w["model"]) for w in workers))
    smallest = min(workers, key=lambda w: w["max_model_len"]) if workers else None
    return {"model": models[0] if models else "", "max_model_len": smallest["max_model_len"] if smallest else 0,
            "profile": ", ".join(sorted({"%s" % w["profile"] for w in workers})),
            "workers": workers, "errors": errors}


def vllm_verify_served_name_problems(name, clients):
    """Filter form of served_name_problems."""
    return served_name_problems(name, clients)


class FilterModule:
    """The coding agents' configs of vllm_verify."""

    def filters(self):
        return {
            "vllm_verify_agent_configs": vllm_verify_agent_configs,
            "vllm_verify_served_name_problems": vllm_verify_served_name_problems,
            "vllm_endpoint_workers": endpoint_workers,
        }
