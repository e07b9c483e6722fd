"""The hub test double (tests/doubles/hf_hub_double.py): the headers, status codes and error codes
huggingface_hub reads (X-Repo-Commit, ETag / X-Linked-Etag / X-Linked-Size, X-Error-Code), ranges, the
tree and paths-info listings, the token, loopback only, and its command line (the way the e2e test and the
benchmark start it in a lab box)."""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse

import pytest

from ansible_collections.gpuhost.inference.tests.doubles.hf_hub_double import HubDouble, git_blob_sha1
from ansible_collections.gpuhost.inference.tests.unit.paths import DOUBLES

REPO = "gpuhost-lab/tiny"
WEIGHTS = bytes(range(256)) * 40     # 10240 bytes


@pytest.fixture(name="model")
def fixture_model(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "model.safetensors").write_bytes(WEIGHTS)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("a")
    (tmp_path / ".hidden").write_text("never served")
    return str(tmp_path)


def ask(hub, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def test_repo_info_has_the_commit_and_the_siblings(model):
    with HubDouble({REPO: model}) as hub:
        status, _h, body = ask(hub, "GET", "/api/models/%s/revision/main" % REPO)
        status2, _h2, body2 = ask(hub, "GET", "/api/models/%s" % REPO)
    info = json.loads(body)
    assert status == status2 == 200 and json.loads(body2)["sha"] == info["sha"] == hub.repos[REPO].commit
    assert info["id"] == REPO and [s["rfilename"] for s in info["siblings"]] == ["config.json", "model.safetensors", "sub/a.txt"]


def test_the_commit_follows_the_content(model, tmp_path):
    first = HubDouble({REPO: model}).repos[REPO].commit
    with open(os.path.join(model, "config.json"), "a", encoding="utf-8") as fh:
        fh.write(" ")
    assert HubDouble({REPO: model}).repos[REPO].commit != first


def test_resolve_headers_of_a_git_file_and_of_an_lfs_file(model):
    with HubDouble({REPO: model}) as hub:
        commit = hub.repos[REPO].commit
        status, cfg, _stderr = ask(hub, "HEAD", "/%s/resolve/main/config.json" % REPO)
        status2, lfs, body = ask(hub, "HEAD", "/%s/resolve/%s/model.safetensors" % (REPO, commit))
    assert status == status2 == 200 and body == b""
    assert cfg["x-repo-commit"] == commit and cfg["etag"] == '"%s"' % git_blob_sha1(b'{"model_type": "qwen3"}')
    assert cfg["content-length"] == str(len('{"model_type": "qwen3"}')) and "x-linked-etag" not in cfg
    assert lfs["x-linked-etag"] == '"%s"' % hashlib.sha256(WEIGHTS).hexdigest()
    assert lfs["x-linked-size"] == lfs["content-length"] == str(len(WEIGHTS)) and lfs["accept-ranges"] == "bytes"


@pytest.mark.parametrize("wanted, status, start, end", [
    ("bytes=100-", 206, 100, len(WEIGHTS) - 1),
    ("bytes=0-7", 206, 0, 7),
    ("bytes=-16", 206, len(WEIGHTS) - 16, len(WEIGHTS) - 1),
    ("bytes=10-99999", 206, 10, len(WEIGHTS) - 1),
])
def test_ranges(model, wanted, status, start, end):
    with HubDouble({REPO: model}) as hub:
        got, headers, body = ask(hub, "GET", "/%s/resolve/main/model.safetensors" % REPO, {"Range": wanted})
    assert got == status and body == WEIGHTS[start:end + 1]
    assert headers["content-range"] == "bytes %d-%d/%d" % (start, end, len(WEIGHTS))


def test_a_range_past_the_end_is_416(model):
    with HubDouble({REPO: model}) as hub:
        status, headers, _stderr = ask(hub, "GET", "/%s/resolve/main/model.safetensors" % REPO, {"Range": "bytes=99999-"})
    assert status == 416 and headers["content-range"] == "bytes */%d" % len(WEIGHTS)


@pytest.mark.parametrize("path, status, code", [
    ("/api/models/gpuhost-lab/nope/revision/main", 401, "RepoNotFound"),
    ("/gpuhost-lab/nope/resolve/main/config.json", 401, "RepoNotFound"),
    ("/api/models/%s/revision/v9" % REPO, 404, "RevisionNotFound"),
    ("/%s/resolve/v9/config.json" % REPO, 404, "RevisionNotFound"),
    ("/%s/resolve/main/nope.json" % REPO, 404, "EntryNotFound"),
    ("/%s/resolve/main/.hidden" % REPO, 404, "EntryNotFound"),
    ("/api/models/%s/tree/main/nope" % REPO, 404, "EntryNotFound"),
])
def test_errors_carry_the_hubs_error_codes(model, path, status, code):
    with HubDouble({REPO: model}) as hub:
        got, headers, _stderr = ask(hub, "GET", path)
    assert got == status and headers["x-error-code"] == code
    if code == "EntryNotFound":
        assert headers["x-repo-commit"] == hub.repos[REPO].commit


def test_tree_and_paths_info(model):
    with HubDouble({REPO: model}) as hub:
        _status, _headers, flat = ask(hub, "GET", "/api/models/%s/tree/main" % REPO)
        _status, _headers, deep = ask(hub, "GET", "/api/models/%s/tree/main?recursive=True&expand=False" % REPO)
        _status, _headers, sub = ask(hub, "GET", "/api/models/%s/tree/main/sub" % REPO)
        form = urllib.parse.urlencode({"paths": ["model.safetensors", "sub", "nope"]}, doseq=True)
        _status, _headers, info = ask(hub, "POST", "/api/models/%s/paths-info/main" % REPO,
                                      {"Content-Type": "application/x-www-form-urlencoded"}, form)
    assert [e["path"] for e in json.loads(flat)] == ["config.json", "model.safetensors", "sub"]
    assert [e["path"] for e in json.loads(deep)] == ["config.json", "model.safetensors", "sub", "sub/a.txt"]
    assert [e["path"] for e in json.loads(sub)] == ["sub/a.txt"]
    entries = {e["path"]: e for e in json.loads(info)}
    assert set(entries) == {"model.safetensors", "sub"} and entries["sub"]["type"] == "directory"
    lfs = entries["model.safetensors"]
    assert lfs["size"] == len(WEIGHTS) and lfs["lfs"]["oid"] == hashlib.sha256(WEIGHTS).hexdigest()


def test_a_token_is_required_when_set(model):
    with HubDouble({REPO: model}, token="t0k") as hub:
        refused, headers, _stderr = ask(hub, "GET", "/api/models/%s" % REPO)
        allowed, _h, _b = ask(hub, "GET", "/api/models/%s" % REPO, {"Authorization": "Bearer t0k"})
    assert refused == 401 and headers["x-error-code"] == "RepoNotFound" and allowed == 200
    assert [r["auth"] for r in hub.requests] == [False, True]


def test_a_cut_sends_part_of_the_first_download_only(model):
    with HubDouble({REPO: model}, cut_after=1000) as hub:
        conn = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=10)
        conn.request("GET", "/%s/resolve/main/model.safetensors" % REPO)
        resp = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
        conn.close()
        status, _h, body = ask(hub, "GET", "/%s/resolve/main/model.safetensors" % REPO)
    assert status == 200 and body == WEIGHTS
    assert [(r["bytes"], r["cut"]) for r in hub.downloads()] == [(1000, True), (len(WEIGHTS), False)]


