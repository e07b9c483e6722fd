"""testinfra checks of the nvidia_power role on the lab boxes (mocked nvidia-smi, a test double).

Run by molecule's verifier on lab-tp2 (2x RTX 3090, group_vars: 250 W) and lab-single
(1x RTX 3090, host_vars: 275 W). Another box is checked against its inventory's
nvidia_power_limit_w (else the role default, 250 W). Every failure message carries the
unit's journal.
"""
from __future__ import annotations

import json

import pytest

# The default scenario's converged boxes these checks read (its verifier also runs the fault checks,
# whose modules name lab-faults): testinfra_hosts, since a --hosts option would override every module's own.
testinfra_hosts = ["lab-tp2", "lab-single"]

UNIT = "gpu-power-limit.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
DEFAULTS_FILE = "/var/lib/gpuhost/gpu-defaults.json"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
ROLE_DEFAULT_LIMIT_W = 250
# The limits the molecule inventory asks for (group_vars, and lab-single's host_vars override).
EXPECTED_LIMIT_W = {"lab-tp2": 250, "lab-single": 275}
EXPECTED_GPU_COUNT = {"lab-tp2": 2, "lab-single": 1}


def hostname(host):
    return host.check_output("hostname").strip()


def journal(host):
    return host.run("journalctl --unit %s --lines 30 --no-pager" % UNIT).stdout


def expected_limit(host):
    name = hostname(host)
    if name in EXPECTED_LIMIT_W:
        return EXPECTED_LIMIT_W[name]
    try:
        value = host.ansible.get_variables().get("nvidia_power_limit_w")
    except (AttributeError, RuntimeError):
        value = None
    return int(value) if value is not None else ROLE_DEFAULT_LIMIT_W


def unit_properties(host):
    out = host.check_output(
        "systemctl show %s --property=Type,RemainAfterExit,Before,After,WantedBy,User,"
        "ActiveState,SubState,Result,UnitFileState,FragmentPath" % UNIT
    )
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def query_limits(host):
    out = host.check_output(
        "%s --query-gpu=index,power.limit,enforced.power.limit --format=csv,noheader,nounits" % NVIDIA_SMI
    )
    rows = {}
    for line in out.splitlines():
        index, limit, enforced = [part.strip() for part in line.split(",")]
        rows[int(index)] = (float(limit), float(enforced))
    return rows


def test_unit_file_is_managed_and_root_owned(host):
    unit = host.file(UNIT_PATH)
    assert unit.exists, "%s missing\n%s" % (UNIT_PATH, journal(host))
    assert unit.user == "root" and unit.group == "root"
    assert unit.mode == 0o644
    lines = unit.content_string.splitlines()
    assert lines[0].startswith("#"), "unit does not start with the ansible_managed comment: %r" % lines[:3]
    assert any("Ansible managed" in line for line in lines[:5]), lines[:5]


def test_unit_properties(host):
    props = unit_properties(host)
    msg = "%r\n%s" % (props, journal(host))
    assert props["FragmentPath"] == UNIT_PATH, msg
    assert props["Type"] == "oneshot", msg
    assert props["RemainAfterExit"] == "yes", msg
    assert "vllm.service" in props["Before"].split(), msg
    assert "multi-user.target" in props["WantedBy"].split(), msg
    # The boot order is stated here only: the cap is wanted by the model unit through its own WantedBy=.
    assert "vllm.service" in props["WantedBy"].split(), msg
    assert props["User"] in ("", "root"), msg
    assert props["UnitFileState"] == "enabled", msg


def test_ordered_after_the_persistence_daemon_where_the_box_has_one(host):
    # lab-tp2 has the driver's nvidia-persistenced.service (a stand-in, molecule/resources/prepare.yml), lab-single none.
    has = host.file("/etc/systemd/system/nvidia-persistenced.service").exists
    assert has is (host.backend.get_hostname() == "lab-tp2")
    assert ("nvidia-persistenced.service" in unit_properties(host)["After"].split()) is has


def test_unit_hardening_fits_a_root_nvidia_smi(host):
    # The shared fragment (roles/_common/templates/hardening.conf.j2), only what a root oneshot driving nvidia-smi
    # tolerates: the cap still ran (test below), with no limit on devices, capabilities or the file system.
    out = host.check_output("systemctl show %s --property=ProtectHome,PrivateTmp,RestrictNamespaces,LockPersonality,"
                            "ProtectSystem,DevicePolicy,NoNewPrivileges" % UNIT)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert {k: props[k] for k in ("ProtectHome", "PrivateTmp", "RestrictNamespaces", "LockPersonality")} == \
        {"ProtectHome": "yes", "PrivateTmp": "yes", "RestrictNamespaces": "yes", "LockPersonality": "yes"}, props
    assert (props["ProtectSystem"], props["DevicePolicy"], props["NoNewPrivileges"]) == ("no", "auto", "no"), props


def test_unit_ran_and_stayed_active(host):
    props = unit_properties(host)
    msg = "%r\n%s" % (props, journal(host))
    assert props["ActiveState"] == "active", msg
    assert props["SubState"] == "exited", msg
    assert props["Result"] == "success", msg


def test_exec_start_caps_every_gpu(host):
    limit = expected_limit(host)
    exec_lines = [line for line in host.file(UNIT_PATH).content_string.splitlines() if line.startswith("ExecStart=")]
    gpus = sorted(query_limits(host))
    wanted = "ExecStart=%s -i %s -pl %d" % (NVIDIA_SMI, ",".join(str(i) for i in gpus), limit)
    assert wanted in exec_lines, "%r not among %r" % (wanted, exec_lines)


def test_limits_landed_in_the_mock(host):
    limit = expected_limit(host)
    rows = query_limits(host)
    name = hostname(host)
    if name in EXPECTED_GPU_COUNT:
        assert len(rows) == EXPECTED_GPU_COUNT[name], rows
    assert rows, "nvidia-smi reported no GPU"
    for index, (power_limit, enforced) in sorted(rows.items()):
        msg = "GPU %d: power.limit %s W, enforced %s W, expected %s W\n%s" % (
            index, power_limit, enforced, limit, journal(host))
        assert power_limit == pytest.approx(limit), msg
        assert enforced == pytest.approx(limit), msg


def test_default_limits_recorded(host):
    record = host.file(DEFAULTS_FILE)
    assert record.exists, DEFAULTS_FILE + " missing"
    assert record.user == "root" and record.mode == 0o644
    data = json.loads(record.content_string)
    assert data["recorded_by"] == "gpuhost.inference.nvidia_power"
    out = host.check_output(
        "%s --query-gpu=uuid,power.default_limit --format=csv,noheader,nounits" % NVIDIA_SMI
    )
    for line in out.splitlines():
        uuid, default = [part.strip() for part in line.split(",")]
        assert uuid in data["gpus"], "%s not recorded in %s: %r" % (uuid, DEFAULTS_FILE, data)
        assert data["gpus"][uuid]["default_power_limit_w"] == pytest.approx(float(default))
        # the record is the state before the cap: the RTX 3090's default 350 W, not the cap
        assert data["gpus"][uuid]["power_limit_w"] != pytest.approx(expected_limit(host))
