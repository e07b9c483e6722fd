"""Unit tests of the watchdog's judging (roles/vllm_service/files/vllm_watchdog.py) over recorded /metrics sequences.

Data-driven: tests/unit/data/vllm_watchdog_cases.yaml. The /metrics snapshots a step names are captures of
the real vLLM 0.28.0 CPU build (tests/fixtures/vllm-0.28.0/watchdog/, see its README for how each was taken);
a step's ``metrics`` may also patch a snapshot's values (``{from: NAME, set: {metric: value}}``) for the
sequences a CPU box cannot produce on demand (a long chunked prefill).
"""
from __future__ import annotations

import os
import re
import shutil
import types

import pytest

import importlib.util as _ilu

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT as _ROOT

# The target-side script (roles/vllm_service/files/vllm_watchdog.py, stdlib only), loaded by path.
_SPEC = _ilu.spec_from_file_location("vllm_watchdog", _ROOT + "/roles/vllm_service/files/vllm_watchdog.py")
wd = _ilu.module_from_spec(_SPEC)
_SPEC.loader.exec_module(wd)
# The unit's start-up orphan check beside it (roles/vllm_service/files/vllm_orphans.py), loaded the same way.
_ORPHANS_SPEC = _ilu.spec_from_file_location("vllm_orphans", _ROOT + "/roles/vllm_service/files/vllm_orphans.py")
orph = _ilu.module_from_spec(_ORPHANS_SPEC)
_ORPHANS_SPEC.loader.exec_module(orph)
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
        if step.get("api_done") is not None:
            sample["metrics"]["api_done"] = float(step["api_done"])
    if step.get("again"):
        sample["again"] = True
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
        elif decision["action"] == "tool_canary" and "tool_canary_answer" in step:
            sample["tool_canary"] = step["tool_canary_answer"]
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
    own = orph.cgroup_of(case["own_cgroup"])
    got = [p["pid"] for p in orph.find_orphans(case["uid"], own, proc=str(tmp_path))]
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


CHECK = load_cases("vllm_watchdog_cases.yaml", "check")
WRITER = _ROOT + "/plugins/module_utils/gpuhost_textfile.py"


def _textfile_values(path, names):
    """{name or name{label=value}: value} of the textfile, read with the collection's Prometheus text reader."""
    parsed = wd.load_metrics_reader().samples(open(path, encoding="utf-8").read())
    out = {}
    for want in names:
        name, _sep, sel = want.partition("{")
        labels = dict(kv.split("=", 1) for kv in sel.rstrip("}").split(",")) if sel else None
        out[want] = wd.load_metrics_reader().total(parsed, name, labels)
    return out


