"""Unit tests of the host invariants (plugins/module_utils/gpuhost_invariants.py) through the filters site.yml's play 1
runs (plugins/filter/gpuhost_checks.py): owned paths, the listener table, a secret's characters, the readers of /proc and dpkg.

Data-driven cases in tests/unit/data/gpuhost_invariants.yaml.
"""
from __future__ import annotations

import glob
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter.gpuhost_checks import (
    listener_errors,
    listener_vars,
    owned_path_errors,
    owned_paths,
    port_errors,
    secret_value_errors,
    unit_value_errors,
)
from ansible_collections.gpuhost.inference.plugins.filter.vllm_verify import vllm_verify_var_errors
from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import marked_options, owner_role
from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

PATHS = load_cases("gpuhost_invariants.yaml", "owned_paths")
LISTENERS = load_cases("gpuhost_invariants.yaml", "listeners")


@pytest.mark.parametrize("case", PATHS, ids=case_ids(PATHS))
def test_owned_paths(case):
    assert_errors_match(owned_path_errors(case["values"], case.get("owners")), case["expect_errors"])


@pytest.mark.parametrize("case", LISTENERS, ids=case_ids(LISTENERS))
def test_listeners(case):
    assert_errors_match(listener_errors(case["values"], case["roles"], case.get("live")), case["expect_errors"])


@pytest.mark.parametrize("case", load_cases("gpuhost_invariants.yaml", "proc_net"), ids=lambda c: c["id"])
def test_proc_net_tcp(case):
    assert inv.parse_proc_net_tcp(case["text"], case["family"]) == case["expect"]


@pytest.mark.parametrize("case", load_cases("gpuhost_invariants.yaml", "dpkg"), ids=lambda c: c["id"])
def test_dpkg_search(case):
    assert inv.parse_dpkg_search(case["text"]) == case["expect"]


@pytest.mark.parametrize("case", load_cases("gpuhost_invariants.yaml", "cgroup"), ids=lambda c: c["id"])
def test_unit_of_cgroup(case):
    assert inv.unit_of_cgroup(case["text"]) == case["expect"]


class _AnsibleLazyTemplateList(list):
    """What ansible-core 2.19 hands a filter for a list variable (a subclass of list)."""


def test_a_path_of_another_type_is_named_by_its_yaml_type():
    """Not by the class ansible-core gives it (seen on the demo box: 'got a _AnsibleLazyTemplateList'); a secret's
    redaction names the same type."""
    errors = owned_path_errors({"fleet_prometheus_grafana_dir": _AnsibleLazyTemplateList(["/srv/grafana"])})
    assert errors == ["fleet_prometheus_grafana_dir must be %s, got a list" % inv.PATH_FORM]
    assert inv.redacted(_AnsibleLazyTemplateList(["k"])) == "a list of 1 items (a secret: not shown)"
    assert inv.type_name(_AnsibleLazyTemplateList()) == "list"


def test_every_owned_path_default_passes_the_rule():
    """The roles' own literal defaults keep the rule (a default that broke it would refuse every host)."""
    marked = marked_options("owned_path")
    literal = {name: spec["default"] for name, spec in marked.items()
               if isinstance(spec.get("default"), str) and "{" not in spec["default"]}
    assert literal, marked
    assert owned_path_errors(literal) == []


def public_roles():
    return [r for r in os.listdir(os.path.join(ROOT, "roles")) if not r.startswith("_")]


def test_every_role_declares_its_owned_paths():
    """Every public role creates a directory or file from a variable (fleet_prometheus: its Grafana directory; the
    rest of Prometheus's are its package's) and marks it `type: path`."""
    roles = public_roles()
    owners = {owner_role(name, roles) for name in marked_options("owned_path")}
    assert set(roles) - owners == set()


def test_the_roles_preflights_apply_the_same_rule():
    """unit_value_errors('path'), which the roles' own preflights run, applies the system rule to owned paths and the
    form alone to paths the role only reads."""
    assert unit_value_errors({"front_door_config_dir": "/etc"}, "path") == owned_path_errors({"front_door_config_dir": "/etc"})
    assert unit_value_errors({"vllm_install_python": "/usr/bin/python3"}, "path") == []


def test_owned_paths_are_normalised_unique_and_plain():
    values = {"vllm_install_base_dir": "/opt/vllm/", "vllm_router_base_dir": "/opt//vllm", "vllm_service_state_dir": "/x y",
              "vllm_install_python": "/usr/bin/python3"}
    assert owned_paths(values) == ["/opt/vllm"]


