"""Every role's defaults/main.yml and meta/argument_specs.yml describe the same variables.

Parametrized over the roles found under roles/ at run time, so a new role is covered as soon as
it lands. For each role: the key sets match in both directions, every option has a type and a
description, every variable carries the role prefix, and a default written in the spec equals
the one in defaults/main.yml (unless that one is a template, such as a cross-role default).
"""
from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT
ROLES_DIR = os.path.join(ROOT, "roles")


def find_roles(roles_dir=ROLES_DIR):
    if not os.path.isdir(roles_dir):
        return []
    return sorted(
        name for name in os.listdir(roles_dir)
        if os.path.isdir(os.path.join(roles_dir, name)) and not name.startswith(".")
    )


def load_yaml(path):
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def templated(value):
    """True when a default is (or holds) a Jinja template: the spec may show its usual result."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(templated(k) or templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(templated(v) for v in value)
    return False


def spec_problems(role_dir, role):
    """Return a list of human-readable problems for one role directory (empty: consistent)."""
    problems = []
    defaults_path = os.path.join(role_dir, "defaults", "main.yml")
    spec_path = os.path.join(role_dir, "meta", "argument_specs.yml")
    if not os.path.isfile(spec_path):
        return ["%s: meta/argument_specs.yml is missing" % role]
    defaults = {}
    if os.path.isfile(defaults_path):
        defaults = load_yaml(defaults_path) or {}
        if not isinstance(defaults, dict):
            return ["%s: defaults/main.yml is not a mapping" % role]
    spec = load_yaml(spec_path) or {}
    main = (spec.get("argument_specs") or {}).get("main")
    if not isinstance(main, dict):
        return ["%s: meta/argument_specs.yml has no argument_specs.main" % role]
    options = main.get("options") or {}

    for name in sorted(set(defaults) - set(options)):
        problems.append("%s: %s is in defaults/main.yml but not in meta/argument_specs.yml" % (role, name))
    for name in sorted(set(options) - set(defaults)):
        if not (options[name] or {}).get("required"):
            problems.append("%s: %s is in meta/argument_specs.yml but not in defaults/main.yml" % (role, name))
    for name, opt in sorted(options.items()):
        opt = opt or {}
        if not opt.get("type"):
            problems.append("%s: option %s has no type" % (role, name))
        desc = opt.get("description")
        if not desc or (isinstance(desc, list) and not any(str(d).strip() for d in desc)):
            problems.append("%s: option %s has no description" % (role, name))
        if not name.startswith(role + "_"):
            problems.append("%s: option %s lacks the role prefix %s_" % (role, name, role))
        if ("default" in opt and name in defaults and not templated(defaults[name])
                and opt["default"] != defaults[name]):
            problems.append("%s: option %s: spec default %r differs from defaults/main.yml %r"
                            % (role, name, opt["default"], defaults[name]))
    return problems


def test_roles_are_found():
    roles = find_roles()
    assert "nvidia_power" in roles, "no roles found under %s (found: %s)" % (ROLES_DIR, roles)


@pytest.mark.parametrize("role", find_roles())
def test_defaults_match_argument_specs(role):
    problems = spec_problems(os.path.join(ROLES_DIR, role), role)
    assert problems == [], "\n".join(problems)


def _write_role(tmp_path, defaults, options):
    role_dir = tmp_path / "demo"
    (role_dir / "defaults").mkdir(parents=True)
    (role_dir / "meta").mkdir()
    (role_dir / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults), encoding="utf-8")
    spec = {"argument_specs": {"main": {"short_description": "demo", "options": options}}}
    (role_dir / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return str(role_dir)


SELF_TEST_CASES = [
    pytest.param({"demo_a": 1}, {"demo_a": {"type": "int", "description": "A.", "default": 1}}, [], id="consistent"),
    pytest.param({"demo_a": 1, "demo_b": 2}, {"demo_a": {"type": "int", "description": "A."}},
                 ["demo: demo_b is in defaults/main.yml but not in meta/argument_specs.yml"], id="missing-in-spec"),
    pytest.param({}, {"demo_a": {"type": "int", "description": "A."}},
                 ["demo: demo_a is in meta/argument_specs.yml but not in defaults/main.yml"], id="missing-in-defaults"),
    pytest.param({}, {"demo_a": {"type": "int", "description": "A.", "required": True}}, [], id="required-needs-no-default"),
    pytest.param({"demo_a": 1}, {"demo_a": {"description": "A."}}, ["demo: option demo_a has no type"], id="no-type"),
    pytest.param({"demo_a": 1}, {"demo_a": {"type": "int"}}, ["demo: option demo_a has no description"], id="no-description"),
    pytest.param({"a": 1}, {"a": {"type": "int", "description": "A."}}, ["demo: option a lacks the role prefix demo_"], id="no-prefix"),
    pytest.param({"demo_a": 1}, {"demo_a": {"type": "int", "description": "A.", "default": 2}},
                 ["demo: option demo_a: spec default 2 differs from defaults/main.yml 1"], id="default-differs"),
    pytest.param({"demo_a": ["{{ other_unit | default('x.service') }}"]},
                 {"demo_a": {"type": "list", "elements": "str", "description": "A.", "default": ["x.service"]}},
                 [], id="templated-default-may-differ"),
]


@pytest.mark.parametrize("defaults, options, expected", SELF_TEST_CASES)
def test_checker_finds_problems(tmp_path, defaults, options, expected):
    assert spec_problems(_write_role(tmp_path, defaults, options), "demo") == expected


def test_checker_requires_a_spec_file(tmp_path):
    (tmp_path / "demo" / "defaults").mkdir(parents=True)
    assert spec_problems(str(tmp_path / "demo"), "demo") == ["demo: meta/argument_specs.yml is missing"]
