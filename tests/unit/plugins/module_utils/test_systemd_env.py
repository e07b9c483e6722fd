# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the env-file reader (plugins/module_utils/systemd_env.py): what a service gets from an
EnvironmentFile=.

Data-driven: tests/unit/data/systemd_env_cases.yaml. Where the machine running the tests has systemd, every case
is also read by systemd's own parser (its environment.d generator, which shares parse_env_file_internal() with
EnvironmentFile=; it skips empty values and expands $VAR, so those cases are compared as it reads them).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import systemd_env
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

CASES = load_cases("systemd_env_cases.yaml")
PARSE = CASES["parse"]
ERRORS = CASES["errors"]
READER = os.path.join(ROOT, "plugins", "module_utils", "systemd_env.py")
GENERATOR = "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator"


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_parse(case):
    assert systemd_env.parse_env_file(case["text"], case.get("systemd_version")) == case["expect"]
    if "assignments" in case:
        got = systemd_env.env_assignments(case["text"], case.get("systemd_version"))
        assert [list(pair) for pair in got] == case["assignments"]


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_read_file_and_order(case, tmp_path):
    path = tmp_path / "env"
    path.write_bytes(case["text"].encode("utf-8"))
    env = systemd_env.read_env_file(str(path), case.get("systemd_version"))
    assert env == case["expect"]
    assert list(env) == list(case["expect"])   # the place of a name's first assignment


@pytest.mark.parametrize("case", ERRORS, ids=case_ids(ERRORS))
def test_errors(case):
    text = bytes(case["bytes"]) if "bytes" in case else case["text"]
    with pytest.raises((systemd_env.EnvFileError, TypeError), match=case["message"]):
        systemd_env.parse_env_file(text, case.get("systemd_version"))


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        systemd_env.read_env_file(str(tmp_path / "absent"))


def test_not_text():
    with pytest.raises(TypeError, match="string"):
        systemd_env.parse_env_file(None)


@pytest.mark.parametrize("name,valid", [("A", True), ("_a1", True), ("1A", False), ("A-B", False), ("", False),
                                        ("export A", False), (None, False)])
def test_valid_env_name(name, valid):
    assert systemd_env.valid_env_name(name) is valid


# ------------------------------------------------------------------ the file as a program (the launcher's fallback)

@pytest.mark.parametrize("text,key,rc,out", [
    ("VLLM_PROFILE=a\nVLLM_PROFILE='b c'\n", "VLLM_PROFILE", 0, "b c"),
    ("VLLM_PROFILE=\n", "VLLM_PROFILE", 0, ""),
    ("export VLLM_PROFILE=a\n", "VLLM_PROFILE", 1, ""),
])
def test_command_line(tmp_path, text, key, rc, out):
    path = tmp_path / "env"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-I", READER, str(path), key], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout) == (rc, out), proc.stderr


def test_command_line_unreadable_and_usage(tmp_path):
    proc = subprocess.run([sys.executable, "-I", READER, str(tmp_path / "absent"), "A"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    proc = subprocess.run([sys.executable, "-I", READER], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "usage" in proc.stderr


# ------------------------------------------------------------------ against this machine's systemd

def _local_systemd():
    try:
        out = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, check=False).stdout
        return int(out.split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _generator(text, tmp_path):
    """{name: value} of ``text`` as systemd's environment.d generator reads it (its own variables left out)."""
    conf = tmp_path / "environment.d"
    conf.mkdir(exist_ok=True)

    def run(content):
        (conf / "50-case.conf").write_bytes(content.encode("utf-8"))
        out = subprocess.run(["env", "-i", "XDG_CONFIG_HOME=%s" % tmp_path, GENERATOR], capture_output=True, text=True,
                             check=False).stdout
        env = {}
        for line in out.splitlines():
            key, _sep, value = line.partition("=")
            if len(value) >= 2 and value[0] == value[-1] == '"':   # printed C-escaped in double quotes
                value = value[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
                value = value.encode("latin-1").decode("utf-8")
            env[key] = value
        return env

    base = run("")
    return {k: v for k, v in run(text).items() if base.get(k) != v or k not in base}


@pytest.mark.skipif(not os.access(GENERATOR, os.X_OK) or _local_systemd() is None,
                    reason="no systemd environment.d generator on this machine")
@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_cases_agree_with_this_machines_systemd(case, tmp_path):
    text = case["text"].split("\0", 1)[0]
    if "$" in text:
        pytest.skip("the generator expands $VAR; EnvironmentFile= does not")
    version = _local_systemd()
    if case.get("systemd_version") is not None and \
            (int(case["systemd_version"]) < 254) != (version < 254):
        pytest.skip("a case for systemd %s, this machine has %d" % (case["systemd_version"], version))
    if case.get("systemd_version") is None and version < 254 and "\\\n" in text and ("#" in text or ";" in text):
        pytest.skip("a comment ending with a backslash: this machine's systemd %d reads it as before 254" % version)
    # The generator ignores an empty value (EnvironmentFile= sets it empty); otherwise the same parser.
    expected = {}
    for key, value in systemd_env.env_assignments(text, version):
        if value and systemd_env.valid_env_name(key):
            expected[key] = value
    assert _generator(text, tmp_path) == expected
