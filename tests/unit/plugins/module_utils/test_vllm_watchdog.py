"""Unit tests of the watchdog's judging (roles/vllm_service/files/vllm_watchdog.py) over recorded /metrics sequences.

Data-driven: tests/unit/data/vllm_watchdog_cases.yaml. The /metrics snapshots a step names are captures of
the real vLLM 0.28.0 CPU build (tests/fixtures/vllm-0.28.0/watchdog/, see its README for how each was taken);
a step's ``metrics`` may also patch a snapshot's values (``{from: NAME, set: {metric: value}}``) for the
sequences a CPU box cannot produce on demand (a long chunked prefill).
"""
from __future__ import annotations

import os
import shutil

import pytest

import importlib.util as _ilu

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT as _ROOT

# The target-side script (roles/vllm_service/files/vllm_watchdog.py, stdlib only), loaded by path.
_SPEC = _ilu.spec_from_file_location("vllm_watchdog", _ROOT + "/roles/vllm_service/files/vllm_watchdog.py")
wd = _ilu.module_from_spec(_SPEC)
_SPEC.loader.exec_module(wd)
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, case_ids, load_cases

SNAPSHOTS = os.path.join(FIXTURES, "vllm-0.28.0", "watchdog")
JUDGE = load_cases("vllm_watchdog_cases.yaml", "judge")
PARSE = load_cases("vllm_watchdog_cases.yaml", "parse")
ORPHANS = load_cases("vllm_watchdog_cases.yaml", "orphans")
ENV = load_cases("vllm_watchdog_cases.yaml", "env")
READER = _ROOT + "/plugins/module_utils/systemd_env.py"


def snapshot(name):
    with open(os.path.join(SNAPSHOTS, name + ".txt"), encoding="utf-8") as fh:
        return fh.read()


def metrics_text(spec):
    if isinstance(spec, str):
        return snapshot(spec)
    text = snapshot(spec["from"])
    out = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if not line.startswith("#") and name in spec.get("set", {}):
            line = line.rsplit(" ", 1)[0] + " " + str(float(spec["set"][name]))
            spec = dict(spec, set={k: v for k, v in spec["set"].items() if k != name})  # first series only
        out.append(line)
    return "\n".join(out) + "\n"


def sample_of(step, default_invocation):
    unit = {"ActiveState": step.get("active", "active"), "SubState": "running",
            "InvocationID": step.get("invocation", default_invocation)}
    sample = {"now": float(step["t"]), "wall": 1.8e9 + float(step["t"]), "unit": unit}
    health = step.get("health", 200)
    sample["health"] = {"ok": health == 200, "status": health, "error": None if health == 200 else "no answer"}
    spec = step.get("metrics")
    if spec is None:
        sample["metrics"] = {"ok": False, "status": 0, "error": "timeout after 10.0 s"}
    else:
        sample["metrics"] = dict({"ok": True, "status": 200, "error": None}, **wd.observe(metrics_text(spec)))
        if step.get("api_in_flight") is not None:
            sample["metrics"]["api_in_flight"] = step["api_in_flight"]
    if "canary" in step:
        sample["canary"] = step["canary"]
    return sample


@pytest.mark.parametrize("case", JUDGE, ids=case_ids(JUDGE))
def test_judge_sequences(case):
    state = case.get("state")
    seen = []
    for i, step in enumerate(case["steps"]):
        sample = sample_of(step, case.get("invocation", "inv-1"))
        before = state
        state, decision = wd.judge(state, sample, case.get("settings", {}))
        if decision["action"] == "canary" and "canary_answer" in step:
            sample["canary"] = step["canary_answer"]
            state, decision = wd.judge(before, sample, case.get("settings", {}))
        verdict = decision["verdict"]
        got = {"action": decision["action"], "phase": decision["phase"], "rule": verdict and verdict["rule"]}
        want = dict({"action": "none", "rule": None}, **step.get("expect", {}))
        assert {k: got[k] for k in want} == want, "step %d (t=%s): %s; so far %s" % (i, step["t"], decision, seen)
        for key, value in step.get("expect_verdict", {}).items():
            assert verdict[key] == value, (key, verdict)
        for key, value in step.get("expect_state", {}).items():
            assert state[key] == value, (key, state)
        seen.append((step["t"], decision["phase"], decision["action"], decision["note"]))


