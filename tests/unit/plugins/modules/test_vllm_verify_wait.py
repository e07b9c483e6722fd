# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module vllm_verify_wait, the readiness wait: data-driven (tests/unit/data/vllm_verify_wait_cases.yaml).

Serving means /health 200, the served name in /v1/models AND one sampled completion answered; an engine that dies
after /health was 200, or a journal line of an engine death, is reported as an engine death; the API key is read
from the host's env file by the module itself, as systemd reads it, and appears in no process's argv or environment.

The server is a small TEST DOUBLE of vLLM's OpenAI server (http.server on loopback) whose answers each case sets;
systemctl and journalctl are TEST DOUBLES too: a mocked run_command in the cases, shell scripts on PATH when the
module runs as a process of its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.modules import vllm_verify_wait
from ansible_collections.gpuhost.inference.tests.doubles.http_double import HttpDouble, JsonHandler
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

CASES = load_cases("vllm_verify_wait_cases.yaml")
WAIT, READ, ERRORS = CASES["wait"], CASES["read"], CASES["errors"]
UNIT = "vllm.service"
ACTIVE = {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "InvocationID": "abc", "Result": "success",
          "ExecMainStatus": "0", "LoadState": "loaded", "ActiveEnterTimestampMonotonic": "0"}
VERSION = "systemd 252 (252.38-1~deb12u1)\n+PAM +AUDIT\n"
# The collections path the module is imported from (tests/unit/../../ is the collection: ansible_collections/gpuhost/inference).
COLLECTIONS = os.path.abspath(os.path.join(ROOT, "..", "..", ".."))


class ServerDouble(HttpDouble):
    """TEST DOUBLE of vLLM's API: health/completion answers come from lists (the last one repeats); status 0 closes
    the connection without an answer."""

    def __init__(self, health=(200,), completions=((200, None),), model="tiny", key=None):
        self.health = list(health)
        self.completions = [tuple(c) for c in completions]
        self.model = model
        self.key = key
        self.seen = []            # (method, path, authorization header, body)
        outer = self

        class Handler(JsonHandler):
            def do_GET(self):  # noqa: N802
                outer.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
                if self.path == "/health":
                    status = outer.health.pop(0) if len(outer.health) > 1 else outer.health[0]
                    if status == 0:
                        self.close_connection = True
                        return
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
                    choices = [] if message == "no_choice" else [{"text": "hi there"}]
                    self.send_json(200, {"choices": choices, "usage": {"completion_tokens": 4}})
                else:
                    self.send_json(status, {"error": {"message": message, "type": "InternalServerError", "code": status}})

        super().__init__(Handler)


def run_module(args, states=None, journal=(), journal_unit=None):
    """The module with systemctl/journalctl answered by a mocked run_command: ``states`` one per `systemctl show`
    (the last repeats), ``journal`` for a start's invocation, ``journal_unit`` for the whole unit."""
    states = [dict(ACTIVE, **s) for s in (states or [{}])]
    calls = []

    def run_command(self, argv, *_a, **_kw):  # pylint: disable=unused-argument
        calls.append(list(argv))
        if argv[1:] == ["--version"]:
            return 0, VERSION, ""
        if argv[1] == "show":
            unit = argv[-1]
            state = states.pop(0) if len(states) > 1 else states[0]
            return 0, "".join("%s=%s\n" % kv for kv in state.items()) if unit == args["unit"] else \
                "".join("%s=%s\n" % kv for kv in ACTIVE.items()), ""
        if argv[0].endswith("journalctl"):
            lines = journal if any(a.startswith("_SYSTEMD_INVOCATION_ID=") for a in argv) else \
                (journal if journal_unit is None else journal_unit)
            return 0, "".join(line + "\n" for line in lines), ""
        raise AssertionError("unexpected command %r" % (argv,))

    with patch_module_args(args), \
            mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json, run_command=run_command,
                                get_bin_path=lambda self, name, *a, **kw: "/usr/bin/" + name), \
            mock.patch.object(vllm_verify_wait.time, "sleep", lambda s: None):
        with pytest.raises((ExitJson, FailJson)) as info:
            vllm_verify_wait.main()
    return info.type is FailJson, info.value.args[0], calls


def _args(case, srv, tmp_path):
    args = {"unit": UNIT, "base_url": srv.url, "model": srv.model, "timeout": 30, "interval": 0}
    if case.get("key_file") is not None:
        path = tmp_path / "secrets.env"
        path.write_text(case["key_file"])
        args["api_key_file"] = str(path)
    args.update(case.get("args") or {})
    if args.get("base_url") is True:
        args["base_url"] = srv.url
    return args


