"""Unit tests of the vllm_startup_report and vllm_metrics_cache_info filters.

Data-driven cases in tests/unit/data/vllm_startup_lines.yaml (the verbatim lines of the vLLM
0.28.0 recipe and every older form), plus the real captures in tests/fixtures/vllm-0.28.0/.
"""
from __future__ import annotations


import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.inference.plugins.filter import vllm_startup
from ansible_collections.gpuhost.inference.plugins.filter.vllm_startup import (
    FilterModule,
    vllm_metrics_cache_info,
    vllm_startup_report,
)

from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases, read_fixture

CASES = load_cases("vllm_startup_lines.yaml", "cases")
for _case in CASES:
    _case["text"] = "\n".join(_case["lines"]) + "\n"

REPORT_KEYS = {
    "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "gpu_blocks", "cpu_blocks",
    "available_kv_cache_gib", "kv_cache_node_gib", "init_seconds", "compile_seconds", "weights_gib",
    "weights_load_seconds", "cuda_graph_seconds", "cuda_graph_gib", "version", "engine_errors", "forms", "lines", "starts",
}


def fixture(name):
    return read_fixture("vllm-0.28.0", name)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_startup_lines(case):
    report = vllm_startup_report(case["text"])
    assert set(report) == REPORT_KEYS
    for key, value in case.get("expect", {}).items():
        assert report[key] == value, (key, report)
    if "errors_contain" in case:
        for fragment in case["errors_contain"]:
            assert any(fragment in err for err in report["engine_errors"]), (fragment, report["engine_errors"])
    elif "engine_errors" not in case.get("expect", {}):
        assert report["engine_errors"] == []
    if "expect_error_count" in case:
        assert len(report["engine_errors"]) == case["expect_error_count"], report["engine_errors"]
    # every matched form's line is returned verbatim
    assert len(report["lines"]) >= (1 if report["forms"] else 0)
    for line in report["lines"]:
        assert line in case["text"].splitlines()


def test_numbers_have_python_types():
    report = vllm_startup_report(CASES[0]["text"])
    assert isinstance(report["kv_cache_tokens"], int)
    assert isinstance(report["concurrency_tokens"], int)
    assert isinstance(report["max_concurrency"], float)


def test_list_of_lines_is_accepted():
    lines = [c for c in CASES if c["id"] == "recipe_three_lines_together"][0]["text"].splitlines()
    report = vllm_startup_report(lines)
    assert report["kv_cache_tokens"] == 262144
    assert report["init_seconds"] == 59.8


def test_none_is_an_empty_report():
    report = vllm_startup_report(None)
    assert report["kv_cache_tokens"] is None
    assert report["forms"] == []


def test_a_non_text_input_is_refused():
    with pytest.raises(AnsibleFilterError, match="vllm_startup_report expects the log text"):
        vllm_startup_report({"stdout": "x"})


def test_real_startup_log_of_0_28_0():
    report = vllm_startup_report(fixture("startup.log"))
    assert report["kv_cache_tokens"] == 262144
    assert report["concurrency_tokens"] == 2048
    assert report["max_concurrency"] == 128.0
    assert report["available_kv_cache_gib"] == 0.25
    assert isinstance(report["kv_cache_node_gib"], float)
    assert isinstance(report["init_seconds"], float) and report["init_seconds"] > 0
    assert report["version"] == "0.28.0"
    assert report["starts"] == 1
    assert report["engine_errors"] == []
    assert report["forms"] == ["cpu_kv_cache_explicit", "kv_cache_single_line", "init_engine"]


def test_real_failed_start_of_0_28_0():
    report = vllm_startup_report(fixture("startup_fail_cpu_memory.log"))
    assert report["kv_cache_tokens"] is None
    assert report["version"] == "0.28.0"
    errors = report["engine_errors"]
    assert any("less than desired CPU memory utilization" in e for e in errors)
    assert any("EngineCore failed to start" in e for e in errors)
    assert any("Engine core initialization failed" in e for e in errors)
    # the traceback bodies ("  File ...", "^^^^") are not reported, each message once
    assert not any('File "' in e for e in errors)
    assert len(errors) < 12


def test_real_log_twice_then_a_failed_start():
    text = fixture("startup.log") + fixture("startup.log") + fixture("startup_fail_cpu_memory.log")
    report = vllm_startup_report(text)
    assert report["starts"] == 3
    assert report["kv_cache_tokens"] is None
    assert report["engine_errors"]


