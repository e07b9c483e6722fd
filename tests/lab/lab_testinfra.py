# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's testinfra transport: each command of a `podman://` host runs through nsenter, not `podman exec`.

Lab infrastructure, not part of the collection: a pytest plugin the molecule verifier loads
(.config/molecule/config.yml: PYTEST_ADDOPTS=-p lab_testinfra, this folder on PYTHONPATH). testinfra's podman
backend runs `podman exec BOX /bin/sh -c CMD` for every command: the podman CLI, conmon and an OCI runtime exec each
time (0.15-0.2 s of wall and ~0.1 CPU-s on the 2-core lab, more under load), and the tests poll. This plugin keeps
the backend (its `podman://` host ids, its command quoting, its results) and replaces the transport only: the box's
PID 1 asked once per session and kept while that process lives (a restarted box is asked for again), then `nsenter`
into the box's namespaces with a root login's environment, as the lab's Ansible connection does
(tests/lab/connection_plugins/lab_podman.py: its namespaces, environment and start-time check are imported from
there). A named user (`podman://user@box`) keeps `podman exec -u`. GPUHOST_LAB_TESTINFRA=podman turns it off.
"""
from __future__ import annotations

import os
import subprocess

from testinfra.backend import base, podman

# The Ansible connection's namespaces, root environment and start-time check (this folder is on PYTHONPATH).
from connection_plugins.lab_podman import BOX_ENV, NAMESPACES, _start_time  # pylint: disable=import-error

_podman_run = podman.PodmanBackend.run


def _box_pid(backend) -> int:
    cached = getattr(backend, "_lab_pid", None)
    if cached and _start_time(cached[0]) == cached[1]:
        return cached[0]
    out = subprocess.run([os.environ.get("MOLECULE_PODMAN_EXECUTABLE") or "podman", "inspect", "--type", "container",
                          "--format", "{{.State.Pid}}", backend.name], capture_output=True, text=True, check=False)
    pid = out.stdout.strip()
    if out.returncode != 0 or not pid.isdigit() or int(pid) == 0:
        raise RuntimeError("lab_testinfra: box %s is not running: %s" % (backend.name, out.stderr.strip() or pid))
    backend._lab_pid = (int(pid), _start_time(int(pid)))
    return int(pid)


def _nsenter_run(self, command: str, *args: str, **kwargs) -> base.CommandResult:
    if self.user is not None or os.environ.get("GPUHOST_LAB_TESTINFRA") == "podman":
        return _podman_run(self, command, *args, **kwargs)
    cmd = self.get_command(command, *args)
    argv = (["nsenter", "--target", str(_box_pid(self))] + NAMESPACES + ["--root", "--wd", "--", "env", "-i"]
            + BOX_ENV + ["/bin/sh", "-c", cmd])
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)


def pytest_configure(config):  # pylint: disable=unused-argument
    """Swap the transport in as the session starts (before any host fixture exists)."""
    podman.PodmanBackend.run = _nsenter_run