def test_judge_never_changes_its_input():
    state = wd.new_state()
    frozen = repr(state)
    sample = sample_of({"t": 0, "metrics": "idle"}, "inv-1")
    wd.judge(state, sample, {})
    assert repr(state) == frozen


def test_dry_run_judges_but_never_restarts():
    settings = {"stall_seconds": 30, "dry_run": True}
    state = None
    for t, name in ((0, "load_1"), (5, "frozen_1"), (40, "frozen_2")):
        state, decision = wd.judge(state, sample_of({"t": t, "metrics": name}, "inv-1"), settings)
    assert decision["verdict"]["rule"] == "stalled" and decision["verdict"]["action"] == "dry_run"
    assert decision["action"] == "none" and state["restarts_total"] == 0


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_observe_snapshots(case):
    got = wd.observe(snapshot(case["snapshot"]))
    for key, value in case["expect"].items():
        assert got[key] == value, (key, got)


def test_parse_sums_label_sets_and_skips_comments():
    text = ('# HELP vllm:request_success_total x\n'
            'vllm:request_success_total{finished_reason="stop"} 2.0\n'
            'vllm:request_success_total{finished_reason="length"} 3.0\n'
            'vllm:num_requests_running{engine="0"} NaN\n'
            'vllm:num_requests_waiting 1\n')
    assert wd.parse_metrics(text) == {"vllm:request_success_total": 5.0, "vllm:num_requests_waiting": 1.0}


@pytest.mark.parametrize("case", ORPHANS, ids=case_ids(ORPHANS))
def test_find_orphans(case, tmp_path):
    for pid, proc in case["procs"].items():
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "status").write_text("Name:\t%s\nState:\tS (sleeping)\nUid:\t%d\t%d\t%d\t%d\n" % (
            proc["name"], proc["uid"], proc["uid"], proc["uid"], proc["uid"]))
        (d / "cmdline").write_bytes(proc.get("cmdline", proc["name"]).replace(" ", "\0").encode() + b"\0")
        (d / "cgroup").write_text(proc["cgroup"])
    (tmp_path / "self").mkdir()
    own = wd.cgroup_of(case["own_cgroup"])
    got = [p["pid"] for p in wd.find_orphans(case["uid"], own, proc=str(tmp_path))]
    assert got == case["expect"]


@pytest.mark.parametrize("case", ENV, ids=case_ids(ENV))
def test_api_key(case, tmp_path, capsys):
    path = tmp_path / "secrets.env"
    if case.get("bytes") is not None:
        path.write_bytes(bytes(case["bytes"]))
    elif case["text"] is not None:
        path.write_text(case["text"])
    config = {"key_file": case.get("key_file", str(path))}
    if case["reader"] == "collection":
        config["env_reader"] = READER
    elif case["reader"] == "missing":
        config["env_reader"] = str(tmp_path / "absent" / "systemd_env.py")
    else:   # the default: systemd_env.py beside the script, as vllm_service installs them
        script = tmp_path / "lib" / "vllm_watchdog.py"
        script.parent.mkdir()
        shutil.copy(_ROOT + "/roles/vllm_service/files/vllm_watchdog.py", script)
        shutil.copy(READER, script.parent / "systemd_env.py")
        spec = _ilu.spec_from_file_location("vllm_watchdog_installed", str(script))
        installed = _ilu.module_from_spec(spec)
        spec.loader.exec_module(installed)
        assert installed.api_key(config) == case["expect"]
        return
    assert wd.api_key(config) == case["expect"]
    logged = capsys.readouterr().out
    if case.get("logged"):
        assert logged.startswith("<3>vllm-watchdog: ") and case["logged"] in logged, logged
    else:
        assert logged == ""


def test_the_watchdog_reads_no_env_file_itself():
    """One reader of env files in the collection: the watchdog has no parser of its own."""
    with open(_ROOT + "/roles/vllm_service/files/vllm_watchdog.py", encoding="utf-8") as fh:
        text = fh.read()
    assert "shlex" not in text and "read_env_value" not in text