def test_real_failed_start_then_a_good_one():
    text = fixture("startup_fail_cpu_memory.log") + fixture("startup.log")
    report = vllm_startup_report(text)
    assert report["starts"] == 2
    assert report["kv_cache_tokens"] == 262144
    assert report["engine_errors"] == []


def test_filters_are_registered():
    filters = FilterModule().filters()
    assert filters["vllm_startup_report"] is vllm_startup_report
    assert filters["vllm_metrics_cache_info"] is vllm_metrics_cache_info


# ------------------------------------------------------------------ /metrics

def test_real_metrics_of_0_28_0():
    info = vllm_metrics_cache_info(fixture("metrics.txt"))
    assert info["kv_cache_size_tokens"] == 262144
    assert info["num_gpu_blocks"] == 2048
    assert info["block_size"] == 128
    assert info["num_gpu_blocks"] * info["block_size"] == info["kv_cache_size_tokens"]
    assert info["kv_cache_max_concurrency"] == 128.0
    assert info["kv_cache_memory_bytes"] == 268435456
    assert info["gpu_memory_utilization"] == 0.92
    assert info["num_cpu_blocks"] is None
    assert info["enable_prefix_caching"] is True
    assert info["cache_dtype"] == "auto"
    assert info["engine"] == 0


def test_metrics_cross_check_with_the_startup_log():
    info = vllm_metrics_cache_info(fixture("metrics.txt"))
    report = vllm_startup_report(fixture("startup.log"))
    assert info["kv_cache_size_tokens"] == report["kv_cache_tokens"]
    assert info["kv_cache_max_concurrency"] == report["max_concurrency"]


def test_metrics_without_the_metric():
    info = vllm_metrics_cache_info("# HELP vllm:num_requests_running x\nvllm:num_requests_running 0.0\n")
    assert set(info) == set(vllm_startup.CACHE_INFO_KEYS)
    assert all(v is None for v in info.values())


def test_metrics_of_an_older_version_lack_labels():
    text = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",'
            'num_cpu_blocks="2048",num_gpu_blocks="17893",swap_space_bytes="4294967296"} 1.0\n')
    info = vllm_metrics_cache_info(text)
    assert info["block_size"] == 16
    assert info["num_gpu_blocks"] == 17893
    assert info["num_cpu_blocks"] == 2048
    assert info["kv_cache_size_tokens"] is None
    assert info["kv_cache_max_concurrency"] is None
    assert info["swap_space_bytes"] == 4294967296


def test_metrics_several_engines_gives_engine_0():
    text = ('vllm:cache_config_info{engine="1",num_gpu_blocks="100"} 1.0\n'
            'vllm:cache_config_info{engine="0",num_gpu_blocks="200"} 1.0\n')
    assert vllm_metrics_cache_info(text)["num_gpu_blocks"] == 200


def test_metrics_escaped_label_value():
    text = 'vllm:cache_config_info{cache_dtype="a\\"b",block_size="16",prefix_caching_hash_algo="sha256"} 1.0\n'
    info = vllm_metrics_cache_info(text)
    assert info["cache_dtype"] == 'a"b'
    assert info["block_size"] == 16


def cuda_fixture(name):
    return read_fixture("vllm-0.28.0-cuda", name)


def test_real_startup_log_of_the_cuda_build_on_an_h100():
    """The CUDA build's start (tiny model, H100): the KV pool, and where the start's time and memory went."""
    report = vllm_startup_report(cuda_fixture("tiny-h100-startup.log"))
    assert report["kv_cache_tokens"] == 78511152
    assert report["concurrency_tokens"] == 4096
    assert report["max_concurrency"] == 19167.76
    assert report["available_kv_cache_gib"] == 74.87
    assert report["init_seconds"] == 23.21
    assert report["compile_seconds"] == 12.99
    assert report["weights_gib"] == 0.0
    assert report["weights_load_seconds"] == 1.491499
    assert report["cuda_graph_seconds"] == 1.0
    assert report["cuda_graph_gib"] == 0.07
    assert report["version"] == "0.28.0"
    assert report["engine_errors"] == []
    assert report["forms"] == ["model_loading", "torch_compile", "available_kv_cache_memory", "kv_cache_single_line",
                               "graph_capturing", "init_engine", "compilation"]
