"""Issue 42.3: every variable holding a key or token (its argument spec says no_log: true) is never shown in a message,
whatever its type: each is fed the wrong types of tests/unit/data/secret_cases.yaml through every filter that builds
messages from the role variables (site.yml's play 1 and the roles' preflights); the message names the variable, never
holds the value."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuhost.inference.plugins.filter import gpuhost_checks, vllm_service, vllm_verify
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import marked_options
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases

DATA = load_cases("secret_cases.yaml")
SECRET = DATA["secret"]
SECRETS = sorted(marked_options("secret"))
SERVICE_BASE = load_cases("vllm_service_var_errors.yaml", "base")
VERIFY_BASE = load_cases("vllm_verify_cases.yaml", "var_errors_base")


def _fill(value):
    if isinstance(value, str):
        return value.replace("SECRET", SECRET)
    if isinstance(value, dict):
        return {_fill(k): _fill(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v) for v in value]
    return value


def _messages(name, value):
    """Every message the collection's variable checks write for {name: value}."""
    values = {name: value}
    out = list(gpuhost_checks.typed_errors(values)) + list(gpuhost_checks.line_errors(values))
    out += gpuhost_checks.owned_path_errors(values) + gpuhost_checks.listener_errors(values, ["vllm_service"])
    if name.startswith("vllm_service_"):
        out += vllm_service.vllm_service_var_errors(dict(copy.deepcopy(SERVICE_BASE), **values))
    if name.startswith("vllm_verify_"):
        out += vllm_verify.vllm_verify_var_errors(dict(copy.deepcopy(VERIFY_BASE), **values))
    return out


def test_the_secrets_are_declared():
    """The keys and tokens of the issue: the door's keys, vLLM's key, the HF token, the router's key, the verifier's."""
    assert {"front_door_api_keys", "vllm_service_api_key", "vllm_service_hf_token", "vllm_router_api_key",
            "vllm_verify_api_key"} <= set(SECRETS)


@pytest.mark.parametrize("form", DATA["forms"], ids=[f["id"] for f in DATA["forms"]])
@pytest.mark.parametrize("name", SECRETS)
def test_a_secret_is_never_in_a_message(name, form):
    messages = _messages(name, _fill(form["value"]))
    leaked = [m for m in messages if SECRET in m or SECRET[:12] in m]
    assert not leaked, leaked
    typed = gpuhost_checks.typed_errors({name: _fill(form["value"])})
    assert all(name in m for m in typed)


@pytest.mark.parametrize("name", SECRETS)
def test_a_wrong_type_is_refused_naming_the_variable_and_the_length(name):
    """The type a secret's spec does not take is refused with its name and size (a list for a dict, a mapping for a
    string)."""
    wrong = [SECRET] if marked_options("secret")[name].get("type") == "dict" else {"alice": SECRET}
    errors = gpuhost_checks.typed_errors({name: wrong})
    assert len(errors) == 1 and name in errors[0] and "(a secret: not shown)" in errors[0], errors
    assert SECRET not in errors[0]
