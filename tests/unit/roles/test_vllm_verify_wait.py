"""Unit tests of roles/vllm_verify/files/vllm_verify_wait.py, the readiness wait.

Serving means /health 200, the served name in /v1/models AND one sampled completion answered; an
engine that dies after /health was 200 is reported as an engine death; the API key is read from the
host's env file by the script itself and appears in no process's argv or environment.

The server is a small TEST DOUBLE of vLLM's OpenAI server (http.server on loopback) whose answers
each test sets; systemctl and journalctl are TEST DOUBLES too (shell scripts on PATH, or patched
functions), since the script reads the unit's state through them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuhost.inference.tests.doubles.http_double import HttpDouble, JsonHandler
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT
SCRIPT = os.path.join(ROOT, "roles", "vllm_verify", "files", "vllm_verify_wait.py")
KEY = "unit-test-key-5f3a9c1e7b"

_spec = importlib.util.spec_from_file_location("vllm_verify_wait", SCRIPT)
wait = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wait)


class ServerDouble(HttpDouble):
    """TEST DOUBLE of vLLM's API: health/models/completion answers come from lists (last one repeats)."""

    def __init__(self, health=(200,), completions=((200, None),), model="tiny", key=None):
        self.health = list(health)
        self.completions = list(completions)
        self.model = model
        self.key = key
        self.seen = []            # (method, path, authorization header, body)
        outer = self

        class Handler(JsonHandler):
            def do_GET(self):  # noqa: N802
                outer.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
                if self.path == "/health":
                    status = outer.health.pop(0) if len(outer.health) > 1 else outer.health[0]
                    self.send_json(status, {})
                elif self.path == "/v1/models":
                    if not self.bearer_ok(outer.key):
                        self.send_json(401, {"error": "Unauthorized"})
                    else:
                        self.send_json(200, {"data": [{"id": outer.model, "max_model_len": 2048}]})
                else:
                    self.send_json(404, {})

            def do_POST(self):  # noqa: N802
                body = self.read_json()
                outer.seen.append(("POST", self.path, self.headers.get("Authorization"), body))
                if not self.bearer_ok(outer.key):
                    self.send_json(401, {"error": "Unauthorized"})
                    return
                status, message = outer.completions.pop(0) if len(outer.completions) > 1 else outer.completions[0]
                if status == 200:
                    self.send_json(200, {"choices": [{"text": "hi there"}], "usage": {"completion_tokens": 4}})
                else:
                    self.send_json(status, {"error": {"message": message, "type": "InternalServerError", "code": status}})

        super().__init__(Handler)


def active(nrestarts=0, **extra):
    state = {"ActiveState": "active", "SubState": "running", "NRestarts": nrestarts, "InvocationID": "abc",
             "Result": "success", "ExecMainStatus": "0", "LoadState": "loaded", "ActiveEnterTimestampMonotonic": "0"}
    state.update(extra)
    return state


def run_main(monkeypatch, capsys, server, states, journal=(), *extra):
    """main() with systemctl/journalctl patched: ``states`` are returned one per poll (last repeats)."""
    states = list(states)
    monkeypatch.setattr(wait, "unit_state", lambda unit: states.pop(0) if len(states) > 1 else states[0])
    monkeypatch.setattr(wait, "journal_tail", lambda unit, inv, lines: list(journal))
    monkeypatch.setattr(wait.time, "sleep", lambda s: None)
    rc = wait.main(["--unit", "vllm.service", "--base-url", server.url, "--model", server.model,
                    "--timeout", "30", "--interval", "0", *extra])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("text, expected", [
    ("VLLM_API_KEY='abc-123'\n", "abc-123"),
    ('# comment\nVLLM_API_KEY="q1"\n', "q1"),
    ("export VLLM_API_KEY=plain\n", "plain"),
    ("VLLM_API_KEY=old\nVLLM_API_KEY=new\n", "new"),
    ("# No API key set: the API is open.\n", ""),
    ("OTHER=1\n", ""),
])
def test_read_key_forms(tmp_path, text, expected):
    path = tmp_path / "secrets.env"
    path.write_text(text)
    assert wait.read_key(str(path)) == expected


def test_read_key_missing_file_means_no_key(tmp_path):
    assert wait.read_key(str(tmp_path / "absent.env")) == ""
    assert wait.read_key("") == ""


def test_serving_needs_a_sampled_completion_and_uses_the_key_from_the_file(monkeypatch, capsys, tmp_path):
    keyfile = tmp_path / "secrets.env"
    keyfile.write_text(f"VLLM_API_KEY='{KEY}'\n")
    with ServerDouble(key=KEY) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active()], (), "--key-file", str(keyfile),
                           "--temperature", "0.7", "--top-p", "0.95", "--seed", "77")
    assert rc == 0 and out["ok"] is True, out
    assert out["first_completion"]["status"] == 200
    posts = [s for s in srv.seen if s[0] == "POST"]
    assert len(posts) == 1 and posts[0][1] == "/v1/completions"
    body = posts[0][3]
    assert body["temperature"] == 0.7 and body["top_p"] == 0.95 and body["seed"] == 77 and body["model"] == "tiny"
    assert all(auth == f"Bearer {KEY}" for method, path, auth, _body in srv.seen if path != "/health")


def test_the_readiness_completion_is_unseeded_by_default(monkeypatch, capsys):
    """Clients send no seed; on vLLM's CPU build only an unseeded sampled request reaches the sampler
    that torch inductor compiles (the one that needs g++): a seeded check would pass without it."""
    with ServerDouble() as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active()])
    body = [s for s in srv.seen if s[0] == "POST"][0][3]
    assert rc == 0 and "seed" not in body and body["temperature"] > 0 and body["top_p"] < 1


