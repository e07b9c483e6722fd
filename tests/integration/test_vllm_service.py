"""testinfra checks of gpuhost.inference.vllm_service (molecule default: lab-tp2 with the `default`
profile, lab-single with `single_gpu` from its host_vars).

The launcher is exercised against the argv-recording stand-in python (a test double,
tests/doubles/record_argv_python), which molecule's prepare installs at
/usr/local/lib/gpuhost-tests/record_argv_python.
"""
from __future__ import annotations

import json
import re

import pytest
import yaml

# The default scenario's converged boxes these checks read (its verifier also runs the fault checks,
# whose modules name lab-faults): testinfra_hosts, since a --hosts option would override every module's own.
testinfra_hosts = ["lab-tp2", "lab-single"]

UNIT = "vllm.service"
POWER_UNIT = "gpu-power-limit.service"
PROFILE_DIR = "/etc/vllm/profiles"
ENV_FILE = "/etc/default/vllm"
SECRETS = "/etc/vllm/secrets.env"
LAUNCHER = "/usr/local/bin/vllm-start"
RECORDER = "/usr/local/lib/gpuhost-tests/record_argv_python"
DEFAULT_PROFILES = ("default", "long", "mtp", "single_gpu")
# What each molecule host selects (host_vars), when the backend cannot tell us.
EXPECTED_PROFILE = {"lab-tp2": "default", "lab-single": "single_gpu"}


def journal(host, lines=40):
    return host.run("journalctl -u %s -n %d --no-pager -o cat" % (UNIT, lines)).stdout


def expected_profile(host):
    try:
        profile = host.ansible.get_variables().get("vllm_service_profile")
    except Exception:  # not the ansible backend
        profile = None
    if profile:
        return profile
    return EXPECTED_PROFILE.get(host.check_output("hostname"), "default")


def unit_properties(host, *names):
    out = host.check_output("systemctl show %s -p %s" % (UNIT, ",".join(names)))
    props = {}
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        # Some properties (EnvironmentFiles) come as one line per value.
        props[key] = props[key] + "\n" + value if key in props else value
    return props


def run_launcher(host, env, args=""):
    """Run the launcher as the service user; returns the command result."""
    assignments = " ".join("%s=%s" % (k, v) for k, v in env.items())
    return host.run("timeout 60 runuser -u vllm -- env %s %s %s" % (assignments, LAUNCHER, args))


@pytest.fixture()
def stand_in_venv(host):
    """A temporary venv whose bin/python is the argv-recording stand-in; removed afterwards."""
    assert host.file(RECORDER).is_file, "molecule prepare installs the stand-in at %s" % RECORDER
    venv = host.check_output("mktemp -d /var/tmp/vllm-service-test.XXXXXX")
    host.check_output("mkdir %s/bin && ln -s %s %s/bin/python && chown -R vllm:vllm %s" % (venv, RECORDER, venv, venv))
    yield venv
    host.run("rm -rf %s" % venv)


def test_unit_runs_as_vllm_and_only_wants_the_power_unit(host):
    props = unit_properties(host, "User", "Group", "Wants", "After", "Requires", "Requisite", "BindsTo",
                            "LoadState", "UnitFileState", "FragmentPath")
    assert props["LoadState"] == "loaded", journal(host)
    assert props["FragmentPath"] == "/etc/systemd/system/" + UNIT
    assert props["User"] == "vllm"
    assert props["Group"] == "vllm"
    assert POWER_UNIT in props["Wants"].split()
    assert POWER_UNIT in props["After"].split()
    assert "network-online.target" in props["After"].split()
    for hard in ("Requires", "Requisite", "BindsTo"):
        assert POWER_UNIT not in props[hard].split(), (hard, props[hard])
    assert props["UnitFileState"] == "enabled"
    # ... and the order is the power unit's to state (Before=, WantedBy=): this unit's file never names it.
    unit_text = host.file("/etc/systemd/system/" + UNIT).content_string
    assert POWER_UNIT not in unit_text, unit_text


def test_unit_restarts_after_any_exit_but_status_2(host):
    # vLLM 0.28.0's API server exits 0 after its engine died: on-failure would leave nothing serving.
    props = unit_properties(host, "Restart", "RestartPreventExitStatus", "RestartUSec", "StartLimitBurst",
                            "StartLimitIntervalUSec", "TimeoutStopUSec")
    assert props["Restart"] == "always", props
    # 2: unknown profile / missing venv (vllm-start) or a flag vLLM refused: final, no retry.
    assert props["RestartPreventExitStatus"].split() == ["2"], props
    assert props["RestartUSec"] == "10s", props
    # The start limit bounds a crash loop: 5 starts in 30 minutes.
    assert props["StartLimitBurst"] == "5", props
    assert props["StartLimitIntervalUSec"] == "30min", props
    # An orphaned worker ignores SIGTERM after an engine death: the restart waits this long, not 90 s.
    assert props["TimeoutStopUSec"] == "30s", props


