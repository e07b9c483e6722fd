"""The lab connection's PID cache (tests/lab/connection_plugins/lab_podman.py): a cached PID is used only while the
process that was cached lives; a box that is stopping is refused, never cached."""
from __future__ import annotations

import json
import os
import subprocess

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
