"""Unit tests of the playbooks/site.yml rolling-change filters (plugins/filter/site_rollout.py).

Data-driven: the cases are in tests/unit/data/site_rollout_cases.yaml.
"""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter import site_rollout

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases, case_ids

CASES = load_cases("site_rollout_cases.yaml", "cases")


def _settings(case):
    return {"serial": None, "max_fail_percentage": None, **case["settings"]}


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_errors(case):
    assert_errors_match(site_rollout.site_rollout_errors(_settings(case)), case["expect_errors"])


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_keywords(case):
    if case["expect"] is None:
        with pytest.raises(AnsibleFilterError) as raised:
            site_rollout.site_rollout(_settings(case))
        message = str(raised.value)
        assert message.startswith("site.yml: ") and "Nothing was changed on the hosts." in message
        for fragments in case["expect_errors"]:
            assert all(f in message for f in fragments), message
    else:
        assert site_rollout.site_rollout(_settings(case)) == case["expect"]


def test_missing_keys_are_the_defaults():
    assert site_rollout.site_rollout({}) == {"serial": 0, "max_fail_percentage": 100.0}


def test_filters_registered():
    assert set(site_rollout.FilterModule().filters()) == {"site_rollout_errors", "site_rollout"}
