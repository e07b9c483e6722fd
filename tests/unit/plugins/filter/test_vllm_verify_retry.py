"""Issue 45: a transport hiccup is retried, reported, and passes the errors gate (the probe module run against the
SSE server double that drops one kept-alive connection, its result fed to the gates filter). Here and not beside the
module's tests: ansible-test's module tests may not import a filter plugin."""

from __future__ import annotations

from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.filter.vllm_verify import vllm_verify_gates
from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_http
from ansible_collections.gpuhost.inference.plugins.modules import vllm_probe
from ansible_collections.gpuhost.inference.tests.doubles.sse_server import SseServerDouble
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json


def test_a_hiccup_is_retried_reported_and_passes_the_gate(monkeypatch):
    monkeypatch.setattr(vllm_http, "INITIAL_RETRY_DELAY", 0.01)
    args = {"concurrency": [2], "rounds": 3, "max_tokens": 16, "prompt_words": 8, "request_timeout": 10,
            "timeout": 60, "nvidia_smi_path": "/nonexistent/nvidia-smi"}
    with SseServerDouble(drop_requests=[3]) as double:
        args["base_url"] = double.url
        with patch_module_args(args), mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json,
                                                          fail_json=fail_json):
            with pytest.raises((ExitJson, FailJson)) as info:
                vllm_probe.main()
    assert info.type is ExitJson, info.value.args[0]
    result = info.value.args[0]
    assert result["errors_total"] == 0 and result["retries_total"] == 1
    gates = {g["name"]: g for g in vllm_verify_gates({"probe": result, "kv": {}, "max_errors": 0})}
    assert gates["max_errors"]["ok"] and gates["max_errors"]["value"] == 0
    assert "1 transport retries" in gates["max_errors"]["detail"]