@pytest.mark.parametrize("case", WAIT, ids=case_ids(WAIT))
def test_wait(case, tmp_path):
    with ServerDouble(**(case.get("server") or {})) as srv:
        args = _args(case, srv, tmp_path)
        failed, result, _calls = run_module(args, case.get("states"), case.get("journal", ()), case.get("journal_unit"))
    expect = case["expect"]
    assert failed is expect["failed"], result
    for key, value in (expect.get("result") or {}).items():
        assert result[key] == value, (key, result)
    if failed:
        assert result["ok"] is False and result["msg"] == result["reason"]
        assert result["reason"].startswith(expect.get("reason_starts", "")), result["reason"]
        for fragment in expect.get("reason_has", []):
            assert fragment in result["reason"], (fragment, result["reason"])
    else:
        assert result["ok"] is True and result["changed"] is False and result["elapsed_s"] >= 0
    for key, value in (expect.get("first_completion") or {}).items():
        assert result["first_completion"][key] == value, key
    posts = [s for s in srv.seen if s[0] == "POST"]
    if "posts" in expect:
        assert len(posts) == expect["posts"], posts
    for key, value in (expect.get("body") or {}).items():
        assert posts[0][3][key] == value, key
    for key in expect.get("body_lacks", []):
        assert key not in posts[0][3], key
    if "auth" in expect:
        assert {auth for _m, path, auth, _b in srv.seen if path != "/health"} == {expect["auth"]}, srv.seen


@pytest.mark.parametrize("case", READ, ids=case_ids(READ))
def test_read(case, tmp_path):
    with ServerDouble(**(case.get("server") or {})) as srv:
        args = dict({"unit": UNIT, "wait": False}, **(case.get("args") or {}))
        if args.get("base_url") is True:
            args["base_url"] = srv.url
        failed, result, calls = run_module(args, case.get("states"), case.get("journal", ()))
    assert failed is False, result
    assert result["changed"] is False
    expect = case["expect"]
    for unit, props in (expect.get("units") or {}).items():
        for key, value in props.items():
            assert result["units"][unit][key] == value, (unit, key)
    for key in ("health", "journal_tail"):
        if key in expect:
            assert result[key] == expect[key], key
    if "health_detail_has" in expect:
        assert expect["health_detail_has"] in result["health_detail"], result
    for key in expect.get("absent", []):
        assert key not in result, key
    assert not any(c[1:] == ["--version"] for c in calls)   # no key file: systemd's version is not asked


@pytest.mark.parametrize("case", ERRORS, ids=case_ids(ERRORS))
def test_errors(case):
    failed, result, _calls = run_module(case["args"])
    assert failed, result
    for fragment in case["msg"]:
        assert fragment in result["msg"], (fragment, result["msg"])


def test_the_commands():
    with ServerDouble() as srv:
        _failed, _result, calls = run_module({"unit": UNIT, "base_url": srv.url, "model": "tiny",
                                              "api_key_file": "/nonexistent"})
    assert calls[0] == ["/usr/bin/systemctl", "--version"]
    assert calls[1] == ["/usr/bin/systemctl", "show", "-p", "ActiveState,SubState,NRestarts,InvocationID,Result,"
                        "ExecMainStatus,LoadState,ActiveEnterTimestampMonotonic", "--", UNIT]
    with ServerDouble(health=[0]) as srv:
        _failed, _result, calls = run_module({"unit": UNIT, "base_url": srv.url, "model": "tiny", "timeout": 0})
    # the tail of this start; when it has none (the journal double is empty here), the unit's
    assert calls[-2:] == [["/usr/bin/journalctl", "--no-pager", "-o", "cat", "-n", "40", "-u", UNIT,
                           "_SYSTEMD_INVOCATION_ID=abc"],
                          ["/usr/bin/journalctl", "--no-pager", "-o", "cat", "-n", "40", "-u", UNIT]]


# ------------------------------------------------------------------ the module as a process: the key in no argv

def _fake_systemd(tmp_path):
    """systemctl/journalctl TEST DOUBLES on PATH: an active unit, an empty journal."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'systemd 252 (252)'; exit 0; }\n"
        "printf 'ActiveState=active\\nSubState=running\\nNRestarts=0\\nInvocationID=x\\n"
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
    key = "unit-test-key-5f3a9c1e7b"
    keyfile = tmp_path / "secrets.env"
    keyfile.write_text(f"VLLM_API_KEY='{key}'\n")
    env = dict(os.environ, PATH=_fake_systemd(tmp_path) + os.pathsep + os.environ["PATH"],
               PYTHONPATH=COLLECTIONS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # /health answers 503 for a while, so the wait polls (and is scanned) for about a second
    with ServerDouble(key=key, health=[503] * 6 + [200]) as srv:
        args = {"ANSIBLE_MODULE_ARGS": {"unit": UNIT, "base_url": srv.url, "model": "tiny", "api_key_file": str(keyfile),
                                        "interval": 0.2, "timeout": 30}}
        proc = subprocess.Popen([sys.executable, "-m", "ansible_collections.gpuhost.inference.plugins.modules.vllm_verify_wait"],
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps(args))
        proc.stdin.close()
        hits = _watch_while(proc, key)
        out = json.loads(proc.stdout.read())
    assert out["ok"] is True, out
    assert any(auth == f"Bearer {key}" for _method, _path, auth, _body in srv.seen), "the key was not used at all"
    assert key not in json.dumps(out)
    assert hits == [], hits


def test_the_argv_scan_can_see_a_key_on_a_command_line():
    """The scan above is not blind: a process with the key in its argv is found."""
    control_key = "control-key-not-the-real-one-91d2"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)", control_key])
    hits = _watch_while(proc, control_key)
    assert any("cmdline" in h for h in hits), hits
