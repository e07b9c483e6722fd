"""Check mode: on the converged box `site.yml --check --diff` reports 0 changed and no errors;
on a fresh box it reports what would change without failing."""
from __future__ import annotations

import os
import re
import subprocess

from faults_lib import BOX, REPO, inventory, run_playbook

# The default scenario's verifier runs these beside tests/integration/ (other boxes): only the faults box.
testinfra_hosts = [BOX]

RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M)


def recap(stdout: str) -> dict:
    return {m.group("host"): {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(stdout)}


def test_check_mode_on_the_converged_box_changes_nothing(tmp_path):
    # The box as converge and idempotence left it (the verifier runs before the fault cases).
    proc = run_playbook(inventory(tmp_path, BOX), "--check", "--diff")
    r = recap(proc.stdout).get(BOX)
    print(f"\ncheck mode on the converged box: {r}")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert r and r["changed"] == 0 and r["failed"] == 0, proc.stdout[-6000:]


def test_check_mode_on_a_fresh_box_reports_changes_without_failing(tmp_path):
    box = "lab-fresh"
    lab_box = os.path.join(REPO, "scripts", "lab-box.sh")
    subprocess.run(["bash", lab_box, "up", box, "rtx3090x2"], check=True, capture_output=True, text=True)
    try:
        proc = run_playbook(inventory(tmp_path, box), "--check", "--diff")
        r = recap(proc.stdout).get(box)
        print(f"\ncheck mode on a fresh box: {r}")
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert r and r["failed"] == 0 and r["changed"] > 0, proc.stdout[-6000:]
        leftovers = subprocess.run(["podman", "exec", box, "sh", "-c", "ls /opt/vllm /etc/vllm /etc/systemd/system/vllm.service 2>&1; id vllm 2>&1"],
                                   capture_output=True, text=True, check=False).stdout
        assert "No such file" in leftovers and "no such user" in leftovers, leftovers
    finally:
        subprocess.run(["bash", lab_box, "down", box], capture_output=True, text=True, check=False)
