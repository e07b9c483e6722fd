# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's testinfra transport: each command of a `podman://` host runs through nsenter, not `podman exec`.

Lab infrastructure, not part of the collection: a pytest plugin the molecule verifier loads
(.config/molecule/config.yml: PYTEST_ADDOPTS=-p lab_testinfra, this folder on PYTHONPATH). testinfra's podman
backend runs `podman exec BOX /bin/sh -c CMD` for every command: the podman CLI, conmon and an OCI runtime exec each
time (0.15-0.2 s of wall and ~0.1 CPU-s on the 2-core lab, more under load), and the tests poll. This plugin keeps
the backend (its `podman://` host ids, its command quoting, its results) and replaces the transport only: the box's
PID 1 from the lab connection's cache while that process lives (a restarted box is asked for again), then `nsenter`
into the box's namespaces with a root login's environment: the same two functions the lab's Ansible connection uses
(tests/lab/connection_plugins/lab_podman.py: container_pid, nsenter_argv). A named user (`podman://user@box`) keeps
`podman exec -u`. GPUHOST_LAB_TESTINFRA=podman turns it off.
"""
from __future__ import annotations

import os
import subprocess

from testinfra.backend import base, podman

# The lab's Ansible connection: its PID cache and its nsenter command line (this folder is on PYTHONPATH).
from connection_plugins.lab_podman import cache_file, container_pid, nsenter_argv  # pylint: disable=import-error

_podman_run = podman.PodmanBackend.run


def _nsenter_run(self, command: str, *args: str, **kwargs) -> base.CommandResult:
    if self.user is not None or os.environ.get("GPUHOST_LAB_TESTINFRA") == "podman":
        return _podman_run(self, command, *args, **kwargs)
    cmd = self.get_command(command, *args)
    pid = container_pid(self.name, os.environ.get("MOLECULE_PODMAN_EXECUTABLE") or "podman", cache_file(self.name))
    proc = subprocess.run(nsenter_argv(pid, ["/bin/sh", "-c", cmd]), stdin=subprocess.DEVNULL, capture_output=True,
                          check=False)
    return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)


def pytest_configure(config):  # pylint: disable=unused-argument
    """Swap the transport in as the session starts (before any host fixture exists)."""
    podman.PodmanBackend.run = _nsenter_run
