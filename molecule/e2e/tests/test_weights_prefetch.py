"""Weights on disk before the server starts, on the real vLLM 0.28.0 CPU build, in a box with no network.

A hub test double (tests/doubles/hf_hub_double.py) runs INSIDE the box on loopback, serving the tiny model
of /srv/models/tiny-qwen3 as the hub repo gpuhost-lab/tiny-qwen3. vllm_service runs with that hub id and the
double as vllm_service_hf_endpoint: it fetches the snapshot into the unit's hub cache (as the vllm user),
renders the unit with HF_HUB_OFFLINE=1 (vllm_service_hf_offline auto) and restarts it once. The server then
starts from the hub id without asking the hub (no request with vLLM's User-Agent reaches the double) and
answers a completion. The weights step alone again fetches nothing and asks the hub nothing.

Runs after test_e2e.py (file order) and puts the box back at the end, whatever happened: vllm_service
again with the inventory as it is (the local model; the unit restarts on it), the double stopped, the
test's snapshot removed. About 3 minutes on a 2-core machine: three role runs (the last two short) and
one vLLM start.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights_prefetch.yml")
DOUBLE = os.path.join(REPO, "tests", "doubles", "hf_hub_double.py")
HUB_REPO = "gpuhost-lab/tiny-qwen3"
BOX_DOUBLE = "/usr/local/lib/gpuhost-test/hf_hub_double.py"
DOUBLE_UNIT = "gpuhost-hf-hub-double"
PORT_FILE = "/run/gpuhost-hf-hub-double.port"
HUB_CACHE = "/var/lib/vllm/cache/huggingface/hub"
SNAPSHOTS = HUB_CACHE + "/models--gpuhost-lab--tiny-qwen3/snapshots"
RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
                   r"failed=(?P<failed>\d+)", re.M)
WRITE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
ASK = ("import json, sys, urllib.request as u\n"
       "print(u.urlopen(sys.argv[1], timeout=10).read().decode())\n")
COMPLETE = (
    "import json, sys, urllib.request, urllib.error\n"
    "req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', data=sys.argv[1].encode(),\n"
    "                             headers={'Content-Type': 'application/json'})\n"
    "try:\n"
    "    r = urllib.request.urlopen(req, timeout=60); print(json.dumps({'status': r.status, 'body': r.read().decode()}))\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(json.dumps({'status': e.code, 'body': e.read().decode()}))\n"
    "except OSError as e:\n"
    "    print(json.dumps({'status': 0, 'body': str(e)}))\n"
)


def _box(host) -> str:
    return host.check_output("hostname").strip()


def _inventory(tmp_path, box: str) -> str:
    """The e2e box with the e2e inventory's variables (demo group vars, then the box's host vars)."""
    with open(os.path.join(REPO, "inventories", "demo", "group_vars", "gpu_servers.yml"), encoding="utf-8") as fh:
        group = yaml.safe_load(fh)
    with open(os.path.join(REPO, "molecule", "e2e", "inventory", "host_vars", "lab-e2e.yml"), encoding="utf-8") as fh:
        box_vars = yaml.safe_load(fh)
    box_vars.pop("vllm_verify_controller_report_dir", None)   # not used by vllm_service; an env lookup
    inv = {"gpu_servers": {"hosts": {box: {"ansible_connection": "lab_podman", "ansible_host": box,
                                           "ansible_python_interpreter": "/usr/bin/python3"}},
                           "vars": {**group, **box_vars}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def _playbook(inventory: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_INJECT_FACT_VARS="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, PLAYBOOK, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def _recap(stdout: str, box: str) -> dict:
    for m in RECAP.finditer(stdout):
        if m.group("host") == box:
            return {k: int(v) for k, v in m.groupdict().items() if k != "host"}
    return {}


def _requests(host, port: int) -> list:
    """What the double was asked, less the test's own reads of this log."""
    seen = json.loads(host.check_output("python3 -c %s %s", ASK, "http://127.0.0.1:%d/_double/requests" % port))
    return [r for r in seen if r["path"] != "/_double/requests"]


