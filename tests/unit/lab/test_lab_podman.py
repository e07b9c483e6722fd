"""The lab connection's PID cache (tests/lab/connection_plugins/lab_podman.py): a cached PID is used only while the
process that was cached lives; a box that is stopping is refused, never cached."""
from __future__ import annotations

import base64
import importlib.util
import io
import json
import marshal
import os
import subprocess
import sys
import zipfile

import pytest

from ansible.errors import AnsibleConnectionFailure

from ansible_collections.gpuhost.inference.tests.unit.paths import TESTS, load_script

lab_podman = load_script("lab_podman", os.path.join(TESTS, "lab", "connection_plugins", "lab_podman.py"))

# (cached entry or None, the start times /proc gives by PID, podman inspect's PID, expected PID or the error's words)
CASES = [
    pytest.param({"pid": 11, "start": "500"}, {11: "500"}, "22", 11, id="cached-process-alive"),
    pytest.param({"pid": 11, "start": "500"}, {11: "777", 22: "900"}, "22", 22, id="pid-reused-by-another-process"),
    pytest.param({"pid": 11, "start": None}, {22: "900"}, "22", 22, id="null-start-never-matches"),
    pytest.param(None, {22: "900"}, "22", 22, id="no-cache"),
    pytest.param(None, {}, "22", "is stopping", id="inspected-pid-already-gone"),
    pytest.param(None, {}, "0", "is not running", id="container-stopped"),
]


class _Conn:  # pylint: disable=too-few-public-methods
    """Just what _container_pid reads of the connection."""
    _container = "box"

    def __init__(self, cache):
        self._cache = cache

    def _cache_file(self):
        return self._cache

    @staticmethod
    def get_option(_name):
        return "podman"


@pytest.mark.parametrize("cached, starts, inspected, expected", CASES)
def test_container_pid(tmp_path, monkeypatch, cached, starts, inspected, expected):
    cache = tmp_path / "box.json"
    if cached is not None:
        cache.write_text(json.dumps(cached))
    monkeypatch.setattr(lab_podman, "_start_time", starts.get)
    monkeypatch.setattr(lab_podman.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, inspected.encode() + b"\n", b""))
    conn = _Conn(str(cache))
    if isinstance(expected, str):
        with pytest.raises(AnsibleConnectionFailure, match=expected):
            lab_podman.Connection._container_pid(conn)
        assert cached is not None or not cache.exists()   # nothing cached for a box that is not running
    else:
        assert lab_podman.Connection._container_pid(conn) == expected
        assert json.loads(cache.read_text()) == {"pid": expected, "start": starts[expected]}


# The module payloads' bytecode (add_bytecode): a stand-in for Ansible's AnsiballZ wrapper, the same shape (a
# `zip_data='<base64>',` argument line, the zip put first on sys.path), whose module says where its code came from.
WRAPPER = '''
_ANSIBALLZ_WRAPPER = True
def _ansiballz_main(zip_data, module):
    import base64, os, sys, tempfile
    path = os.path.join(tempfile.mkdtemp(), "payload.zip")
    with open(path, "wb") as out:
        out.write(base64.b64decode(zip_data))
    sys.path.insert(0, path)
    mod = __import__(module, fromlist=["x"])
    print(mod.ORIGIN, type(mod.__loader__).__name__)


if __name__ == "__main__":
    _ansiballz_main(
zip_data=%r,
module='pkg.mod',
)
'''


def _payload(files, stamp=(2026, 12, 6, 8, 0, 0)):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, body in files.items():
            zf.writestr(zipfile.ZipInfo(name, stamp), body)
    return (WRAPPER % base64.b64encode(out.getvalue()).decode()).encode()


def _run(in_data):
    proc = subprocess.run([sys.executable, "-"], input=in_data, capture_output=True, check=True)
    return proc.stdout.decode().split()


# (name, the zip's files, what the module prints without and with the bytecode)
BYTECODE_CASES = [
    pytest.param({"pkg/__init__.py": "", "pkg/mod.py": "ORIGIN = 'source'\n"}, ["source", "zipimporter"],
                 ["source", "zipimporter"], id="same-result-with-bytecode"),
    pytest.param({"pkg/__init__.py": "from pkg import sub\n", "pkg/sub/__init__.py": "X = 1\n",
                  "pkg/mod.py": "from pkg.sub import X\nORIGIN = 'source%d' % X\n"}, ["source1", "zipimporter"],
                 ["source1", "zipimporter"], id="package-importing-a-subpackage"),
]


