"""Unit tests of vllm_service's weights filters (plugins/filter/vllm_service_weights.py).

Data-driven: the cases are in tests/unit/data/vllm_service_weights_cases.yaml. The script's answers of a
case are wrapped as Ansible registers a loop result, so the filters read what the role hands them.
"""
from __future__ import annotations

import json
import os

import pytest
import yaml

from ansible_collections.gpuhost.inference.plugins.filter import vllm_service_weights as weights
from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, load_cases

CASES = load_cases("vllm_service_weights_cases.yaml")
ROLE = os.path.join(ROOT, "roles", "vllm_service")


def registered(items):
    """A loop's register: {results: [{__vllm_service_repo, stdout} | {skipped}]} from compact case items."""
    if items is None:
        return {}
    results = []
    for item in items:
        repo = {"repo_id": item["repo_id"], "revision": item.get("revision", "")}
        if item.get("skipped"):
            results.append({"__vllm_service_repo": repo, "skipped": True, "changed": False})
        else:
            stdout = item["stdout"] if "stdout" in item else json.dumps(item["answer"])
            results.append({"__vllm_service_repo": repo, "stdout": stdout, "rc": 0, "changed": False})
    return {"results": results, "changed": False, "msg": "All items completed"}


def _ids(section):
    return [c["id"] for c in CASES[section]]


@pytest.mark.parametrize("case", CASES["plan"], ids=_ids("plan"))
def test_plan(case):
    plan = weights.vllm_service_weights_plan(case["profiles"], case["common"], prefetch=case.get("prefetch", True))
    if "expect" in case:
        assert plan == case["expect"]
    for key, value in case.get("expect_keys", {}).items():
        assert plan[key] == value, (key, plan)


def test_plan_of_the_role_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as fh:
        defaults = yaml.safe_load(fh)
    plan = weights.vllm_service_weights_plan(defaults["vllm_service_profiles"], {"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"})
    assert [r["repo_id"] for r in plan["repos"]] == ["Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"]
    assert plan["repos"][0]["used_by"] == ["default: model", "long: model", "mtp: model", "single_gpu: model"]
    assert plan["fetch"] is True


def test_plan_wants_a_mapping():
    with pytest.raises(TypeError, match="profiles must be a mapping"):
        weights.vllm_service_weights_plan(["default"], {})


@pytest.mark.parametrize("value, kind", CASES["model_kind"], ids=[str(c[0]) for c in CASES["model_kind"]])
def test_model_kind(value, kind):
    assert weights.model_kind(value) == kind


def test_model_kind_length_limit():
    assert weights.model_kind("o/" + "n" * 94) == "hub" and weights.model_kind("o/" + "n" * 95) == "other"


@pytest.mark.parametrize("case", CASES["fetch_args"], ids=_ids("fetch_args"))
def test_fetch_args(case):
    assert weights.vllm_service_fetch_args(case["repo"], case["mode"], case["cache_dir"], **case["kwargs"]) == case["expect"]


def test_fetch_args_refuses_a_bad_mode_or_repo():
    with pytest.raises(ValueError, match="mode must be fetch, look or check"):
        weights.vllm_service_fetch_args({"repo_id": "a/b"}, "pull", "/c")
    with pytest.raises(TypeError, match="repo must be an entry"):
        weights.vllm_service_fetch_args("a/b", "look", "/c")


@pytest.mark.parametrize("case", CASES["fetch_result"], ids=_ids("fetch_result"))
def test_fetch_result(case):
    out = weights.vllm_service_fetch_result(case["stdout"])
    if "expect" in case:
        assert out == case["expect"]
    else:
        assert out["ok"] is False and out["changed"] is False and case["expect_error"] in out["error"], out


@pytest.mark.parametrize("case", CASES["hf_offline"], ids=_ids("hf_offline"))
def test_hf_offline(case):
    assert weights.vllm_service_hf_offline(case["setting"], case["plan"], registered(case.get("looks"))) is case["expect"]


def test_hf_offline_refuses_other_values():
    with pytest.raises(ValueError, match="vllm_service_hf_offline must be auto, true or false"):
        weights.vllm_service_hf_offline("yes", {"repos": [], "skipped": []})


@pytest.mark.parametrize("case", CASES["todo"], ids=_ids("todo"))
def test_todo(case):
    todo = weights.vllm_service_weights_todo(case["plan"], registered(case.get("looks")))
    assert [r["repo_id"] for r in todo] == case["expect"]


@pytest.mark.parametrize("case", CASES["report"], ids=_ids("report"))
def test_report(case):
    out = weights.vllm_service_weights_report(case["plan"], registered(case.get("looks")),
                                              registered(case.get("fetches")), check_mode=case.get("check_mode", False))
    assert out == {"lines": case["expect_lines"], "errors": case["expect_errors"], "changed": case["expect_changed"]}


ERRORS = CASES["errors"]


@pytest.mark.parametrize("case", ERRORS["cases"], ids=[c["id"] for c in ERRORS["cases"]])
def test_errors(case):
    assert_errors_match(weights.vllm_service_weights_errors(dict(ERRORS["base"], **case["values"])), case["expect_errors"])


def test_errors_of_the_role_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as fh:
        defaults = yaml.safe_load(fh)
    values = {name: defaults[name] for name in ERRORS["base"] if name in defaults}
    values.update(vllm_service_model="org/name", hf_token_file_exists=False)
    assert weights.vllm_service_weights_errors(values) == []


def test_errors_wants_a_mapping():
    with pytest.raises(TypeError, match="must be a mapping"):
        weights.vllm_service_weights_errors([])


def test_preflight_passes_every_key_the_filter_reads():
    """The preflight gives the errors filter every variable it reads (a missing one is never checked): the role's
    variables by name prefix (varnames '^vllm_service_'), what is derived from them by name."""
    with open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8") as fh:
        text = fh.read()
    assert "query('ansible.builtin.varnames', '^vllm_service_')" in text
    for name in ERRORS["base"]:
        assert name.startswith("vllm_service_") or "'%s':" % name in text, name


def test_filters_registered():
    names = set(weights.FilterModule().filters())
    assert names == {"vllm_service_weights_plan", "vllm_service_fetch_args", "vllm_service_fetch_result",
                     "vllm_service_weights_todo", "vllm_service_hf_offline", "vllm_service_weights_report",
                     "vllm_service_weights_errors"}
    for name in names:
        assert os.path.isfile(os.path.join(ROOT, "plugins", "filter", name + ".yml")), name
