"""playbooks/tasks/study_setup.yml (the header of sweep.yml and tune.yml) refuses, before anything changes, an extra
var that would outrank what each run sets (-e vllm_service_profile=... would have every run serve that profile under
the run's own name). Run by ansible-playbook on localhost; cases in data/study_extra_vars_cases.yaml. The list the task
checks is the list of variables the studies' own tasks set for the roles they include.
"""
from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases, tasks_of
from ansible_collections.gpuhost.inference.tests.unit.playbook_run import run_playbook

CASES = load_cases("study_extra_vars_cases.yaml", "cases")
PLAYBOOKS = os.path.join(ROOT, "playbooks")
STUDY_FILES = ["sweep.yml", "tune.yml", "tasks/study_measure.yml", "tasks/study_restore.yml",
               "tasks/study_restore_profile.yml", "tasks/sweep_run.yml", "tasks/tune_trial.yml"]


def _load(name):
    with open(os.path.join(PLAYBOOKS, name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _included_role_vars(name):
    """The public variables that the include_role / import_role tasks of a playbook or task file set."""
    return {var for task in tasks_of(_load(name))
            if "ansible.builtin.include_role" in task or "ansible.builtin.import_role" in task
            for var in task.get("vars") or {} if not var.startswith("_")}


def _check_task():
    return _load("tasks/study_setup.yml")[0]


def test_the_check_covers_every_variable_the_runs_set():
    task = _check_task()
    checked = task["vars"]["__study_run_vars"]
    set_by_runs = set().union(*(_included_role_vars(name) for name in STUDY_FILES))
    assert set_by_runs and set(checked) == set_by_runs, (sorted(checked), sorted(set_by_runs))
    # Each is a task var of its own name holding the probe (what an extra var outranks).
    assert all(task["vars"][name] == "{{ __study_probe }}" for name in checked)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_extra_vars_that_outrank_the_runs_are_refused(tmp_path, case):
    report_dir = tmp_path / "reports"
    tasks = [{"name": "The studies' header",
              "ansible.builtin.include_tasks": {"file": os.path.join(PLAYBOOKS, "tasks", "study_setup.yml")},
              "vars": {"__study_kind": case["kind"], "__study_report_dir_setting": str(report_dir),
                       # Where the header reads the unit's env file: nothing there on this machine.
                       "vllm_service_env_file": str(tmp_path / "vllm.env")}}]
    result = run_playbook(tmp_path, tasks, case["extra_vars"], name="study header")
    if case["expect_errors"]:
        assert result.returncode != 0, result.stdout[-2000:]
        missing = [s for s in case["expect_errors"] if s not in result.stdout]
        assert not missing, "%r not in:\n%s" % (missing, result.stdout[-3000:])
        assert not report_dir.exists(), "the refused header made %s" % report_dir
    else:
        assert result.returncode == 0, result.stdout[-3000:]
        assert (report_dir / "localhost").is_dir(), result.stdout[-2000:]
