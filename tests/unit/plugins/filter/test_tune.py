"""Unit tests of the playbooks/tune.yml filters (plugins/filter/tune.py).

Data-driven: the cases are in tests/unit/data/tune_cases.yaml.
"""
from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuhost.inference.plugins.filter import tune

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases, case_ids

CASES = load_cases("tune_cases.yaml")
CONSTRAINTS = {"ttft_p95_s": 2.0, "min_full_context_concurrency": 1, "zero_errors": True}


@pytest.mark.parametrize("case", CASES["setting_errors"], ids=case_ids(CASES["setting_errors"]))
def test_setting_errors(case):
    settings = dict(CASES["base_settings"], **case["settings"])
    assert_errors_match(tune.tune_setting_errors(settings), case["expect_errors"])


@pytest.mark.parametrize("case", CASES["next"], ids=case_ids(CASES["next"]))
def test_next(case):
    trials = [{"config": c, "feasible": f, "objective": o} for c, f, o in case["trials"]]
    assert tune.tune_next(case["space"], trials) == case["expect"]


def test_walk_is_not_a_full_grid():
    """Three values in two dimensions: a violation at max_num_seqs=4 leaves 8 untried."""
    space = {"max_num_seqs": [2, 4, 8], "power_limit_w": [200, 250, 300]}
    feasible = {2: True, 4: False, 8: True}
    trials = []
    while (config := tune.tune_next(space, trials)) is not None:
        trials.append({"config": config, "feasible": feasible[config["max_num_seqs"]], "objective": 1})
    tried = [t["config"] for t in trials]
    assert {"max_num_seqs": 8, "power_limit_w": 300} not in tried
    assert len(tried) == 4  # 2@300, 4@300 (stop), 2@250, 2@200


def test_trial_reads_target_level():
    trial = tune.tune_trial(CASES["report"], {"max_num_seqs": 4}, target_concurrency=4, constraints=CONSTRAINTS)
    assert trial["metrics"]["tps"] == 30.0
    assert trial["metrics"]["ttft_p95_s"] == 0.8
    assert trial["feasible"] is True and trial["objective"] == 30.0


def test_trial_p99_when_no_p95_and_violation():
    trial = tune.tune_trial(CASES["report"], {"max_num_seqs": 1}, target_concurrency=1,
                            constraints=dict(CONSTRAINTS, ttft_p95_s=0.25))
    assert trial["metrics"]["ttft_p95_s"] == 0.3
    assert trial["failed"] == ["ttft_p95_s"] and not trial["feasible"]


def test_trial_counts_sampled_errors():
    report = copy.deepcopy(CASES["report"])
    report["levels"][2]["errors"] = {"500": 1}
    trial = tune.tune_trial(report, {"max_num_seqs": 4}, target_concurrency=4, constraints=CONSTRAINTS)
    assert trial["failed"] == ["zero_errors"] and trial["metrics"]["errors"] == 1


def test_trial_agent_ttft_constraint_reads_the_later_turns():
    report = copy.deepcopy(CASES["report"])
    report["agent"] = {"enabled": True, "errors_total": 0, "ttft_first_ms": {"p95": 900.0},
                       "ttft_later_ms": {"p50": 150.0, "p95": 400.0}}
    ok = tune.tune_trial(report, {"max_num_seqs": 4}, target_concurrency=4,
                         constraints=dict(CONSTRAINTS, agent_ttft_p95_s=0.5))
    assert ok["metrics"]["agent_ttft_p95_s"] == 0.4 and ok["feasible"] is True
    slow = tune.tune_trial(report, {"max_num_seqs": 4}, target_concurrency=4,
                           constraints=dict(CONSTRAINTS, agent_ttft_p95_s=0.3))
    assert slow["failed"] == ["agent_ttft_p95_s"]
    assert slow["checks"]["agent_ttft_p95_s"] == {"limit": 0.3, "value": 0.4, "ok": False}
    # No agent level in the report: the constraint cannot be judged, the trial is not feasible.
    blind = tune.tune_trial(CASES["report"], {"max_num_seqs": 4}, target_concurrency=4,
                            constraints=dict(CONSTRAINTS, agent_ttft_p95_s=1.0))
    assert blind["failed"] == ["agent_ttft_p95_s"] and blind["metrics"]["agent_ttft_p95_s"] is None
    # The agent level's failed turns count as errors.
    report["agent"]["errors_total"] = 4
    errs = tune.tune_trial(report, {"max_num_seqs": 4}, target_concurrency=4, constraints=CONSTRAINTS)
    assert errs["failed"] == ["zero_errors"] and errs["metrics"]["errors"] == 4


def test_trial_failed_start():
    trial = tune.tune_trial({}, {"max_num_seqs": 8}, started=False, target_concurrency=4, constraints=CONSTRAINTS)
    assert trial["failed"][0] == "started" and not trial["feasible"] and trial["objective"] is None


def test_choice_best_feasible():
    trials = [tune.tune_trial(CASES["report"], {"max_num_seqs": 4}, target_concurrency=4, constraints=CONSTRAINTS),
              tune.tune_trial(CASES["report"], {"max_num_seqs": 2}, target_concurrency=1, constraints=CONSTRAINTS)]
    choice = tune.tune_choice(trials)
    assert choice["ok"] and choice["chosen"]["config"] == {"max_num_seqs": 4}


def test_choice_no_feasible_names_closest_and_failed_constraint():
    tight = dict(CONSTRAINTS, ttft_p95_s=0.5)
    trials = [tune.tune_trial({}, {"max_num_seqs": 8}, started=False, target_concurrency=4, constraints=tight),
              tune.tune_trial(CASES["report"], {"max_num_seqs": 4}, target_concurrency=4, constraints=tight)]
    choice = tune.tune_choice(trials)
    assert not choice["ok"] and choice["closest"]["config"] == {"max_num_seqs": 4}
    assert choice["msg"] == ("no feasible configuration in 2 trials; closest: max_num_seqs=4, "
                             "failed: ttft_p95_s (value 0.8, limit 0.5)")


def test_profile_overrides_and_drops_cap():
    base = {"description": "d", "settings": {"max_model_len": 512, "max_num_seqs": 16, "gpu_memory_utilization": 0.9},
            "environment": {"X": "1"}}
    out = tune.tune_profile(base, {"max_num_seqs": 4, "power_limit_w": 200, "kv_cache_memory_bytes": 1000})
    assert out["settings"] == {"max_model_len": 512, "max_num_seqs": 4, "kv_cache_memory_bytes": 1000}
    assert out["environment"] == {"X": "1"} and "max_num_seqs=4" in out["description"]
    assert base["settings"]["max_num_seqs"] == 16


def test_host_vars_merge_keeps_others_and_is_idempotent():
    existing = {"vllm_service_profile": "default", "vllm_service_extra_profiles": {"other": {"max_num_seqs": 1}}}
    once = tune.tune_host_vars(existing, {"max_num_seqs": 4})
    assert once == {"vllm_service_profile": "default",
                    "vllm_service_extra_profiles": {"other": {"max_num_seqs": 1}, "tuned": {"max_num_seqs": 4}}}
    assert tune.tune_host_vars(once, {"max_num_seqs": 4}) == once
    assert tune.tune_host_vars(None, {"a": 1}, activate=True)["vllm_service_profile"] == "tuned"


def test_filters_registered():
    assert set(tune.FilterModule().filters()) == {"tune_setting_errors", "tune_next", "tune_trial", "tune_choice",
                                                  "tune_profile", "tune_host_vars"}