def test_unit_hardening(host):
    props = unit_properties(host, "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
                            "DevicePolicy", "RestrictAddressFamilies", "CapabilityBoundingSet", "IPAddressDeny",
                            "ProtectClock", "MemoryDenyWriteExecute", "ReadWritePaths", "UMask", "TimeoutStartUSec",
                            "Environment", "EnvironmentFiles")
    assert props["NoNewPrivileges"] == "yes"
    assert props["ProtectSystem"] == "strict"
    assert props["ProtectHome"] == "yes"
    assert props["PrivateTmp"] == "yes"
    assert props["PrivateDevices"] == "no"
    assert props["DevicePolicy"] == "closed"
    assert "AF_UNIX" in props["RestrictAddressFamilies"].split()
    assert props["CapabilityBoundingSet"] == ""
    assert props["IPAddressDeny"] == ""
    assert props["ProtectClock"] == "no"
    assert props["MemoryDenyWriteExecute"] == "no"
    assert "/var/lib/vllm" in props["ReadWritePaths"].split()
    assert props["UMask"] == "0027"
    assert props["TimeoutStartUSec"] == "30min"
    env = dict(item.split("=", 1) for item in props["Environment"].split())
    assert env["HOME"] == "/var/lib/vllm/home"
    for var in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "HF_HOME"):
        assert env[var].startswith("/var/lib/vllm/"), (var, env[var])
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert "VLLM_API_KEY" not in env
    model = yaml.safe_load(host.file("%s/%s.yaml" % (PROFILE_DIR, expected_profile(host))).content_string)["model"]
    if model.startswith("/"):
        assert env.get("HF_HUB_OFFLINE") == "1", (model, env)
    assert ENV_FILE in props["EnvironmentFiles"]
    assert SECRETS in props["EnvironmentFiles"]


def test_unit_file_is_managed_verified_and_exposure_is_low(host):
    unit = host.file("/etc/systemd/system/" + UNIT)
    assert unit.user == "root" and unit.mode == 0o644
    content = unit.content_string
    assert content.startswith("#\n# Ansible managed")
    body = [line for line in content.splitlines() if not line.startswith("#")]
    assert not any(line.startswith(("Requires=", "Requisite=", "BindsTo=")) for line in body)
    assert not any("VLLM_API_KEY" in line or "api-key" in line for line in body)
    verify = host.run("systemd-analyze verify /etc/systemd/system/%s" % UNIT)
    assert verify.rc == 0, verify.stderr
    security = host.run("systemd-analyze security %s --no-pager" % UNIT)
    match = re.search(r"Overall exposure level for %s: ([0-9.]+)" % re.escape(UNIT), security.stdout)
    assert match, security.stdout[-2000:]
    assert float(match.group(1)) <= 5.0, security.stdout


def test_config_files_and_modes(host):
    secrets = host.file(SECRETS)
    assert secrets.is_file
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
    env = host.file(ENV_FILE)
    assert (env.user, env.group, env.mode) == ("root", "root", 0o644)
    launcher = host.file(LAUNCHER)
    assert (launcher.user, launcher.mode) == ("root", 0o755)
    content = launcher.content_string
    assert not re.search(r"^\s*set\s+-[a-z]*e", content, re.M), "the launcher must not use set -e"
    for privileged in ("sudo", "nvidia-smi", "systemctl", "chown", "modprobe"):
        assert privileged not in content, privileged
    for name in DEFAULT_PROFILES:
        for ext in ("yaml", "env"):
            f = host.file("%s/%s.%s" % (PROFILE_DIR, name, ext))
            assert f.is_file, f.path
            assert (f.user, f.mode) == ("root", 0o644), f.path
            assert f.content_string.startswith("#\n# Ansible managed"), f.path