@pytest.mark.parametrize("files, plain, compiled", BYTECODE_CASES)
def test_add_bytecode_runs_the_same_module(tmp_path, files, plain, compiled):
    in_data = _payload(files)
    out = lab_podman.add_bytecode(in_data, str(tmp_path))
    assert out != in_data
    assert _run(in_data) == plain
    assert _run(out) == compiled
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(
        lab_podman.ZIP_DATA.search(out).group(1)))).namelist()
    assert sorted(names) == sorted(list(files) + [n + "c" for n in files])


def test_zipimport_prefers_the_added_bytecode(tmp_path):
    """What the speed-up rests on: zipimport runs the .pyc entry, not the source beside it (a .pyc made here from
    another source says so), and the wrapper's own lines are untouched."""
    files = {"pkg/__init__.py": "", "pkg/mod.py": "ORIGIN = 'source'\n"}
    in_data = _payload(files)
    out = lab_podman.add_bytecode(in_data, str(tmp_path))
    # the cached bytecode of the module swapped for that of another source
    cache = next(tmp_path.iterdir())
    with zipfile.ZipFile(cache) as zin:
        entries = {name: zin.read(name) for name in zin.namelist()}
    entries["pkg/mod.pyc"] = entries["pkg/mod.pyc"][:16] + marshal.dumps(compile("ORIGIN = 'bytecode'\n", "pkg/mod.py", "exec"))
    with zipfile.ZipFile(cache, "w") as zout:
        for name, body in entries.items():
            zout.writestr(name, body)
    assert _run(lab_podman.add_bytecode(in_data, str(tmp_path))) == ["bytecode", "zipimporter"]
    assert out.replace(lab_podman.ZIP_DATA.search(out).group(1), b"") == \
        in_data.replace(lab_podman.ZIP_DATA.search(in_data).group(1), b"")


def test_bytecode_of_another_python_is_ignored(tmp_path, monkeypatch):
    """A box whose python has another magic number compiles the sources as before."""
    in_data = _payload({"pkg/__init__.py": "", "pkg/mod.py": "ORIGIN = 'source'\n"})
    monkeypatch.setattr(importlib.util, "MAGIC_NUMBER", b"\x00\x00\r\n")
    out = lab_podman.add_bytecode(in_data, str(tmp_path))
    monkeypatch.undo()
    assert b".pyc" not in in_data and out != in_data
    assert _run(out) == ["source", "zipimporter"]


def test_the_cache_answers_the_second_time(tmp_path, monkeypatch):
    in_data = _payload({"pkg/__init__.py": "", "pkg/mod.py": "ORIGIN = 'source'\n"})
    first = lab_podman.add_bytecode(in_data, str(tmp_path))
    monkeypatch.setattr(lab_podman, "bytecode_entries", lambda _zip: pytest.fail("compiled again"))
    assert lab_podman.add_bytecode(in_data, str(tmp_path)) == first
    # the next run's zip: the same files stamped with that run's start time
    later = _payload({"pkg/__init__.py": "", "pkg/mod.py": "ORIGIN = 'source'\n"}, stamp=(2026, 12, 6, 9, 30, 0))
    out = lab_podman.add_bytecode(later, str(tmp_path))
    assert _run(out) == ["source", "zipimporter"]
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(lab_podman.ZIP_DATA.search(out).group(1)))) as zin:
        assert {info.date_time for info in zin.infolist()} == {(2026, 12, 6, 9, 30, 0)}
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("in_data", [None, b"", b"echo hi\n", b"_ANSIBALLZ_WRAPPER = True\nno payload line\n"],
                         ids=["none", "empty", "not-a-module", "wrapper-without-zip-data"])
def test_other_input_passes_unchanged(tmp_path, in_data):
    assert lab_podman.add_bytecode(in_data, str(tmp_path)) == in_data
    assert not list(tmp_path.iterdir())
