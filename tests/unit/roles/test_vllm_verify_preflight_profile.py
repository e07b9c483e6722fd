# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/vllm_verify/tasks/preflight_profile.yml picks the active profile as systemd gives it to the unit: its own
set_fact expression, rendered by Ansible's templar over the env-file cases (tests/unit/data/systemd_env_cases.yaml)."""
from __future__ import annotations

import base64
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

CASES = load_cases("systemd_env_cases.yaml", "parse")
TASKS = os.path.join(ROOT, "roles", "vllm_verify", "tasks", "preflight_profile.yml")


def pick_task():
    """The set_fact task that sets __vllm_verify_profile (at the top level or in a block)."""
    with open(TASKS, encoding="utf-8") as fh:
        tasks = yaml.safe_load(fh)
    flat = [t for task in tasks for t in ([task] + task.get("block", []))]
    return next(t for t in flat if "__vllm_verify_profile" in t.get("ansible.builtin.set_fact", {}))


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_the_profile_is_what_systemd_gives_the_unit(case):
    expression = pick_task()["ansible.builtin.set_fact"]["__vllm_verify_profile"]
    facts = {} if case.get("systemd_version") is None else {"systemd": {"version": int(case["systemd_version"])}}
    variables = {"ansible_facts": facts,
                 "__vllm_verify_env_raw": {"content": base64.b64encode(case["text"].encode("utf-8")).decode("ascii")}}
    got = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))
    assert got == case["expect"].get("VLLM_PROFILE", "")
