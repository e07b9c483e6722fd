"""Unit tests of plugins/filter/vllm_verify_compare.py (issue 46.2: better or back).

Data-driven: the cases are in tests/unit/data/vllm_verify_compare_cases.yaml.
"""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.filter.vllm_verify_compare import FilterModule, vllm_verify_compare

from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("vllm_verify_compare_cases.yaml", "cases")


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_compare(case):
    got = vllm_verify_compare(case["report"], case["baseline"], case["max_regression"])
    for key, want in case["expect"].items():
        assert got[key] == want, key
    rows = {r["metric"]: r for r in got["rows"]}
    for metric, (change, ok) in (case.get("rows") or {}).items():
        assert rows[metric]["change"] == change, metric
        assert rows[metric]["ok"] is ok, metric
    if case["gate"] is None:
        assert got["gate"] is None
    else:
        assert got["gate"]["name"] == "max_regression"
        assert got["gate"]["ok"] is case["gate"]["ok"]
        assert got["gate"]["value"] == case["gate"]["value"]
        assert got["gate"]["threshold"] == case["max_regression"]
        for fragment in case["gate"]["detail"]:
            assert fragment in got["gate"]["detail"]


@pytest.mark.parametrize("bad", [-0.1, "x", None, True])
def test_max_regression_must_be_a_number_at_least_zero(bad):
    with pytest.raises(ValueError, match="max_regression"):
        vllm_verify_compare({}, {}, bad)


def test_filters_registered():
    assert FilterModule().filters() == {"vllm_verify_compare": vllm_verify_compare}
