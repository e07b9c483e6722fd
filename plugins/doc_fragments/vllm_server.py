# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The options of a module that sends requests to one vLLM server (vllm_probe, vllm_agent_probe); their argument
    spec is SERVER_ARGUMENT_SPEC of plugins/module_utils/vllm_http.py."""

    DOCUMENTATION = r"""
options:
  base_url:
    description:
      - The server's address, C(http://HOST:PORT) or C(https://HOST:PORT) (an optional path prefix is kept).
    type: str
    required: true
  api_key:
    description:
      - "Sent as C(Authorization: Bearer API_KEY) (vLLM's C(--api-key))."
    type: str
"""
