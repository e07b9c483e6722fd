# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/filter/systemd_env.py, the filter over the env-file reader.

Data-driven: the reader's cases (tests/unit/data/systemd_env_cases.yaml) through the filter, and through Ansible's
templar as a play writes it.
"""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.plugins.filter import systemd_env as f
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("systemd_env_cases.yaml")
PARSE = CASES["parse"]


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_filter(case):
    assert f.systemd_env(case["text"], case.get("systemd_version")) == case["expect"]


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_through_the_templar(case):
    templar = Templar(loader=DataLoader(), variables={"text": case["text"], "version": case.get("systemd_version")})
    got = templar.template(trust_as_template("{{ text | gpuhost.inference.systemd_env(version) }}"))
    assert dict(got) == case["expect"]


def test_null_is_empty_and_non_text_fails():
    assert f.systemd_env(None) == {}
    with pytest.raises(AnsibleFilterError, match="a string"):
        f.systemd_env(["VLLM_PROFILE=x"])


@pytest.mark.parametrize("case", CASES["errors"], ids=case_ids(CASES["errors"]))
def test_errors(case):
    text = bytes(case["bytes"]) if "bytes" in case else case["text"]
    with pytest.raises(AnsibleFilterError, match=case["message"]):
        f.systemd_env(text, case.get("systemd_version"))


def test_registered():
    assert set(f.FilterModule().filters()) == {"systemd_env"}
