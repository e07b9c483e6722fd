"""The API key stays off command lines: while vllm_verify restarts the server and waits for it
(with become, through ansible.builtin.script), a watcher on the box scans every process's argv and
environment (but the environment of the server's own processes, which get VLLM_API_KEY from the
unit's root-only env file by design) for the key; it must see it nowhere. The watcher is shown to see a key that is on a
command line (positive control), so an empty result is not a blind one."""
from __future__ import annotations

import os
import subprocess
import time

import yaml

from faults_lib import BOX, REPO, inventory, run_playbook

# The default scenario's verifier runs these beside tests/integration/ (other boxes): only the faults box.
testinfra_hosts = [BOX]

WATCHER = r"""
import os, pwd, sys, time

needle = sys.argv[1].encode()
server_uid = pwd.getpwnam("vllm").pw_uid  # the server itself gets VLLM_API_KEY in its environment, by design
stop = "/run/keywatch.stop"
with open("/run/keywatch.log", "w") as log:
    log.write("started\n"); log.flush()
    while not os.path.exists(stop):
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                uid = os.stat("/proc/%s" % pid).st_uid
            except OSError:
                continue
            for part in ("cmdline",) if uid == server_uid else ("cmdline", "environ"):
                try:
                    with open("/proc/%s/%s" % (pid, part), "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                if needle in data:
                    log.write("%s %s %r\n" % (pid, part, data.replace(b"\0", b" ")[:160])); log.flush()
        time.sleep(0.01)
"""


def _key() -> str:
    with open(os.path.join(REPO, "molecule", "default", "inventory", "host_vars", f"{BOX}.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)["vllm_service_api_key"]


def _exec(*args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", BOX, *args], capture_output=True, text=True, check=check, **kw)


def test_the_api_key_is_in_no_process_argv_during_the_wait(tmp_path):
    key = _key()
    _exec("rm", "-f", "/run/keywatch.stop", "/run/keywatch.log")
    watcher = subprocess.Popen(["podman", "exec", BOX, "python3", "-c", WATCHER, key])
    try:
        deadline = time.monotonic() + 30
        while "started" not in _exec("cat", "/run/keywatch.log").stdout and time.monotonic() < deadline:
            time.sleep(0.2)
        # positive control: a key on a command line is seen
        _exec("sh", "-c", "sleep 0.5; : " + key)
        time.sleep(0.3)
        control = _exec("cat", "/run/keywatch.log").stdout
        assert "cmdline" in control, control
        _exec("sh", "-c", "echo started > /run/keywatch.log")
        proc = run_playbook(inventory(tmp_path, BOX), playbook=os.path.join(REPO, "molecule", "default", "faults", "tests", "verify_restart.yml"))
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert "Wait until it serves" in proc.stdout
    finally:
        _exec("touch", "/run/keywatch.stop")
        watcher.wait(timeout=30)
    hits = [line for line in _exec("cat", "/run/keywatch.log").stdout.splitlines() if line != "started"]
    print(f"\nprocesses holding the API key during the restart and wait: {len(hits)}")
    assert hits == [], hits
