"""Unit tests of roles/vllm_service/files/vllm_fetch_weights.py, the weights fetch, against the hub double.

The script runs as the role runs it (a subprocess: python SCRIPT REPO --mode ... --cache-dir ...), with the
huggingface_hub of the test venv (the version of the CPU wheelhouse, 2.4.0), against
tests/doubles/hf_hub_double.py on loopback serving the tiny model (or a model with a weights file over
huggingface_hub's 10 MiB download chunk, for the resume). What is tested: a full fetch; a second run fetches
nothing and asks the hub nothing; check mode lists what would be fetched and writes nothing; a dropped
connection is resumed with a Range request; an interrupted run's files are kept and only the rest is fetched;
a killed run's partial file is removed; a wrong repo id, revision or hub gives a sentence naming the variable;
the token is read from the secrets file, as systemd reads it for the server (with the collection's env-file reader,
plugins/module_utils/systemd_env.py, as vllm_service installs it on the box), and is on no command line and in no
environment; with --user it runs as that user (as root only).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.gpuhost.inference.tests.doubles.hf_hub_double import HubDouble
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT
from ansible_collections.gpuhost.inference.tests.unit.ports import free_port

pytest.importorskip("huggingface_hub")

SCRIPT = os.path.join(ROOT, "roles", "vllm_service", "files", "vllm_fetch_weights.py")
READER = os.path.join(ROOT, "plugins", "module_utils", "systemd_env.py")   # installed on the box by vllm_service
REPO = "gpuhost-lab/tiny-qwen3"
TOKEN = "hf_unitTestToken4c1d9e"
CHUNK = 10 * 1024 * 1024   # huggingface_hub's DOWNLOAD_CHUNK_SIZE: what it writes at once


def tiny_model(tmp_path, weights_bytes=0):
    """The tiny model of the lab cache when there, else a stand-in; weights_bytes > 0: random weights of that size."""
    src = os.environ.get("TINY_MODEL") or "/var/tmp/gpuhost-cache/models/tiny-qwen3"
    model = tmp_path / "model"
    if os.path.isdir(src) and not weights_bytes:
        shutil.copytree(src, model)
        return str(model)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 256}))
    (model / "tokenizer_config.json").write_text("{}")
    (model / "original").mkdir()
    (model / "original" / "consolidated.pth").write_bytes(b"x" * 1000)
    (model / "model.safetensors").write_bytes(os.urandom(weights_bytes or 300_000))
    return str(model)


def fetch(hub_url, cache, *extra, repo=REPO, check=False, env=None, timeout=120):
    """Run the script; -> (exit status, its JSON answer, stderr)."""
    cmd = [sys.executable, SCRIPT, "--cache-dir", str(cache), "--endpoint", hub_url, *extra, "--", repo]
    run_env = dict(os.environ, HF_HOME=os.path.join(str(cache), "..", "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    run_env.pop("HF_TOKEN", None)
    run_env.update(env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=run_env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    answer = json.loads(lines[0])
    if check:
        assert proc.returncode == 0 and answer["ok"], (answer, proc.stderr)
    return proc.returncode, answer, proc.stderr


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def source_files(model):
    out = {}
    for base, _dirs, names in os.walk(model):
        for name in names:
            full = os.path.join(base, name)
            out[os.path.relpath(full, model)] = os.path.getsize(full)
    return out


def blob_dir(cache):
    return os.path.join(str(cache), "models--" + REPO.replace("/", "--"), "blobs")


def listing(path):
    """{relative path: (mode, size, mtime)} of everything under path."""
    out = {}
    for base, dirs, names in os.walk(str(path)):
        for name in dirs + names:
            st = os.lstat(os.path.join(base, name))
            out[os.path.relpath(os.path.join(base, name), str(path))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def test_check_mode_with_a_partial_cache_restores_what_the_dry_run_wrote(tmp_path):
    """refs/main names a commit that is not on disk (main moved on): the look misses, the hub's main is the complete
    snapshot, so nothing would be fetched; the dry run rewrote refs/main and it is put back."""
    model = tiny_model(tmp_path)
    cache = tmp_path / "hub"
    with HubDouble({REPO: model}) as hub:
        fetch(hub.url, cache, check=True)
    ref = cache / ("models--" + REPO.replace("/", "--")) / "refs" / "main"
    ref.write_text("0" * 40)                   # as if main had moved on since
    before = listing(cache)
    with HubDouble({REPO: model}) as hub:
        _rc, out, _stderr = fetch(hub.url, cache, "--mode", "check", check=True)
    assert not out["present_before"] and out["would_fetch"] == [] and not out["changed"], out
    assert ref.read_text() == "0" * 40
    assert {k: v[:2] for k, v in listing(cache).items()} == {k: v[:2] for k, v in before.items()}


# ------------------------------------------------------------------ fetch, idempotence, check mode

def test_full_fetch_then_a_second_run_fetches_nothing(tmp_path):
    model = tiny_model(tmp_path)
    cache, log = tmp_path / "hub", tmp_path / "fetch.log"
    files = source_files(model)
    with HubDouble({REPO: model}) as hub:
        rc, first, _stderr = fetch(hub.url, cache, "--log", str(log), "--progress-s", "0", check=True)
        asked = len(hub.requests)
        rc2, second, _stderr = fetch(hub.url, cache, "--log", str(log), check=True)
        assert len(hub.requests) == asked, hub.requests[asked:]     # the second run asked the hub nothing
    assert rc == rc2 == 0
    assert first["changed"] and first["present"] and not first["present_before"]
    assert sorted(first["fetched_files"]) == sorted(files) and first["fetched_bytes"] == sum(files.values())
    assert first["files"] == len(files) and first["bytes"] == sum(files.values())
    assert first["commit"] == hub.repos[REPO].commit and first["snapshot"].endswith("/snapshots/" + first["commit"])
    for rel in files:
        assert sha256(os.path.join(first["snapshot"], rel)) == sha256(os.path.join(model, rel)), rel
    assert not second["changed"] and second["present_before"] and second["fetched_files"] == []
    assert second["fetched_bytes"] == 0 and second["snapshot"] == first["snapshot"]
    text = log.read_text()
    assert "vllm_fetch_weights: fetching %s" % REPO in text and "done: %d files" % len(files) in text, text
    assert "Downloading bytes" in text and "\r" not in text and "\x1b" not in text, text


def test_ignore_patterns_leave_files_out(tmp_path):
    model = tiny_model(tmp_path, weights_bytes=1000)
    with HubDouble({REPO: model}) as hub:
        _rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--ignore-pattern", "original/*",
                                  "--ignore-pattern", "*.pth", check=True)
    assert "original/consolidated.pth" not in out["fetched_files"] and "model.safetensors" in out["fetched_files"]


def test_check_mode_lists_what_it_would_fetch_and_writes_nothing(tmp_path):
    model = tiny_model(tmp_path)
    cache = tmp_path / "hub"
    files = source_files(model)
    with HubDouble({REPO: model}) as hub:
        _rc, check, _stderr = fetch(hub.url, cache, "--mode", "check", check=True)
        assert not os.path.exists(cache), listing(cache)   # not even the refs/main a dry run writes
        assert not [r for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]
        fetch(hub.url, cache, check=True)
        before = listing(cache)
        asked = len(hub.requests)
        _rc, again, _stderr = fetch(hub.url, cache, "--mode", "check", check=True)
        assert len(hub.requests) == asked and listing(cache) == before
    assert check["changed"] and sorted(check["would_fetch"]) == sorted(files)
    assert check["would_fetch_bytes"] == sum(files.values()) and not check["present"]
    assert not again["changed"] and again["would_fetch"] == [] and again["present_before"]


def test_look_mode_never_asks_the_hub(tmp_path):
    model = tiny_model(tmp_path)
    with HubDouble({REPO: model}) as hub:
        _rc, before, _stderr = fetch(hub.url, tmp_path / "hub", "--mode", "look", check=True)
        assert hub.requests == []
        fetch(hub.url, tmp_path / "hub", check=True)
        asked = len(hub.requests)
        _rc, after, _stderr = fetch(hub.url, tmp_path / "hub", "--mode", "look", check=True)
        assert len(hub.requests) == asked
    assert not before["present"] and not before["changed"] and before["missing"]
    assert after["present"] and after["present_before"] and not after["changed"]


# ------------------------------------------------------------------ resume

def test_a_dropped_connection_is_resumed_with_a_range_request(tmp_path):
    size = CHUNK + 2 * 1024 * 1024
    model = tiny_model(tmp_path, weights_bytes=size)
    cut = CHUNK + 512 * 1024
    with HubDouble({REPO: model}, cut_after=cut) as hub:
        _rc, out, _stderr = fetch(hub.url, tmp_path / "hub", check=True)
        gets = [r for r in hub.downloads() if r["path"].endswith("/model.safetensors")]
    assert [g["status"] for g in gets] == [200, 206], gets
    assert gets[0]["bytes"] == cut and gets[1]["range"] == "bytes=%d-" % CHUNK, gets
    assert gets[1]["bytes"] == size - CHUNK       # only the rest came again
    assert sha256(os.path.join(out["snapshot"], "model.safetensors")) == sha256(os.path.join(model, "model.safetensors"))


def test_an_interrupted_run_keeps_its_files_and_the_next_fetches_only_the_rest(tmp_path):
    model = tiny_model(tmp_path)
    cache = tmp_path / "hub"
    with HubDouble({REPO: model}, fail={"model.safetensors": 500}) as hub:
        rc, failed, _stderr = fetch(hub.url, cache)
        hub.fail.clear()
        first_run = len(hub.requests)
        _rc, out, _stderr = fetch(hub.url, cache, check=True)
        second_gets = [r["path"].rsplit("/", 1)[-1] for r in hub.requests[first_run:]
                       if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert rc == 1 and not failed["ok"] and failed["error"].startswith("vllm_service_model: fetching %s" % REPO)
    # huggingface_hub cancels the downloads that had not started when one fails (how many had started depends
    # on the machine's load), so the first run keeps some of the other files, and the second asks for the rest
    files = len(source_files(model))
    assert "500" in failed["error"] and 0 <= failed["kept_blobs"] <= files - 1, failed
    assert "model.safetensors" in second_gets and len(second_gets) == files - failed["kept_blobs"], (failed, second_gets)
    assert sorted(out["fetched_files"]) == sorted(second_gets) and out["files"] == files


def test_a_killed_run_leaves_a_partial_file_that_the_next_run_removes(tmp_path):
    size = 3 * 1024 * 1024
    model = tiny_model(tmp_path, weights_bytes=size)
    cache = tmp_path / "hub"
    with HubDouble({REPO: model}, cut_after=size // 2, stall=True) as hub:
        env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"))
        proc = subprocess.Popen([sys.executable, SCRIPT, REPO, "--cache-dir", str(cache), "--endpoint", hub.url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            assert hub.stalled.wait(60), "the download never reached the cut"
            time.sleep(0.5)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        partial = [n for n in os.listdir(blob_dir(cache)) if n.endswith(".incomplete")]
        assert partial, os.listdir(blob_dir(cache))
        old = time.time() - 3600
        for name in partial:
            os.utime(os.path.join(blob_dir(cache), name), (old, old))
        hub.release.set()
        _rc, out, _stderr = fetch(hub.url, cache, check=True)
    assert out["stale_partials_removed"] == len(partial), out
    assert not [n for n in os.listdir(blob_dir(cache)) if n.endswith(".incomplete")]
    assert sha256(os.path.join(out["snapshot"], "model.safetensors")) == sha256(os.path.join(model, "model.safetensors"))


# ------------------------------------------------------------------ errors name the variable

def test_a_wrong_repo_id_names_vllm_service_model(tmp_path):
    model = tiny_model(tmp_path)
    with HubDouble({REPO: model}) as hub:
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", repo="gpuhost-lab/no-such-model")
    assert rc == 1 and not out["ok"] and not out["changed"]
    assert out["error"].startswith("vllm_service_model: the hub at %s has no model 'gpuhost-lab/no-such-model'" % hub.url)
    assert "vllm_service_hf_token" in out["error"]


@pytest.mark.parametrize("repo", ["a/b/c", "org/na--me", "-org/name"])
def test_a_malformed_repo_id_names_vllm_service_model(tmp_path, repo):
    rc, out, _stderr = fetch("http://127.0.0.1:9", tmp_path / "hub", repo=repo)
    assert rc == 1 and out["error"].startswith("vllm_service_model: %r is neither an absolute path" % repo), out


def test_an_unknown_revision_names_the_revision_variable(tmp_path):
    with HubDouble({REPO: tiny_model(tmp_path)}) as hub:
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--revision", "v9")
    assert rc == 1 and out["error"].startswith("vllm_service_model_revision: 'v9' is not a branch, tag or commit"), out


def test_an_unreachable_hub_says_what_to_do(tmp_path):
    rc, out, _stderr = fetch("http://127.0.0.1:%d" % free_port(), tmp_path / "hub", "--variable",
                             "vllm_service_profiles['mtp'].settings.speculative_config.model")
    assert rc == 1
    assert out["error"].startswith("vllm_service_profiles['mtp'].settings.speculative_config.model: %s" % REPO), out
    assert "cannot be reached" in out["error"] and "vllm_service_hf_endpoint" in out["error"]


# ------------------------------------------------------------------ the token

def _proc_text(pid, name):
    try:
        with open("/proc/%d/%s" % (pid, name), "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def test_the_token_comes_from_the_secrets_file_and_is_in_no_argv_or_environment(tmp_path):
    size = 3 * 1024 * 1024
    model = tiny_model(tmp_path, weights_bytes=size)
    secrets = tmp_path / "secrets.env"
    secrets.write_text("VLLM_API_KEY='k'\nHF_TOKEN='%s'\n" % TOKEN)
    secrets.chmod(0o600)
    cache = tmp_path / "hub"
    with HubDouble({REPO: model}, token=TOKEN, cut_after=size // 2, stall=True) as hub:
        rc, refused, _stderr = fetch(hub.url, tmp_path / "other")
        assert rc == 1 and "vllm_service_hf_token" in refused["error"], refused
        env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"))
        env.pop("HF_TOKEN", None)
        proc = subprocess.Popen([sys.executable, SCRIPT, REPO, "--cache-dir", str(cache), "--endpoint", hub.url,
                                 "--secrets-file", str(secrets), "--env-reader", READER],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, text=True)
        try:
            assert hub.stalled.wait(60), "the download never started"
            seen = {name: _proc_text(proc.pid, name) for name in ("cmdline", "environ")}
        finally:
            hub.release.set()
            stdout, _stderr = proc.communicate(timeout=120)
    assert seen["cmdline"] and TOKEN not in seen["cmdline"] and TOKEN not in seen["environ"], seen
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert answer["ok"] and answer["changed"], answer
    assert TOKEN not in stdout
    assert all(r["auth"] for r in hub.requests if r["method"] in ("GET", "HEAD") and r["status"] < 400)


@pytest.mark.parametrize("text,ok", [
    ("HF_TOKEN=wrong\nHF_TOKEN='%s'\n" % TOKEN, True),                     # the last assignment wins
    ("HF_TOKEN='%s'\nexport HF_TOKEN=wrong\n" % TOKEN, True),              # systemd ignores `export NAME=`
    ("HUGGING_FACE_HUB_TOKEN=%s\n" % TOKEN, True),                          # the older name, as huggingface_hub takes it
    ("HUGGING_FACE_HUB_TOKEN=wrong\nHF_TOKEN=%s\n" % TOKEN, True),         # HF_TOKEN first, as huggingface_hub
    ("HF_TOKEN=%s  # the lab's\n" % TOKEN, False),                          # the note is part of the value for systemd
])
def test_the_token_is_the_one_systemd_gives_the_server(tmp_path, text, ok):
    model = tiny_model(tmp_path)
    secrets = tmp_path / "secrets.env"
    secrets.write_text(text)
    with HubDouble({REPO: model}, token=TOKEN) as hub:
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--secrets-file", str(secrets), "--env-reader", READER)
    assert (rc == 0 and out["ok"]) is ok, out


def test_a_fetch_without_the_reader_fails_and_a_check_asks_without_the_token(tmp_path):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("HF_TOKEN='%s'\n" % TOKEN)
    absent = str(tmp_path / "lib" / "systemd_env.py")
    model = tiny_model(tmp_path)
    with HubDouble({REPO: model}, token=TOKEN) as hub:
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--secrets-file", str(secrets), "--env-reader", absent)
        assert rc == 1 and "the token cannot be read" in out["error"] and absent in out["error"], out
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--mode", "check", "--secrets-file", str(secrets),
                                 "--env-reader", absent)
        assert rc == 1 and "asked without the token" in out["error"], out
        # a look reads the cache alone: no token, no reader needed
        rc, out, _stderr = fetch(hub.url, tmp_path / "hub", "--mode", "look", "--secrets-file", str(secrets),
                                 "--env-reader", absent)
        assert out["mode"] == "look" and "token" not in (out.get("error") or ""), out


def test_the_script_reads_no_env_file_itself():
    """One reader of env files in the collection: the fetch has no parser of its own."""
    with open(SCRIPT, encoding="utf-8") as fh:
        assert "shlex" not in fh.read()


# ------------------------------------------------------------------ as the service user

def _readable_by(user, *paths):
    """Whether ``user`` can read every path (the script, this python's standard library, huggingface_hub)."""
    pw = pwd.getpwnam(user)
    for path in paths:
        out = subprocess.run(["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--clear-groups",
                              "test", "-r", path], capture_output=True, check=False)
        if out.returncode != 0:
            return False
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="switching user needs root")
def test_it_runs_as_the_service_user_once_the_secrets_are_read(tmp_path):
    user = "nobody"
    import huggingface_hub  # pylint: disable=import-outside-toplevel

    stdlib = os.path.join(os.path.dirname(os.__file__), "json", "__init__.py")
    if shutil.which("setpriv") is None or not _readable_by(user, SCRIPT, stdlib, huggingface_hub.__file__):
        pytest.skip("%s cannot read this python's files here (started as root, it runs on as that user)" % user)
    pw = pwd.getpwnam(user)
    model = tiny_model(tmp_path)
    # pytest's tmp_path is root's alone (0700 parents): the service user's directory lives in /tmp.
    work = pathlib.Path(tempfile.mkdtemp(prefix="gpuhost-fetch-"))
    try:
        os.chmod(work, 0o750)
        os.chown(work, pw.pw_uid, pw.pw_gid)
        secrets = tmp_path / "secrets.env"
        secrets.write_text("HF_TOKEN='%s'\n" % TOKEN)
        secrets.chmod(0o600)                                   # root's alone, as /etc/vllm/secrets.env
        with HubDouble({REPO: model}, token=TOKEN) as hub:
            _rc, out, _stderr = fetch(hub.url, work / "hub", "--user", user, "--secrets-file", str(secrets),
                                      "--env-reader", READER, "--hf-home", str(work / "hf"), "--log", str(work / "fetch.log"), check=True)
        owners = {}
        for base, dirs, names in os.walk(work):
            for name in dirs + names:
                owners[os.path.join(base, name)] = os.lstat(os.path.join(base, name)).st_uid
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert owners and all(uid == pw.pw_uid for uid in owners.values()), owners
    assert any(path.endswith("model.safetensors") for path in owners)
    assert out["changed"] and out["files"] == len(source_files(model))


def test_switching_to_an_unknown_user_fails_with_a_sentence(tmp_path):
    rc, out, _stderr = fetch("http://127.0.0.1:9", tmp_path / "hub", "--user", "no-such-user-7f3")
    assert rc == 1 and "no such user: no-such-user-7f3" in out["error"], out
