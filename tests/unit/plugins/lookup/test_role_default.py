"""Unit tests of the role_default lookup (plugins/lookup/role_default.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.plugins.lookup import role_default
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT

CASES = [
    # (variable, play variables, expected)
    ("vllm_service_env_file", {}, "/etc/default/vllm"),
    ("vllm_service_port", {}, 8000),
    ("vllm_service_profile_dir", {}, "/etc/vllm/profiles"),
    ("vllm_service_profile_dir", {"vllm_service_config_dir": "/srv/etc"}, "/srv/etc/profiles"),
    ("vllm_service_state_dir", {}, "/var/lib/vllm"),
    ("vllm_verify_state_dir", {}, "/var/lib/vllm/verify"),
    ("vllm_verify_state_dir", {"vllm_install_state_dir": "/data/vllm"}, "/data/vllm/verify"),
    ("vllm_verify_state_dir", {"vllm_service_state_dir": "/x"}, "/x/verify"),
    ("vllm_verify_base_url", {}, "http://127.0.0.1:8000"),
    ("vllm_verify_base_url", {"vllm_service_host": "0.0.0.0", "vllm_service_port": 9000}, "http://127.0.0.1:9000"),
    ("nvidia_power_nvidia_smi_path", {}, "/usr/bin/nvidia-smi"),
]


def _lookup(variables):
    module = role_default.LookupModule(loader=DataLoader(), templar=Templar(loader=DataLoader(), variables=variables))
    return module


def _adhoc(name, variables):
    """The lookup as a play sees it: a default that is a template may call this lookup again, which needs
    Ansible's plugin loader to find the collection (the directory this checkout is imported from)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(ROOT))),
               ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal")
    # The CLI's own entry function rather than `python -m ansible adhoc`: under `ansible-test units`
    # ansible-core is imported from ansible-test's tree, which has no entry-point metadata.
    proc = subprocess.run(  # from a directory without an ansible.cfg
        [sys.executable, "-c", "import sys; from ansible.cli.adhoc import main; main(['ansible'] + sys.argv[1:])",
         "localhost", "-i", "localhost,", "-c", "local",
         "-m", "ansible.builtin.debug", "-a", f"msg={{{{ lookup('gpuhost.inference.role_default', '{name}') }}}}",
         "-e", json.dumps(variables)], capture_output=True, text=True, env=env, check=False, timeout=120, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # minimal: `localhost | SUCCESS => {...}`
    return json.loads(proc.stdout.split("=>", 1)[1])["msg"]


@pytest.mark.parametrize("name,variables,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_owner_roles_default(name, variables, expected):
    if "role_default" in str(role_default.read_defaults(name)[name]):
        assert _adhoc(name, variables) == str(expected)
    else:
        assert _lookup(variables).run([name], variables=variables) == [expected]


def test_every_literal_equals_the_owner_defaults_file():
    with open(f"{ROOT}/roles/vllm_service/defaults/main.yml", encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    assert role_default.read_defaults("vllm_service_env_file")["vllm_service_env_file"] == defaults["vllm_service_env_file"]


@pytest.mark.parametrize("name,message", [
    ("bogus_var", "not a variable of a gpuhost.inference role"),
    ("vllm_service_no_such_var", "vllm_service has no default for 'vllm_service_no_such_var'"),
])
def test_unknown_variables_are_refused(name, message):
    with pytest.raises(AnsibleLookupError, match=message):
        _lookup({}).run([name], variables={})


def test_the_longest_role_prefix_owns_the_variable():
    assert role_default.owner_role("vllm_service_x", ["vllm", "vllm_service"]) == "vllm_service"
