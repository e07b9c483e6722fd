"""site.yml's play 1, the host invariants (playbooks/tasks/site_invariants.yml, issue 42): the check task rendered by
Ansible's own templar as the play renders it, with what the module gpuhost_host_claims would read on the target, and
the bad-input matrix's cases of that step (molecule default, faults) getting the messages they look for."""
from __future__ import annotations

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

# What gpuhost_host_claims reads on the converged lab-faults box: vLLM and node exporter on their ports, dpkg's /etc/dpkg,
# and the matrix's foreign listener.
CLAIMS = {
    "listeners": [
        {"address": "127.0.0.1", "family": 4, "port": 8000, "wildcard": False, "pid": 10, "process": "vllm", "unit": "vllm.service"},
        {"address": "127.0.0.1", "family": 4, "port": 9100, "wildcard": False, "pid": 11, "process": "prometheus-node",
         "unit": "prometheus-node-exporter.service"},
        {"address": "127.0.0.1", "family": 4, "port": 18123, "wildcard": False, "pid": 12, "process": "python3",
         "unit": "gpuhost-foreign-listener.service"},
    ],
    "path_owners": {"/etc/dpkg": ["dpkg"]},
}
GPU_ROLES = ["nvidia_power", "vllm_install", "vllm_service", "vllm_verify", "front_door", "node_metrics"]


def check_task():
    with open(os.path.join(ROOT, "playbooks", "tasks", "site_invariants.yml"), encoding="utf-8") as fh:
        tasks = yaml.safe_load(fh)
    return next(t for t in tasks if t["name"] == "Check the owned paths and the listeners of this host's roles")


def render(bad, roles=None):
    task = check_task()
    variables = dict(trusted(task["vars"]), __site_host_roles=roles or GPU_ROLES, __site_claims=CLAIMS, **bad)
    return list(Templar(loader=DataLoader(), variables=variables).template(variables["__site_invariant_errors"]))


def test_the_play_runs_it_before_the_roles_checks():
    with open(os.path.join(ROOT, "playbooks", "site.yml"), encoding="utf-8") as fh:
        tasks = yaml.safe_load(fh)[0]["tasks"]
    imports = [t.get("ansible.builtin.import_tasks") for t in tasks]
    assert imports.index("tasks/site_invariants.yml") < imports.index("tasks/site_preflight.yml")
    assert check_task()["ansible.builtin.assert"]["fail_msg"].startswith("site.yml: bad input (nothing was changed on the host): ")


def test_the_defaults_pass():
    assert render({}) == []


@pytest.mark.parametrize("name", [n for n in matrix_cases() if n.startswith(("owned_", "listen_"))])
def test_matrix_case_gets_the_message_it_looks_for(name):
    bad, expected = matrix_cases()[name]
    # A case of fleet_prometheus is a host of `monitoring` too (the matrix's inventory).
    errors = render(bad, GPU_ROLES + (["fleet_prometheus"] if any(k.startswith("fleet_prometheus_") for k in bad) else []))
    assert errors, "matrix case %s passes the invariants" % name
    missing = [s for s in expected if not any(s in e for e in errors)]
    assert not missing, "matrix case %s looks for %r, the messages are %r" % (name, missing, errors)


def test_monitoring_host_listeners_from_defaults():
    """Prometheus on vLLM's port, each taken from the role's defaults where unset (the issue's example)."""
    assert_errors_match(render({"fleet_prometheus_port": 8000}, GPU_ROLES + ["fleet_prometheus"]),
                        [["fleet_prometheus_port=8000", "vllm_service_port=8000", "two of the collection's listeners"]])


def test_a_foreign_process_on_prometheus_port():
    assert_errors_match(render({"fleet_prometheus_port": 18123}, GPU_ROLES + ["fleet_prometheus"]),
                        [["fleet_prometheus_port=18123", "already taken on this host by python3", "pid 12",
                          "unit gpuhost-foreign-listener.service"]])
