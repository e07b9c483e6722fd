"""Unit tests of the Jinja filters over the collection's one reader of Prometheus text (plugins/filter/
prometheus_text.py over plugins/module_utils/prometheus_text.py). Data-driven: the `filters` cases of
tests/unit/data/prometheus_text_cases.yaml, over the real vLLM 0.28.0 captures of tests/fixtures/vllm-0.28.0/."""
from __future__ import annotations

import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter import prometheus_text as pt_filter
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, case_text, load_cases

FILTERS = load_cases("prometheus_text_cases.yaml", "filters")


@pytest.mark.parametrize("case", FILTERS, ids=case_ids(FILTERS))
def test_filters(case):
    filters = pt_filter.FilterModule().filters()
    text = case["input"] if "input" in case else case_text(case)
    if "error" in case:
        with pytest.raises(AnsibleFilterError, match=re.escape(case["error"])):
            filters[case["filter"]](text, *case["args"])
        return
    assert filters[case["filter"]](text, *case["args"]) == case["expect"]
