# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What vLLM 0.28.0's journal lines say about its engine: the one pattern of an engine death.

Python standard library only. The readiness wait (module vllm_verify_wait) fails fast on such a line of the
start it waits for, and vllm_verify's stability gate (filter vllm_verify_gates) counts them after the load:

    engine_deaths(journal_lines)   # the lines that say the engine died
"""
from __future__ import annotations

import re

__all__ = [
    "ENGINE_DEATH_PATTERN",
    "engine_deaths",
]

# vLLM 0.28.0's lines when its engine dies: the API server's EngineDeadError, the engine core's fatal error, and a
# start whose engine never came up.
ENGINE_DEATH_PATTERN = "EngineDeadError|EngineCore encountered a fatal error|Engine core initialization failed"


def engine_deaths(lines, pattern=None):
    """The lines (strings) in which ``pattern`` (default ENGINE_DEATH_PATTERN) is found, in order."""
    regex = re.compile(pattern or ENGINE_DEATH_PATTERN)
    return [line for line in lines or [] if isinstance(line, str) and regex.search(line)]