def test_fail_answers_the_gets_of_a_file_but_not_its_head(model):
    with HubDouble({REPO: model}, fail={"model.safetensors": 503}) as hub:
        head, _h, _b = ask(hub, "HEAD", "/%s/resolve/main/model.safetensors" % REPO)
        get, _h2, _b2 = ask(hub, "GET", "/%s/resolve/main/model.safetensors" % REPO)
    assert (head, get) == (200, 503)


def test_a_rate_slows_a_download_down(model):
    with HubDouble({REPO: model}, rate=20000) as hub:
        t0 = time.monotonic()
        ask(hub, "GET", "/%s/resolve/main/model.safetensors" % REPO)
        took = time.monotonic() - t0
    assert took >= 0.3   # 10240 bytes at 20000 B/s: about half a second


def test_loopback_only(model):
    with pytest.raises(ValueError, match="loopback only"):
        HubDouble({REPO: model}, host="0.0.0.0")


def test_the_command_line_writes_its_port_and_logs_requests(model, tmp_path):
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, os.path.join(DOUBLES, "hf_hub_double.py"), "--repo", "%s=%s" % (REPO, model),
                             "--port-file", str(port_file), "--log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = int(port_file.read_text())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/models/%s" % REPO)
        assert conn.getresponse().status == 200
        conn.close()
        # the double records a request after it has sent the reply: wait for the line, not a fixed time
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        out, _err = proc.communicate(timeout=10)
    assert "serving %s (commit " % REPO in out
    assert [json.loads(line)["path"] for line in log.read_text().splitlines()] == ["/api/models/%s" % REPO]


def test_the_command_line_refuses_a_missing_directory(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(DOUBLES, "hf_hub_double.py"), "--repo", "a/b=%s" % (tmp_path / "no")],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2 and "--repo wants ORG/NAME=DIR" in proc.stderr
