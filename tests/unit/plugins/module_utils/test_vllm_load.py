# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the probe's load (plugins/module_utils/vllm_load.py): vLLM's over-the-limit messages.
run_level, run_soak and context_probe are run through the module (tests/unit/plugins/modules/test_vllm_probe.py)."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_load
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES

FIXTURES = os.path.join(ALL_FIXTURES, "vllm-0.28.0")


@pytest.mark.parametrize("name,expected", [
    ("context_over_by_one.json", {"limit": 2048, "requested": 2049, "prompt_tokens": 1793, "output_tokens": 256}),
    ("context_over_prompt.json", {"limit": 2048, "requested": 2305, "prompt_tokens": 2049, "output_tokens": 256}),
])
def test_parse_the_real_400_messages(name, expected):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        message = json.load(fh)["error"]["message"]
    assert vllm_load.parse_context_error(message) == expected


@pytest.mark.parametrize("message,expected", [
    ("This model's maximum context length is 4096 tokens. However, you requested 4353 tokens "
     "(4097 in the messages, 256 in the completion). Please reduce the length of the messages or completion.",
     {"limit": 4096, "requested": 4353, "prompt_tokens": 4097, "output_tokens": None}),
    ("This model's maximum context length is 262,144 tokens. However, your request has 262,145 input tokens. "
     "Please reduce the length of the input messages.",
     {"limit": 262144, "requested": None, "prompt_tokens": 262145, "output_tokens": None}),
    ("something else", {"limit": None, "requested": None, "prompt_tokens": None, "output_tokens": None}),
])
def test_parse_other_400_messages(message, expected):
    assert vllm_load.parse_context_error(message) == expected
