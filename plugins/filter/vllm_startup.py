# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read what a vLLM server says about its KV cache: the startup log and /metrics."""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils import prometheus_text
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name

_NUM = r"(\d[\d,]*)"
_FLOAT = r"(\d[\d,]*(?:\.\d+)?)"

# (form name, regex, {group index: (key, converter)})
_FORMS = (
    ("kv_cache_single_line",
     re.compile(r"GPU KV cache size: " + _NUM + r" tokens, Maximum concurrency for " + _NUM
                + r" tokens per request: " + _FLOAT + r"x"),
     ((1, "kv_cache_tokens", "int"), (2, "concurrency_tokens", "int"), (3, "max_concurrency", "float"))),
    ("kv_cache_tokens",
     re.compile(r"GPU KV cache size: " + _NUM + r" tokens"),
     ((1, "kv_cache_tokens", "int"),)),
    ("max_concurrency",
     re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _FLOAT + r"x"),
     ((1, "concurrency_tokens", "int"), (2, "max_concurrency", "float"))),
    ("gpu_blocks",
     re.compile(r"# (?:GPU|CUDA|cuda|gpu|XPU|xpu|HPU|hpu|NPU|npu|TPU|tpu|ROCm|rocm) blocks: " + _NUM),
     ((1, "gpu_blocks", "int"),)),
    ("cpu_blocks",
     re.compile(r"# CPU blocks: " + _NUM),
     ((1, "cpu_blocks", "int"),)),
    ("num_gpu_blocks",
     re.compile(r"num_gpu_blocks is: " + _NUM),
     ((1, "gpu_blocks", "int"),)),
    ("available_kv_cache_memory",
     re.compile(r"Available KV cache memory: " + _FLOAT + r" ?GiB"),
     ((1, "available_kv_cache_gib", "float"),)),
    ("cpu_kv_cache_explicit",
     re.compile(r"Explicitly set \(" + _FLOAT + r"/" + _FLOAT + r"\) GiB for KV cache"),
     ((1, "available_kv_cache_gib", "float"), (2, "kv_cache_node_gib", "float"))),
    ("init_engine",
     re.compile(r"init engine \([^)]*\) took " + _FLOAT + r" ?(?:s|secs?|seconds)\b"),
     ((1, "init_seconds", "float"),)),
    # The CUDA build's start (captured on an H100 and an H200, tests/fixtures/vllm-0.28.0-cuda/): where the time and
    # the memory before the KV pool went - torch.compile, the weights, the CUDA graphs.
    ("compilation",
     re.compile(r"init engine \([^)]*\) took [\d.,]+ ?s \(compilation: " + _FLOAT + r" ?s\)"),
     ((1, "compile_seconds", "float"),)),
    ("torch_compile",
     re.compile(r"torch\.compile took " + _FLOAT + r" ?s in total"),
     ((1, "compile_seconds", "float"),)),
    ("model_loading",
     re.compile(r"Model loading took " + _FLOAT + r" ?GiB memory and " + _FLOAT + r" ?(?:s|secs?|seconds)\b"),
     ((1, "weights_gib", "float"), (2, "weights_load_seconds", "float"))),
    ("graph_capturing",
     re.compile(r"Graph capturing finished in " + _FLOAT + r" ?(?:s|secs?|seconds), took " + _FLOAT + r" ?GiB"),
     ((1, "cuda_graph_seconds", "float"), (2, "cuda_graph_gib", "float"))),
)

# A new start of the server: everything before the last one is an earlier start.
_START = re.compile(
    r"(vLLM API server version \S+)|(non-default args:)|(\u2588 \u2580\u2584\u2580 \u2588\s+version \S+)"
)
_ENGINE_START = re.compile(r"Initializing a V1 LLM engine|Initializing an LLM engine")
_VERSIONS = (
    re.compile(r"vLLM API server version (\d[\w.+-]*)"),
    re.compile(r"\u2588\s+version (\d[\w.+-]*)"),
    re.compile(r"LLM engine \(v(\d[\w.+-]*)\)"),
)

# Prefixes in front of vLLM's message: the journal's, the process', the logger's.
_JOURNAL_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ][\d:.,+\-Z]+) \S+ [^\s\[]+(?:\[\d+\])?: "
)
_PROC_PREFIX = re.compile(r"^\([\w\s.:-]*pid=\d+\) ")
_LOG_PREFIX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ")
_UVICORN_PREFIX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")

_ERROR_ANYWHERE = re.compile(
    r"EngineDeadError|Engine core initialization failed|EngineCore failed to start|CUDA out of memory"
    r"|WorkerProc failed to start|less than desired CPU memory utilization|OutOfMemoryError"
)
_ERROR_WARNING = re.compile(r"EngineDeadError|Engine core initialization failed|CUDA out of memory")
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)(?::|$)")
_MAX_ERRORS = 50


def _text(value, name):
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise AnsibleFilterError("%s expects the log text (a string or a list of lines), got %s" % (
            name, type_name(value)))
    return value


def _number(text, kind):
    text = text.replace(",", "")
    return int(text) if kind == "int" else float(text)


