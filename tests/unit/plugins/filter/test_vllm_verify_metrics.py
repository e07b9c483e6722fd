"""The verification as Prometheus series (vllm_verify_textfile) and speculative decoding's acceptance over the probe
(vllm_verify_spec_decode), plugins/filter/vllm_verify_metrics.py; cases in tests/unit/data/vllm_verify_metrics_cases.yaml.
The text is read back with the collection's one reader (plugins/module_utils/prometheus_text.py)."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.inference.plugins.filter.vllm_verify_metrics import (
    FilterModule,
    vllm_verify_spec_decode,
    vllm_verify_textfile,
)
from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import samples
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("vllm_verify_metrics_cases.yaml")


@pytest.mark.parametrize("case", CASES["textfile"], ids=case_ids(CASES["textfile"]))
def test_textfile(case):
    text = vllm_verify_textfile(case["report"])
    got = samples(text, use_client=False)
    for name, labels, value in case["expect"]:
        assert [s.value for s in got if s.name == name and s.labels == labels] == [value], (name, labels, text)
    names = [s.name for s in got]
    for name in case.get("absent", []):
        assert name not in names, text
    for name, count in case.get("count", {}).items():
        assert names.count(name) == count, text
    assert all(s.name.startswith("gpuhost_verify_") and "profile" not in s.labels for s in got)


@pytest.mark.parametrize("case", CASES["spec_decode"], ids=case_ids(CASES["spec_decode"]))
def test_spec_decode(case):
    assert vllm_verify_spec_decode(case["after"], case["before"], case["settings"]) == case["expect"]


def test_bad_input():
    with pytest.raises(AnsibleFilterError):
        vllm_verify_textfile("not a report")
    assert set(FilterModule().filters()) == {"vllm_verify_textfile", "vllm_verify_spec_decode"}