def test_health_and_models_without_a_completion_is_not_serving(monkeypatch, capsys):
    """The bug this guards: /health 200 and the model listed, but every sampled request answers 500."""
    msg = "InductorError: InvalidCxxCompiler: No working C++ compiler found"
    with ServerDouble(completions=[(500, msg)]) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active()], ["worker died"], "--completion-tries", "3")
    assert rc == 1 and out["ok"] is False
    assert "does not serve" in out["reason"] and "InvalidCxxCompiler" in out["reason"] and "500" in out["reason"]
    assert out["journal_tail"] == ["worker died"]
    assert len([s for s in srv.seen if s[0] == "POST"]) == 3


def test_a_completion_that_fails_once_then_answers_is_serving(monkeypatch, capsys):
    with ServerDouble(completions=[(503, "warming up"), (200, None)]) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active()])
    assert rc == 0 and out["ok"] is True and out["polls"] == 2


def test_health_503_after_200_is_an_engine_death(monkeypatch, capsys):
    # /health 200 (models listed, completion fails), then 503: vLLM's answer once its engine died
    with ServerDouble(health=[200, 503], completions=[(500, "EngineCore died")]) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active()], ["ERROR EngineDeadError: EngineCore encountered an issue"],
                           "--completion-tries", "5")
    assert rc == 1 and out["engine_dead"] is True
    assert out["reason"].startswith("engine death") and "503" in out["reason"]


def test_a_server_that_exits_is_reported_with_what_was_seen_before(monkeypatch, capsys):
    states = [active(), active(), active(ActiveState="activating", SubState="auto-restart", Result="success", ExecMainStatus="0")]
    journal = ["(EngineCore pid=12) ERROR EngineCore encountered a fatal error.", "INFO Shutting down"]
    with ServerDouble(completions=[(500, "sampler failed")]) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, states, journal, "--completion-tries", "9")
    assert rc == 1 and out["engine_dead"] is True
    assert "systemd is restarting it" in out["reason"] and "sampler failed" in out["reason"]
    assert "EngineCore encountered a fatal error" in out["reason"]


def test_fails_fast_when_the_unit_failed(monkeypatch, capsys):
    with ServerDouble(health=[0]) as srv:
        rc, out = run_main(monkeypatch, capsys, srv, [active(ActiveState="failed", Result="exit-code", ExecMainStatus="2")])
    assert rc == 1 and out["polls"] == 1 and "exit status 2" in out["reason"] and out["engine_dead"] is False


def test_show_reports_health_and_the_journal_when_not_200(monkeypatch, capsys):
    monkeypatch.setattr(wait, "unit_state", lambda unit: active())
    monkeypatch.setattr(wait, "journal_tail", lambda unit, inv, lines: ["EngineDeadError"])
    with ServerDouble(health=[503]) as srv:
        assert wait.main(["--show", "vllm.service", "--health-url", srv.url + "/health"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["health"] == 503 and out["journal_tail"] == ["EngineDeadError"] and out["vllm.service"]["NRestarts"] == 0
    with ServerDouble(health=[200]) as srv:
        wait.main(["--show", "vllm.service", "--health-url", srv.url + "/health"])
    out = json.loads(capsys.readouterr().out)
    assert out["health"] == 200 and "journal_tail" not in out


# ------------------------------------------------------------------ the key in no process's argv

def _fake_systemd(tmp_path):
    """systemctl/journalctl TEST DOUBLES on PATH: an active unit, an empty journal."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(
        "#!/bin/sh\nprintf 'ActiveState=active\\nSubState=running\\nNRestarts=0\\nInvocationID=x\\n"
        "LoadState=loaded\\nActiveEnterTimestampMonotonic=0\\n'\n")
    (bindir / "journalctl").write_text("#!/bin/sh\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    return str(bindir)


def _scan_processes(needle: str) -> list[str]:
    """Every process whose argv or environment holds ``needle`` (as 'pid: argv')."""
    hits = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if needle.encode() in data:
                shown = data.replace(b"\0", b" ")[:200]
                hits.append(f"{pid} {part}: {shown!r}")
    return hits


def _watch_while(proc, needle):
    hits = []
    while proc.poll() is None:
        hits.extend(_scan_processes(needle))
        time.sleep(0.02)
    return hits


def test_the_key_is_in_no_process_argv_or_environment_during_the_wait(tmp_path):
    keyfile = tmp_path / "secrets.env"
    keyfile.write_text(f"VLLM_API_KEY='{KEY}'\n")
    env = dict(os.environ, PATH=_fake_systemd(tmp_path) + os.pathsep + os.environ["PATH"])
    # /health answers 503 for a while, so the wait polls (and is scanned) for about a second
    with ServerDouble(key=KEY, health=[503] * 6 + [200]) as srv:
        proc = subprocess.Popen([sys.executable, SCRIPT, "--unit", "vllm.service", "--base-url", srv.url,
                                 "--model", "tiny", "--key-file", str(keyfile), "--interval", "0.2", "--timeout", "30"],
                                env=env, stdout=subprocess.PIPE, text=True)
        hits = _watch_while(proc, KEY)
        out = json.loads(proc.stdout.read())
    assert out["ok"] is True, out
    assert any(auth == f"Bearer {KEY}" for _method, _path, auth, _body in srv.seen), "the key was not used at all"
    assert hits == [], hits


def test_the_argv_scan_can_see_a_key_on_a_command_line():
    """The scan above is not blind: a process with the key in its argv is found."""
    control_key = "control-key-not-the-real-one-91d2"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)", control_key])
    hits = _watch_while(proc, control_key)
    assert any("cmdline" in h for h in hits), hits
