"""gpuhost-vllm-double: a TEST DOUBLE standing in for vLLM 0.28.0 (not the real vLLM)."""
from __future__ import annotations

try:  # the distribution's version (0.28.0 unless built with GPUHOST_DOUBLE_VERSION)
    from importlib.metadata import version as _version

    __version__ = _version("gpuhost-vllm-double")
except Exception:  # pragma: no cover - running from a source tree
    __version__ = "0.28.0"

IS_TEST_DOUBLE = True