def _serving(host, timeout: float = 240) -> dict:
    """Poll one short completion of the served model until it answers 200 (or the time is up)."""
    payload = json.dumps({"model": "tiny-qwen3", "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0})
    deadline, answer = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        answer = json.loads(host.check_output("python3 -c %s %s", COMPLETE, payload))
        if answer["status"] == 200:
            return answer
        time.sleep(3)
    return answer


def _unit_env(host) -> str:
    return host.check_output("systemctl show -p Environment vllm.service")


@pytest.fixture(scope="module")
def prefetched(host, tmp_path_factory):
    """The double started in the box, vllm_service run with the hub id; the box put back afterwards."""
    box = _box(host)
    inventory = _inventory(tmp_path_factory.mktemp("weights"), box)
    with open(DOUBLE, encoding="utf-8") as fh:
        host.check_output("mkdir -p %s", os.path.dirname(BOX_DOUBLE))
        host.check_output("python3 -c %s %s %s", WRITE, BOX_DOUBLE, fh.read())
    host.run("systemctl stop %s; systemctl reset-failed %s; rm -f %s", DOUBLE_UNIT, DOUBLE_UNIT, PORT_FILE)
    host.check_output("systemd-run --unit=%s /usr/bin/python3 %s --repo %s=/srv/models/tiny-qwen3 --port-file %s",
                      DOUBLE_UNIT, BOX_DOUBLE, HUB_REPO, PORT_FILE)
    # up to 60 s: a python start in the box beside vLLM and the other scenario on a loaded machine
    deadline = time.monotonic() + 60
    while not host.file(PORT_FILE).exists and time.monotonic() < deadline:
        time.sleep(0.2)
    assert host.file(PORT_FILE).exists, host.run("journalctl -u %s -n 20 --no-pager", DOUBLE_UNIT).stdout
    port = int(host.file(PORT_FILE).content_string)
    extra = json.dumps({"vllm_service_model": HUB_REPO, "vllm_service_hf_endpoint": "http://127.0.0.1:%d" % port})
    try:
        t0 = time.monotonic()
        run = _playbook(inventory, "-e", extra)
        fetched_at = len(_requests(host, port))
        answer = _serving(host)
        served_s = time.monotonic() - t0
        yield {"box": box, "port": port, "run": run, "answer": answer, "served_s": served_s,
               "requests_after_fetch": fetched_at, "inventory": inventory, "extra": extra,
               "env": _unit_env(host),
               "config": host.check_output("cat /etc/vllm/profiles/lab.yaml"),
               "journal": host.check_output("journalctl -u vllm.service --no-pager -o cat -n 400 "
                                            "_SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value vllm.service)")}
    finally:
        # Back to the inventory as it is; the unit restarts on its own files (serving that configuration is what
        # converge and test_e2e.py proved: the test does not wait another minute for it to load).
        restore = _playbook(inventory)
        host.run("systemctl stop %s; rm -rf %s %s", DOUBLE_UNIT, HUB_CACHE + "/models--gpuhost-lab--tiny-qwen3",
                 os.path.dirname(BOX_DOUBLE))
        assert restore.returncode == 0, restore.stdout[-4000:]
        assert host.service("vllm.service").is_running
        assert "model: /srv/models/tiny-qwen3" in host.check_output("cat /etc/vllm/profiles/lab.yaml")
        assert "HF_HUB_OFFLINE=1" in _unit_env(host) and "HF_ENDPOINT" not in _unit_env(host)


def test_the_role_fetched_the_weights_and_restarted_offline(prefetched):
    run = prefetched["run"]
    print("\nvllm_service with %s from the hub double: %.0f s to a served completion" % (HUB_REPO, prefetched["served_s"]))
    assert run.returncode == 0, run.stdout[-6000:]
    recap = _recap(run.stdout, prefetched["box"])
    assert recap and recap["failed"] == 0 and recap["changed"] > 0, run.stdout[-4000:]
    flat = " ".join(run.stdout.split())    # the YAML callback folds long lines
    assert re.search(r"%s@main: fetched 6 files \(4\.5 MiB\) in [\d.]+ s, snapshot [0-9a-f]{12} complete" % HUB_REPO,
                     flat), run.stdout[-4000:]
    assert "HF_HUB_OFFLINE=1" in prefetched["env"] and "HF_ENDPOINT=http://127.0.0.1:%d" % prefetched["port"] in prefetched["env"]
    assert "model: %s" % HUB_REPO in prefetched["config"], prefetched["config"]


def test_the_snapshot_belongs_to_the_service_user(host, prefetched):
    commits = host.check_output("ls %s", SNAPSHOTS).split()
    assert len(commits) == 1, commits
    snapshot = SNAPSHOTS + "/" + commits[0]
    names = host.check_output("ls %s", snapshot).split()
    assert sorted(names) == ["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
                             "tokenizer.json", "tokenizer_config.json"]
    owners = set(host.check_output("find %s -xdev -printf '%%u\\n'", HUB_CACHE + "/models--gpuhost-lab--tiny-qwen3").split())
    assert owners == {"vllm"}, owners
    same = host.run("cmp %s/model.safetensors /srv/models/tiny-qwen3/model.safetensors", snapshot)
    assert same.rc == 0, same.stdout + same.stderr
    assert "fetching %s" % HUB_REPO in host.check_output("cat /var/lib/vllm/fetch-weights.log")


def test_vllm_started_offline_from_the_hub_id_and_asked_the_hub_nothing(host, prefetched):
    answer = prefetched["answer"]
    assert answer.get("status") == 200, answer
    assert json.loads(answer["body"])["usage"]["completion_tokens"] > 0, answer
    assert "HF_HUB_OFFLINE is True, replace model_id [%s]" % HUB_REPO in prefetched["journal"], prefetched["journal"][-3000:]
    seen = _requests(host, prefetched["port"])
    from_vllm = [r for r in seen if "vllm/" in r["agent"] or "transformers/" in r["agent"]]
    assert not from_vllm, from_vllm
    assert len(seen) == prefetched["requests_after_fetch"], seen[prefetched["requests_after_fetch"]:]
    assert seen and all(r["agent"].startswith("gpuhost-vllm-fetch-weights/") for r in seen), seen


def test_the_weights_step_again_fetches_nothing_and_asks_the_hub_nothing(host, prefetched):
    before = len(_requests(host, prefetched["port"]))
    again = _playbook(prefetched["inventory"], "-e", prefetched["extra"], "--tags", "vllm_service_weights")
    assert again.returncode == 0, again.stdout[-4000:]
    recap = _recap(again.stdout, prefetched["box"])
    assert recap and recap["changed"] == 0 and recap["failed"] == 0, again.stdout[-4000:]
    assert "%s@main: on disk, nothing fetched" % HUB_REPO in " ".join(again.stdout.split()), again.stdout[-4000:]
    assert len(_requests(host, prefetched["port"])) == before
