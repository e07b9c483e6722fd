"""After the full converge, the host is still healthy for its unprivileged users (issue 42.7): the system directories
keep the modes of the lab image they came from, and each service account the collection runs can read what every
program needs (the account database, the TLS trust store, /etc itself).

One command per box (each host.run costs a module round trip); the baseline is one `podman run` of the lab image.
"""
from __future__ import annotations

import os
import subprocess

import pytest

testinfra_hosts = ["lab-tp2", "lab-single"]

# The directories whose mode a role taking one of them would change (the issue's: /etc re-moded 0700 root).
SYSTEM_DIRS = ["/", "/etc", "/etc/ssl", "/etc/ssl/certs", "/etc/default", "/etc/systemd/system", "/opt", "/run", "/srv",
               "/tmp", "/usr", "/usr/local", "/usr/local/bin", "/usr/local/lib", "/var", "/var/lib", "/var/log", "/var/tmp"]
# What every program of an unprivileged account reads.
READABLE = ["/etc/passwd", "/etc/group", "/etc/ssl/certs/ca-certificates.crt", "/etc/hosts", "/etc/nsswitch.conf"]
# The service accounts the roles run their programs as (those absent on a box are skipped there).
ACCOUNTS = ["vllm", "prometheus", "www-data", "nobody"]
STAT = "stat -c '%n %a %U %G' " + " ".join(SYSTEM_DIRS)


@pytest.fixture(scope="module")
def image_modes():
    """The modes in the lab image the boxes were made from (the state before any role ran)."""
    image = os.environ.get("LAB_IMAGE", "localhost/gpuhost-lab:bookworm")
    proc = subprocess.run(["podman", "run", "--rm", "--network=none", "--entrypoint", "/bin/sh", image, "-c", STAT],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        pytest.skip("the lab image cannot be read here: %s" % proc.stderr[-300:])
    return proc.stdout.splitlines()


def test_system_directories_keep_the_image_modes(host, image_modes):
    assert host.check_output(STAT).splitlines() == image_modes


def test_service_accounts_read_what_every_program_reads(host):
    script = (
        "for u in %s; do getent passwd $u >/dev/null || continue; "
        "for f in %s; do runuser -u $u -- test -r $f || echo \"$u cannot read $f\"; done; "
        "runuser -u $u -- ls /etc >/dev/null 2>&1 || echo \"$u cannot list /etc\"; "
        "runuser -u $u -- getent passwd root >/dev/null || echo \"$u cannot resolve root\"; done; echo checked"
    ) % (" ".join(ACCOUNTS), " ".join(READABLE))
    out = host.check_output(script).splitlines()
    assert out == ["checked"], out