def test_profile_files_are_vllm_configs_without_the_key(host):
    for name in DEFAULT_PROFILES:
        text = host.file("%s/%s.yaml" % (PROFILE_DIR, name)).content_string
        config = yaml.safe_load(text)
        assert isinstance(config, dict) and config.get("model"), (name, config)
        assert config["host"] == "127.0.0.1"
        assert not any(k.replace("_", "-") == "api-key" for k in config), name
        body = [line for line in text.splitlines() if not line.startswith("#")]
        assert not any("VLLM_API_KEY" in line or "api-key" in line or "api_key" in line for line in body), name
    mtp = yaml.safe_load(host.file(PROFILE_DIR + "/mtp.yaml").content_string)
    assert mtp["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 1}
    single = yaml.safe_load(host.file(PROFILE_DIR + "/single_gpu.yaml").content_string)
    assert single["tensor-parallel-size"] == 1
    assert single["max-model-len"] == 32768
    assert single["gpu-memory-utilization"] == 0.95
    assert "CUDA_VISIBLE_DEVICES=0" in host.file(PROFILE_DIR + "/single_gpu.env").content_string.splitlines()
    default = yaml.safe_load(host.file(PROFILE_DIR + "/default.yaml").content_string)
    assert default["max-num-seqs"] == 8 and default["max-num-batched-tokens"] == 8192


def test_active_profile_in_env_file(host):
    lines = [line for line in host.file(ENV_FILE).content_string.splitlines() if line.startswith("VLLM_PROFILE=")]
    assert lines == ["VLLM_PROFILE=%s" % expected_profile(host)]


def test_launcher_refuses_an_unknown_profile(host):
    result = run_launcher(host, {"VLLM_PROFILE": "bogus"})
    assert result.rc == 2, (result.rc, result.stdout, result.stderr)
    assert "vllm-start: unknown profile 'bogus'; known profiles:" in result.stderr
    listed = result.stderr.split("known profiles:", 1)[1].strip().split(", ")
    assert set(DEFAULT_PROFILES) <= set(listed), result.stderr


def test_launcher_refuses_a_path_as_profile(host):
    result = run_launcher(host, {"VLLM_PROFILE": "../profiles/default"})
    assert result.rc == 2
    assert "unknown profile '../profiles/default'" in result.stderr


def test_launcher_passes_the_active_profile_config(host, stand_in_venv):
    # No VLLM_PROFILE in the environment: the launcher reads it from the env file, as the unit does.
    record_file = stand_in_venv + "/argv.json"
    result = run_launcher(host, {"VLLM_VENV": stand_in_venv, "RECORD_ARGV_FILE": record_file})
    assert result.rc == 0, (result.stdout, result.stderr)
    record = json.loads(host.file(record_file).content_string)
    profile = expected_profile(host)
    assert record["argv"][0] == stand_in_venv + "/bin/python"
    assert record["argv"][1:] == ["-m", "vllm.entrypoints.openai.api_server",
                                  "--config", "%s/%s.yaml" % (PROFILE_DIR, profile)]
    assert record["uid"] != 0
    if profile == "single_gpu":
        assert record["env"].get("CUDA_VISIBLE_DEVICES") == "0"


@pytest.mark.parametrize("profile", DEFAULT_PROFILES)
def test_launcher_passes_the_selected_profile_config(host, stand_in_venv, profile):
    record_file = stand_in_venv + "/argv.json"
    result = run_launcher(host, {"VLLM_PROFILE": profile, "VLLM_VENV": stand_in_venv, "RECORD_ARGV_FILE": record_file},
                          args="--port 18000")
    assert result.rc == 0, (result.stdout, result.stderr)
    record = json.loads(host.file(record_file).content_string)
    assert record["config"] == "%s/%s.yaml" % (PROFILE_DIR, profile)
    assert record["argv"][-2:] == ["--port", "18000"]
    assert record["env"].get("VLLM_PROFILE") == profile
    if profile == "single_gpu":
        assert record["env"].get("CUDA_VISIBLE_DEVICES") == "0"
    else:
        assert "CUDA_VISIBLE_DEVICES" not in record["env"]


# What nvidia-smi topo -m shows on each box (the mock's default link for the RTX 3090 boxes: PHB, two
# consumer cards on the CPU's root complex, no NVLink): the TP 2 profiles of lab-tp2 get NCCL_P2P_DISABLE=1
# (vllm_service_nccl_auto); single_gpu and every profile of the one-GPU lab-single get no NCCL variable.
NCCL_REASON = "# NCCL_P2P_DISABLE (vllm_service_nccl_auto, from nvidia-smi topo -m): GPU0-GPU1 PHB (PCIe through a PCIe host bridge"


def test_nccl_settings_follow_the_gpu_links(host):
    two_gpus = host.check_output("hostname") == "lab-tp2"
    for name in DEFAULT_PROFILES:
        lines = host.file("%s/%s.env" % (PROFILE_DIR, name)).content_string.splitlines()
        nccl = [n for n, line in enumerate(lines) if line.startswith("NCCL_")]
        if two_gpus and name != "single_gpu":
            assert [lines[n] for n in nccl] == ["NCCL_P2P_DISABLE=1"], (name, lines)
            assert lines[nccl[0] - 1].startswith(NCCL_REASON), (name, lines)
            assert "hangs or crawls on consumer cards" in lines[nccl[0] - 1]
        else:
            assert nccl == [], (name, lines)
            assert not any("vllm_service_nccl_auto" in line for line in lines), (name, lines)


def test_launcher_exports_the_nccl_setting(host, stand_in_venv):
    record_file = stand_in_venv + "/argv.json"
    result = run_launcher(host, {"VLLM_PROFILE": "default", "VLLM_VENV": stand_in_venv, "RECORD_ARGV_FILE": record_file})
    assert result.rc == 0, (result.stdout, result.stderr)
    env = json.loads(host.file(record_file).content_string)["env"]
    if host.check_output("hostname") == "lab-tp2":
        assert env.get("NCCL_P2P_DISABLE") == "1"
    else:
        assert "NCCL_P2P_DISABLE" not in env and "NCCL_P2P_LEVEL" not in env


def test_running_server_has_no_key_on_its_command_line(host):
    pid = unit_properties(host, "MainPID")["MainPID"]
    if pid in ("", "0"):
        pytest.skip("the unit is not running")
    cmdline = host.check_output("tr '\\0' '\\n' < /proc/%s/cmdline" % pid).splitlines()
    assert "--config" in cmdline, (cmdline, journal(host))
    assert "%s/%s.yaml" % (PROFILE_DIR, expected_profile(host)) in cmdline
    assert not any("api-key" in arg or "api_key" in arg for arg in cmdline), cmdline