def test_listener_vars_name_what_the_table_reads():
    names = listener_vars(["vllm_service", "front_door"])
    assert names == ["vllm_service_host", "vllm_service_port", "vllm_service_unit_name", "front_door_listen_host",
                     "front_door_port", "front_door_enabled"]


def test_every_listener_variable_is_a_role_option():
    """The table names real variables: each is in its role's argument spec (a rename breaks this test, not a host)."""
    from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import option_spec

    roles = sorted({entry[0] for entry in inv.LISTENERS})
    missing = [name for name in listener_vars(roles) if option_spec(name) is None]
    assert not missing


def test_every_owned_path_goes_through_the_rule_in_its_roles_preflight():
    """A role run on its own (outside site.yml) applies the same rule: each owned path is handed to
    unit_value_errors('path') in the role's preflight, or (vllm_verify) to its variables' filter, which takes the
    role's owned paths from the spec."""
    missing = []
    for name in sorted(marked_options("owned_path")):
        role = owner_role(name, public_roles())
        text = "".join(open(p, encoding="utf-8").read()
                       for p in glob.glob(os.path.join(ROOT, "roles", role, "tasks", "preflight*.yml")))
        if role == "vllm_verify":
            base = load_cases("vllm_verify_cases.yaml", "var_errors_base")
            if not any("%s=/etc" % name in e for e in vllm_verify_var_errors(dict(base, **{name: "/etc"}))):
                missing.append(name)
        elif "'%s':" % name not in text:
            missing.append(name)
    assert not missing


SECRETS = load_cases("gpuhost_invariants.yaml", "secrets")


@pytest.mark.parametrize("case", SECRETS, ids=case_ids(SECRETS))
def test_secret_characters(case):
    """The one rule for a key's characters, by where it lands; the message names the label, never the value."""
    errors = secret_value_errors(case["values"], case.get("form", "header"))
    assert_errors_match(errors, case["expect_errors"])
    shown = [value for value in case["values"].values() if isinstance(value, str) and len(value) > 3]
    assert not [e for e in errors for value in shown if value in e]


def test_secret_form_must_be_known():
    with pytest.raises(AnsibleFilterError, match="form must be one of header, nginx, client"):
        secret_value_errors({"x": "y"}, "env")


PORTS = load_cases("gpuhost_invariants.yaml", "ports")


@pytest.mark.parametrize("case", PORTS, ids=case_ids(PORTS))
def test_ports(case):
    """The one port rule, as every role's check calls it."""
    assert_errors_match(port_errors(case["values"], case.get("low", 1)), case["expect_errors"])


@pytest.mark.parametrize("text,expected", [("abc", None), ("a\nb", (1, "LF (\\n)")), ("a\r\nb", (1, "CR (\\r)")),
                                           ("x\u2028", (1, "U+2028 (LINE SEPARATOR)")), ("\x00", (0, "NUL (\\0)")),
                                           ("tab\tok", None)])
def test_line_end(text, expected):
    """The one single-line rule: the first character that ends a line, named."""
    assert inv.line_end(text) == expected


@pytest.mark.parametrize("name,types,template,expected", [
    ("vllm.service", ("service",), False, True), ("vllm@gpu0.service", ("service",), False, True),
    ("vllm@.service", ("service",), False, False), ("vllm@.service", ("service",), True, True),
    ("vllm.timer", ("service",), True, False), ("-vllm.service", inv.UNIT_TYPES, True, False),
    ("a\\x2d.service", inv.UNIT_TYPES, True, False), ("x" * 248 + ".service", inv.UNIT_TYPES, True, False),
    (None, inv.UNIT_TYPES, True, False)])
def test_unit_name(name, types, template, expected):
    """The one unit-name rule (unit_value_errors, vllm_verify's unit and the listener table call it)."""
    assert inv.is_unit(name, types, template) is expected


@pytest.mark.parametrize("value,expected", [("/opt/vllm", True), ("/", False), ("/opt/../etc", False), ("/opt/a b", False),
                                            ("opt/vllm", False), ("/opt/%i", False), (None, False), ("/opt/..x", True)])
def test_plain_path(value, expected):
    """The one path form (owned paths, unit_value_errors('path'), the router's wheelhouse)."""
    assert inv.is_plain_path(value) is expected
