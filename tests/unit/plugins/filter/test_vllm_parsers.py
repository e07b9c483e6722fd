"""Unit tests of the parser filters (plugins/filter/vllm_parsers.py) and of the role's parsers file.

Data-driven cases in tests/unit/data/vllm_parsers_cases.yaml; the parsers file is the one the role ships
(roles/vllm_service/files/vllm-0.28.0-parsers.yml, the default pin's names, with vllm-parser-families.yml), the flags
the role's flag list.
"""
from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.gpuhost.inference.plugins.filter.vllm_parsers import (
    FilterModule,
    vllm_parser_choice,
    vllm_parser_errors,
    vllm_parser_model_info,
)
from ansible_collections.gpuhost.inference.plugins.filter.vllm_profile import vllm_profile_errors

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

ROLE = os.path.join(ROOT, "roles", "vllm_service")
CASES = load_cases("vllm_parsers_cases.yaml")
with open(os.path.join(ROLE, "files", "vllm-parser-families.yml"), encoding="utf-8") as fh:
    PARSERS = yaml.safe_load(fh)
# As the role's vars/main.yml merges them: the families, then the release's names and version.
with open(os.path.join(ROLE, "files", "vllm-0.28.0-parsers.yml"), encoding="utf-8") as fh:
    PARSERS.update(yaml.safe_load(fh))
with open(os.path.join(ROLE, "files", "vllm-0.28.0-serve-flags.txt"), encoding="utf-8") as fh:
    FLAGS = fh.read().split()
ROW_KEYS = {"family", "match", "tool_call_parser", "reasoning_parser"}
MATCH_KEYS = {"names", "model_types", "architectures"}