def _message(line):
    """(level or None, stripped message, message as printed) of one log line without its prefixes."""
    msg = _JOURNAL_PREFIX.sub("", line, count=1)
    msg = _PROC_PREFIX.sub("", msg, count=1)
    raw = msg
    level = None
    m = _LOG_PREFIX.match(msg) or _UVICORN_PREFIX.match(msg)
    if m:
        level = m.group(1)
        msg = msg[m.end():]
        raw = msg if m.re is _LOG_PREFIX else msg.lstrip()
    return level, msg.strip(), raw


def _is_engine_error(level, msg, raw):
    """Whether one log line reports an engine error (see _message for level and msg)."""
    if not msg:
        return False
    if raw[:1] in (" ", "\t"):
        return False  # a traceback's "  File ..." and source lines (vLLM 0.28 logs them as ERROR too)
    if level in ("ERROR", "CRITICAL"):
        return True
    if level == "WARNING":
        # a warning that only names an error class (vLLM's ulimit warning names OSError) is no error
        return bool(_ERROR_WARNING.search(msg))
    if level is not None:
        return False
    if msg.startswith("Traceback (most recent call last)"):
        return True
    if _EXCEPTION_LINE.match(msg):
        return True
    return bool(_ERROR_ANYWHERE.search(msg))


def _last_start(lines):
    """(index of the first line of the last start, number of starts).

    A start prints each of its markers once (the banner's version line, "vLLM API server
    version", "non-default args"): a marker of a kind the current start already has opens a new one.
    """
    groups = []
    kinds = set()
    for index, line in enumerate(lines):
        m = _START.search(line)
        if not m:
            continue
        kind = m.lastindex
        if not groups or kind in kinds:
            groups.append(index)
            kinds = set()
        kinds.add(kind)
    if not groups:
        # no API server marker (an offline engine): each engine initialisation is a start
        groups = [i for i, line in enumerate(lines) if _ENGINE_START.search(line)]
    if not groups:
        return 0, 0
    return groups[-1], len(groups)


def vllm_startup_report(text):
    """Log text of a vLLM start -> its KV cache figures, init time and engine errors (see DOCUMENTATION)."""
    lines = _text(text, "vllm_startup_report").splitlines()
    first, starts = _last_start(lines)
    report = {
        "kv_cache_tokens": None,
        "max_concurrency": None,
        "concurrency_tokens": None,
        "gpu_blocks": None,
        "cpu_blocks": None,
        "available_kv_cache_gib": None,
        "kv_cache_node_gib": None,
        "init_seconds": None,
        "compile_seconds": None,
        "weights_gib": None,
        "weights_load_seconds": None,
        "cuda_graph_seconds": None,
        "cuda_graph_gib": None,
        "version": None,
        "engine_errors": [],
        "forms": [],
        "lines": [],
        "starts": starts,
    }
    seen_errors = set()
    for line in lines[first:]:
        matched = False
        for name, regex, groups in _FORMS:
            m = regex.search(line)
            if not m:
                continue
            if name == "kv_cache_tokens" and "Maximum concurrency for" in line:
                continue  # the single line form, read above
            if name == "max_concurrency" and "GPU KV cache size" in line:
                continue
            for index, key, kind in groups:
                report[key] = _number(m.group(index), kind)
            if name not in report["forms"]:
                report["forms"].append(name)
            matched = True
        if matched:
            report["lines"].append(line)
            continue
        for regex in _VERSIONS:
            m = regex.search(line)
            if m:
                report["version"] = m.group(1)
                break
        level, msg, raw = _message(line)
        if _is_engine_error(level, msg, raw) and len(report["engine_errors"]) < _MAX_ERRORS:
            if msg not in seen_errors:
                seen_errors.add(msg)
                report["engine_errors"].append(line.strip())
    return report


# -- /metrics ------------------------------------------------------------------------------------
_INT_TEXT = re.compile(r"^-?\d+$")
_FLOAT_TEXT = re.compile(r"^-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
CACHE_INFO_KEYS = (
    "block_size", "num_gpu_blocks", "num_cpu_blocks", "kv_cache_size_tokens", "kv_cache_max_concurrency",
    "kv_cache_memory_bytes", "gpu_memory_utilization", "cache_dtype", "enable_prefix_caching",
)


def _label_value(text):
    if text == "None" or text == "":
        return None
    if text == "True":
        return True
    if text == "False":
        return False
    if _INT_TEXT.match(text):
        return int(text)
    if _FLOAT_TEXT.match(text):
        return float(text)
    return text


def vllm_metrics_cache_info(text):
    """Prometheus text of /metrics -> the labels of ``vllm:cache_config_info`` (numbers converted).

    The keys of CACHE_INFO_KEYS are always present (None when the server does not label them, or
    when the metric is absent); "None" labels are None, "True"/"False" booleans. With several
    engines, engine "0" (else the first sample) is returned.
    """
    body = _text(text, "vllm_metrics_cache_info")
    samples = [{k: _label_value(v) for k, v in labels.items()}
               for labels, _value in prometheus_text.series(body, "vllm:cache_config_info")]
    chosen = {}
    if samples:
        chosen = next((s for s in samples if s.get("engine") in (0, "0")), samples[0])
    result = {key: None for key in CACHE_INFO_KEYS}
    result.update(chosen)
    return result


class FilterModule:
    """vLLM startup report and /metrics cache info."""

    def filters(self):
        return {
            "vllm_startup_report": vllm_startup_report,
            "vllm_metrics_cache_info": vllm_metrics_cache_info,
        }
