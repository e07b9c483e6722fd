"""Check mode: on the converged box `site.yml --check --diff` reports 0 changed and no errors;
on a fresh box it reports what would change without failing (both boxes in one run)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
from faults_lib import BOX, REPO, inventory, run_playbook

# The default scenario's verifier runs these beside tests/integration/ (other boxes): only the faults box.
testinfra_hosts = [BOX]

RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M)


def recap(stdout: str) -> dict:
    return {m.group("host"): {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(stdout)}


FRESH = "lab-fresh"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One `site.yml --check --diff` run over both boxes (one playbook run, CI time): the faults box as converge and
    idempotence left it (the verifier runs before the fault cases) and a fresh box started for it; -> (proc, recap,
    what the fresh box has after it). The fresh box is removed at the end."""
    lab_box = os.path.join(REPO, "scripts", "lab-box.sh")
    subprocess.run(["bash", lab_box, "up", FRESH, "rtx3090x2"], check=True, capture_output=True, text=True)
    try:
        proc = run_playbook(inventory(tmp_path_factory.mktemp("check"), BOX, FRESH), "--check", "--diff")
        leftovers = subprocess.run(["podman", "exec", FRESH, "sh", "-c",
                                    "ls /opt/vllm /etc/vllm /etc/systemd/system/vllm.service 2>&1; id vllm 2>&1"],
                                   capture_output=True, text=True, check=False).stdout
        yield proc, recap(proc.stdout), leftovers
    finally:
        subprocess.run(["bash", lab_box, "down", FRESH], capture_output=True, text=True, check=False)


def test_check_mode_on_the_converged_box_changes_nothing(checked):
    proc, recaps, _leftovers = checked
    r = recaps.get(BOX)
    print(f"\ncheck mode on the converged box: {r}")
    assert r and r["changed"] == 0 and r["failed"] == 0 and r["unreachable"] == 0, proc.stdout[-6000:]


def test_check_mode_on_a_fresh_box_reports_changes_without_failing(checked):
    proc, recaps, leftovers = checked
    r = recaps.get(FRESH)
    print(f"\ncheck mode on a fresh box: {r}")
    assert r and r["failed"] == 0 and r["unreachable"] == 0 and r["changed"] > 0, proc.stdout[-6000:]
    assert "No such file" in leftovers and "no such user" in leftovers, leftovers


def test_the_check_run_ended_without_an_error(checked):
    proc, recaps, _leftovers = checked
    assert proc.returncode == 0 and set(recaps) == {BOX, FRESH}, proc.stdout[-4000:] + proc.stderr[-2000:]
