"""Unit tests of the vllm_router filters (plugins/filter/vllm_router.py).

Data-driven: the cases are in tests/unit/data/vllm_router_cases.yaml. The last tests tie the filter's tables of
flags to the flags of vllm-router 0.1.17 (roles/vllm_router/files/vllm-router-0.1.17-flags.txt).
"""
from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter import vllm_router

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

WORKERS = load_cases("vllm_router_cases.yaml", "workers")
API_KEY = load_cases("vllm_router_cases.yaml", "api_key")
VAR_ERRORS = load_cases("vllm_router_cases.yaml", "var_errors")
ARGV = load_cases("vllm_router_cases.yaml", "argv")
DRAIN = load_cases("vllm_router_cases.yaml", "drain")
FLAGS_FILE = os.path.join(ROOT, "roles", "vllm_router", "files", "vllm-router-0.1.17-flags.txt")


def flags():
    """The words of the flags file, as the role's vars/main.yml reads it (lookup file | split)."""
    with open(FLAGS_FILE, encoding="utf-8") as fh:
        return fh.read().split()


@pytest.mark.parametrize("case", WORKERS, ids=case_ids(WORKERS))
def test_workers(case):
    got = vllm_router.vllm_router_workers(case["names"], case["hostvars"], case["router"], case.get("explicit"))
    assert_errors_match(got["errors"], case["expect_errors"])
    expect = case["expect"]
    if expect is not None:
        assert got["urls"] == expect["urls"]
        assert got["no_key"] == expect["no_key"]
        assert [k["host"] for k in got["api_keys"]] == expect["key_hosts"]
        assert [[f["host"], f["path"]] for f in got["api_key_files"]] == expect["key_files"]


def test_workers_read_hostvars_lazily_like_ansible():
    """Ansible's HostVarsVars raises KeyError for a variable the host does not have: the defaults apply."""

    class Lazy(dict):
        def __getitem__(self, key):
            if key == "vllm_service_api_key":
                raise KeyError(key)
            return dict.__getitem__(self, key)

    got = vllm_router.vllm_router_workers(["rig-a"], {"rig-a": Lazy(ansible_host="10.0.0.11", vllm_service_host="0.0.0.0")},
                                          "gateway", [], "gpu_servers", "127.0.0.1", 8123)
    assert got["urls"] == ["http://10.0.0.11:8123"]
    assert got["no_key"] == ["rig-a"]


@pytest.mark.parametrize("case", DRAIN, ids=case_ids(DRAIN))
def test_drain_targets(case):
    got = vllm_router.vllm_router_drain_targets(case["box"], case["routers"], case["hostvars"], case["groups"])
    assert got == case["expect"]


def test_drain_targets_bad_input():
    with pytest.raises(AnsibleFilterError, match="routers must be a list of host names"):
        vllm_router.vllm_router_drain_targets("rig-a", "gateway", {}, {})


def test_workers_bad_input():
    with pytest.raises(AnsibleFilterError, match="a list of host names"):
        vllm_router.vllm_router_workers("rig-a", {}, "gateway")
    assert vllm_router.vllm_router_workers(None, None, "gateway")["errors"][0].startswith("no worker to route to")
    assert "must be a list of worker URLs" in vllm_router.vllm_router_workers([], {}, "gateway", "http://x:1")["errors"][0]


def _workers(abbreviated):
    return {"api_keys": [{"host": h, "key": k} for h, k in abbreviated["api_keys"]],
            "api_key_files": [{"host": h, "path": p} for h, p in abbreviated["api_key_files"]],
            "no_key": abbreviated["no_key"], "urls": [], "errors": []}


@pytest.mark.parametrize("case", API_KEY, ids=case_ids(API_KEY))
def test_api_key(case):
    got = vllm_router.vllm_router_api_key(_workers(case["workers"]), case.get("file_keys", {}), case.get("router_key", ""))
    assert_errors_match(got["errors"], case["expect_errors"])
    assert {"key": got["key"], "workers_have_key": got["workers_have_key"]} == case["expect"]
    keys = {k for _host, k in case["workers"]["api_keys"]} | {k.strip() for k in case.get("file_keys", {}).values()} | {case.get("router_key", "")}
    for error in got["errors"]:
        assert not any(k and k in error.split() for k in keys), "a key in the message: %s" % error


def test_api_key_bad_input():
    with pytest.raises(AnsibleFilterError, match="vllm_router_workers' answer"):
        vllm_router.vllm_router_api_key(["x"])
    with pytest.raises(AnsibleFilterError, match="file_keys must be a mapping"):
        vllm_router.vllm_router_api_key(_workers({"api_keys": [], "api_key_files": [["a", "p"]], "no_key": []}), ["k"])


@pytest.mark.parametrize("case", VAR_ERRORS["cases"], ids=case_ids(VAR_ERRORS["cases"]))
def test_var_errors(case):
    values = dict(VAR_ERRORS["base"], flags=flags(), **case["values"])
    assert_errors_match(vllm_router.vllm_router_var_errors(values), case["expect_errors"])


def test_var_errors_checks_only_what_it_is_given():
    assert vllm_router.vllm_router_var_errors({}) == []
    assert vllm_router.vllm_router_var_errors({"vllm_router_port": 80})[0].startswith("vllm_router_port must be a port")
    with pytest.raises(TypeError, match="must be a mapping"):
        vllm_router.vllm_router_var_errors(["vllm_router_port"])


@pytest.mark.parametrize("case", ARGV, ids=case_ids(ARGV))
def test_argv(case):
    assert vllm_router.vllm_router_argv(case["settings"]) == case["expect"]


def test_argv_refuses_a_mapping_value():
    with pytest.raises(AnsibleFilterError, match="--selector must be a value or a list of values"):
        vllm_router.vllm_router_argv({"selector": {"app": "x"}})
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        vllm_router.vllm_router_argv([["--host", "x"]])


def test_owned_and_refused_flags_are_flags_of_the_router():
    known = {f[2:] for f in flags() if f.startswith("--")}
    assert not set(vllm_router.OWNED_FLAGS) - known
    assert not set(vllm_router.NOT_HERE) - known


def test_every_owned_flag_but_the_key_and_the_workers_is_in_the_role_settings():
    """The role's _vllm_router_settings set every flag the filter says the role owns (the key goes through the env)."""
    import yaml

    with open(os.path.join(ROOT, "roles", "vllm_router", "vars", "main.yml"), encoding="utf-8") as fh:
        settings = yaml.safe_load(fh)["_vllm_router_settings"]
    written = {flag.replace("_", "-") for flag in vllm_router.OWNED_FLAGS if "'%s'" % flag.replace("-", "_") in settings}
    assert set(vllm_router.OWNED_FLAGS) - written == {"api-key"}


def test_filters_registered():
    assert set(vllm_router.FilterModule().filters()) == {"vllm_router_var_errors", "vllm_router_workers",
                                                         "vllm_router_api_key", "vllm_router_argv",
                                                         "vllm_router_drain_targets"}