@pytest.mark.parametrize("case", CHECK, ids=case_ids(CHECK))
def test_check_on_a_box(case, tmp_path, monkeypatch):
    """One whole check: the suspicion is in the textfile before any canary goes, the canaries go back to back within
    the check, and the verdict's restart comes after the textfile says so."""
    settings = dict(case["settings"])
    state = None
    for step in case["state_from"]:   # the checks before, judged as the box would have
        state, _decision = wd.judge(state, sample_of(step, "inv-1"), settings)
    textdir = tmp_path / "node-exporter"
    textdir.mkdir()
    config = dict(settings, unit="vllm.service", base_url="http://127.0.0.1:8000", state_file=str(tmp_path / "s.json"),
                  textfile_dir=str(textdir), textfile_name="gpuhost_vllm_watchdog.prom", textfile_writer=WRITER,
                  key_file="")
    wd.save_json(config["state_file"], state)
    textfile = textdir / "gpuhost_vllm_watchdog.prom"
    clock = {"now": float(case["at"])}
    seen = {"canaries": 0, "systemctl": [], "at_canary": [], "at_restart": []}
    names = sorted(set(case.get("expect_textfile_at_canary", {})) | set(case.get("expect_textfile_at_restart", {}))
                   | set(case.get("expect_textfile_at_end", {})))

    def http_get(_base, path, _timeout, _key="", _payload=None):   # the server: a frozen engine
        body = {"/metrics": metrics_text(case["metrics"]), "/health": "",
                "/load": '{"server_load": %d}' % case["api_in_flight"]}[path]
        return {"ok": True, "status": 200, "error": None, "body": body, "seconds": 0.01}

    def canary(_base, _key, _timeout, moved=None):
        assert moved is not None and moved() is False   # a frozen engine: its counters stand still
        seen["at_canary"].append(_textfile_values(str(textfile), names))
        answer = case["canaries"][seen["canaries"]]
        seen["canaries"] += 1
        clock["now"] += answer["seconds"]
        return answer

    def run(argv, **_kwargs):
        if argv[:2] == ["systemctl", "show"]:
            return types.SimpleNamespace(returncode=0, stdout="ActiveState=active\nInvocationID=inv-1\n", stderr="")
        seen["systemctl"].append(argv[1])
        if argv[1] == "kill":
            seen["at_restart"].append(_textfile_values(str(textfile), names))
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(wd, "http_get", http_get)
    monkeypatch.setattr(wd, "canary", canary)
    monkeypatch.setattr(wd.subprocess, "run", run)
    monkeypatch.setattr(wd.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(wd.time, "time", lambda: 1.8e9 + clock["now"])
    assert wd.check(config) == 0
    assert seen["canaries"] == case["expect_canaries"]
    assert seen["systemctl"] == case["expect_systemctl"]
    want = case.get("expect_textfile_at_canary", {})
    for at in seen["at_canary"][:1]:
        assert {k: at[k] for k in want} == want
    if "expect_textfile_at_restart" in case:
        assert seen["at_restart"] and seen["at_restart"][0] == {
            k: seen["at_restart"][0][k] for k in names} and all(
            seen["at_restart"][0][k] == v for k, v in case["expect_textfile_at_restart"].items()), seen["at_restart"]
    if "expect_textfile_at_end" in case:
        got = _textfile_values(str(textfile), names)
        assert {k: got[k] for k in case["expect_textfile_at_end"]} == case["expect_textfile_at_end"]


def test_no_textfile_without_its_directory(tmp_path):
    config = {"textfile_dir": str(tmp_path / "absent"), "unit": "vllm.service", "textfile_writer": WRITER}
    assert wd.write_textfile(config, wd.new_state(), {"phase": "ready", "hung": False}) is None
    assert not (tmp_path / "absent").exists()


def test_textfile_is_what_the_alert_rules_read():
    """Every gpuhost_watchdog_* series the alert rules use is written by the watchdog."""
    writer = wd._load_by_path("gpuhost_textfile", WRITER)
    state = dict(wd.new_state(), last_check_at=1.8e9, ready=True, unmoved_s=3.0,
                 owed={"pending": 0, "api_held": 0, "api_arrived": 0})
    text = writer.render(wd.textfile_families(writer, state, {"phase": "watching", "hung": False}, "vllm.service", {}))
    written = {s.name for s in wd.load_metrics_reader().samples(text)}
    with open(_ROOT + "/roles/fleet_prometheus/files/rules/watchdog.rules.yml", encoding="utf-8") as fh:
        rules = fh.read()
    used = set(re.findall(r"\b(gpuhost_watchdog_[a-z_]+)", rules))
    assert used and used <= written, used - written


def test_a_canary_waiting_behind_busy_slots_ends_when_the_engine_moves(monkeypatch):
    """The canary's wait ends as soon as the engine's counters move (checked once a second): queued behind slots that a
    healthy engine is busy with, it is not a failure."""
    release = __import__("threading").Event()
    monkeypatch.setattr(wd, "_canary", lambda *_a: release.wait(30) and {"ok": True})
    asked = []

    def moved():
        asked.append(1)
        return len(asked) >= 2
    got = wd.canary("http://127.0.0.1:9", "", 30.0, moved)
    release.set()
    assert got["ok"] is True and got["by"] == "progress" and 1.0 <= got["seconds"] < 5.0, got
    assert len(asked) == 2


def test_a_canary_answered_before_any_move_is_an_answer(monkeypatch):
    monkeypatch.setattr(wd, "_canary", lambda *_a: {"ok": False, "status": 0, "error": "timeout", "seconds": 0.2})
    got = wd.canary("http://127.0.0.1:9", "", 30.0, lambda: False)
    assert got == {"ok": False, "status": 0, "error": "timeout", "seconds": 0.2, "by": "answer"}


def test_the_forced_tool_call_canary_on_a_box(tmp_path, monkeypatch):
    """Issue 45.4 on a whole box: an idle engine that answers plain requests but fails every forced tool call with
    vLLM's 500. The canary goes once per due check (a forced call: tool_choice required, one tool), is not sent
    sooner than tool_canary_retry after a failure, and the second failure in a row restarts the unit, with the
    rule and the failures in the textfile."""
    settings = dict(wd.DEFAULTS, canary_interval=100000, tool_canary_interval=600, tool_canary_retry=60,
                    tool_canary_failures=2)
    textdir = tmp_path / "node-exporter"
    textdir.mkdir()
    config = dict(settings, unit="vllm.service", base_url="http://127.0.0.1:8000", state_file=str(tmp_path / "s.json"),
                  textfile_dir=str(textdir), textfile_name="gpuhost_vllm_watchdog.prom", textfile_writer=WRITER,
                  key_file="")
    state, _decision = wd.judge(None, sample_of({"t": 0, "metrics": "idle", "api_in_flight": 0}, "inv-1"), settings)
    wd.save_json(config["state_file"], state)
    clock = {"now": 0.0}
    sent, systemctl = [], []

    def http_get(_base, path, _timeout, _key="", payload=None):
        if path == "/v1/chat/completions":
            sent.append(payload)
            return {"ok": False, "status": 500, "error": "HTTP 500: Internal server error", "body": "", "seconds": 0.1}
        body = {"/metrics": metrics_text("idle"), "/health": "", "/load": '{"server_load": 0}',
                "/v1/models": '{"data": [{"id": "m"}]}'}[path]
        return {"ok": True, "status": 200, "error": None, "body": body, "seconds": 0.01}

    def run(argv, **_kwargs):
        if argv[:2] == ["systemctl", "show"]:
            return types.SimpleNamespace(returncode=0, stdout="ActiveState=active\nInvocationID=inv-1\n", stderr="")
        systemctl.append(argv[1])
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(wd, "http_get", http_get)
    monkeypatch.setattr(wd.subprocess, "run", run)
    monkeypatch.setattr(wd.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(wd.time, "time", lambda: 1.8e9 + clock["now"])
    for t, want_sent, want_systemctl in ((300, 0, []), (600, 1, []), (630, 1, []), (660, 2, ["kill", "reset-failed", "restart"])):
        clock["now"] = float(t)
        assert wd.check(config) == 0
        assert (len(sent), systemctl) == (want_sent, want_systemctl), t
    assert sent[0]["tool_choice"] == "required" and [t["function"]["name"] for t in sent[0]["tools"]] == [
        "gpuhost_watchdog_canary"] and sent[0]["model"] == "m"
    verdict = wd.load_json(config["state_file"])["last_verdict"]
    assert verdict["rule"] == "structured" and verdict["tool_canary_failures"] == 2 and verdict["action"] == "restart"
    got = _textfile_values(str(textdir / "gpuhost_vllm_watchdog.prom"),
                           ["gpuhost_watchdog_verdicts_total{rule=structured}", "gpuhost_watchdog_restarts_total"])
    assert got == {"gpuhost_watchdog_verdicts_total{rule=structured}": 1.0, "gpuhost_watchdog_restarts_total": 1.0}