def _inventory(*parts):
    with open(os.path.join(ROOT, "inventories", *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.mark.parametrize("case", CASES["families"], ids=case_ids(CASES["families"]))
def test_families(case):
    got = vllm_parser_choice({"model": case["model"], "config": case["config"], "has_chat_template": None}, PARSERS)
    assert {k: got[k] for k in ("family", "tool_call_parser", "reasoning_parser")} == case["expect"]
    assert got["source"] == ("auto: %s" % case["expect"]["family"] if case["expect"]["family"] else "auto: no row matched")


@pytest.mark.parametrize("case", CASES["choice"], ids=case_ids(CASES["choice"]))
def test_choice(case):
    got = vllm_parser_choice(case["model_info"], PARSERS, case.get("tool_call_parser", "auto"),
                             case.get("reasoning_parser", "auto"), case.get("chat_template", ""))
    assert got == case["expect"]


@pytest.mark.parametrize("case", CASES["errors"], ids=case_ids(CASES["errors"]))
def test_errors(case):
    errors = vllm_parser_errors(case["model_info"], PARSERS, case["tool_call_parser"], case["reasoning_parser"],
                                case.get("chat_template", ""))
    assert_errors_match(errors, case["expect_errors"])


@pytest.mark.parametrize("case", CASES["model_info"], ids=case_ids(CASES["model_info"]))
def test_model_info(case):
    assert vllm_parser_model_info(case["model"], case["files"], case.get("texts")) == case["expect"]


@pytest.mark.parametrize("case", CASES["profile_errors"], ids=case_ids(CASES["profile_errors"]))
def test_profile_errors(case):
    parsers = None if case.get("parsers") is False else PARSERS
    errors = vllm_profile_errors(case["profiles"], FLAGS, case["active"], common=case.get("common"), parsers=parsers)
    assert_errors_match(errors, case["expect_errors"])


def test_empty_parser_lists_are_reported():
    errors = vllm_parser_errors({"model": "m"}, {"families": []}, "auto", "auto")
    assert len(errors) == 2 and all("is empty" in e for e in errors)


def test_filters_registered():
    filters = FilterModule().filters()
    assert filters["vllm_parser_choice"] is vllm_parser_choice
    assert filters["vllm_parser_errors"] is vllm_parser_errors
    assert filters["vllm_parser_model_info"] is vllm_parser_model_info


def test_choice_does_not_change_its_inputs():
    info = {"model": "/srv/models/m", "config": {"model_type": "qwen3"}, "has_chat_template": True}
    before = yaml.safe_dump(PARSERS)
    vllm_parser_choice(info, PARSERS, "auto", "auto", "/etc/t.jinja")
    assert info == {"model": "/srv/models/m", "config": {"model_type": "qwen3"}, "has_chat_template": True}
    assert yaml.safe_dump(PARSERS) == before


# --- the role's parsers file -------------------------------------------------------------------

def test_registered_lists_are_the_reference_names():
    for key in ("tool_call_parsers", "reasoning_parsers"):
        ours = PARSERS[key]
        assert ours == CASES["reference"][key].split(), key
        assert len(ours) == len(set(ours)), key
    assert len(PARSERS["tool_call_parsers"]) == 48
    assert len(PARSERS["reasoning_parsers"]) == 31


def test_every_name_in_the_table_is_registered():
    for row in PARSERS["families"]:
        for key, names in (("tool_call_parser", "tool_call_parsers"), ("reasoning_parser", "reasoning_parsers")):
            value = row[key]
            assert value == "none" or value in PARSERS[names], (row["family"], key, value)


def test_table_rows_shape():
    families = [row["family"] for row in PARSERS["families"]]
    assert len(families) == len(set(families))
    for row in PARSERS["families"]:
        assert set(row) == ROW_KEYS, row
        assert row["match"] and set(row["match"]) <= MATCH_KEYS, row["family"]
        for pattern in row["match"].get("names", []):
            re.compile(pattern)
            assert pattern == pattern.lower(), (row["family"], pattern)  # searched in the lowercased identity


def test_every_row_has_a_case():
    covered = {case["expect"]["family"] for case in CASES["families"]}
    assert {row["family"] for row in PARSERS["families"]} <= covered


def test_the_brief_s_families_come_in_order():
    # The more specific rows first: the first match wins.
    order = [row["family"] for row in PARSERS["families"]]
    for before, after in (("Qwen3-Coder", "Qwen3"), ("Qwen3.5", "Qwen3"), ("Qwen3-Next", "Qwen3"),
                          ("Kimi K2", "DeepSeek V3"), ("DeepSeek R1", "DeepSeek V3"), ("GLM-4.7", "GLM-4.5"),
                          ("Magistral", "Mistral")):
        assert order.index(before) < order.index(after), (before, after)


# --- the inventories ---------------------------------------------------------------------------

def test_the_rigs_model_gets_qwen3_coder_and_qwen3():
    fleet = _inventory("rigs", "group_vars", "all.yml")
    got = vllm_parser_choice({"model": fleet["vllm_service_model"], "config": {}, "has_chat_template": None}, PARSERS,
                             fleet.get("vllm_service_tool_call_parser", "auto"),
                             fleet.get("vllm_service_reasoning_parser", "auto"))
    assert (got["tool_call_parser"], got["reasoning_parser"], got["source"]) == ("qwen3_coder", "qwen3", "auto: Qwen3.5")


def test_the_demo_model_gets_the_rigs_tool_parser_and_no_reasoning():
    lab = _inventory("demo", "group_vars", "gpu_servers.yml")
    info = {"model": lab["vllm_service_model"], "config": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
            "has_chat_template": True}
    args = (lab["vllm_service_tool_call_parser"], lab["vllm_service_reasoning_parser"])
    assert vllm_parser_errors(info, PARSERS, *args) == []
    got = vllm_parser_choice(info, PARSERS, *args)
    assert got["settings"] == {"enable_auto_tool_choice": True, "tool_call_parser": "qwen3_coder"}
    assert got["source"] == "explicit"
    # `auto` would give a plain Qwen3 hermes: the lab names the rigs' parser instead.
    assert vllm_parser_choice(info, PARSERS, "auto", "none")["tool_call_parser"] == "hermes"
