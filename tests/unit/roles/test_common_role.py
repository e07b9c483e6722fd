"""roles/_common, the collection's internal role: its shared hardening fragment (templates/hardening.conf.j2, cases in
data/common_role_cases.yaml) and the units that render it, its guard (every task file refuses to run unless a role
of the collection includes it), and its callers (each include passes exactly its entry point's options).
"""
from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases, tasks_of

ROLE = os.path.join(ROOT, "roles", "_common")
HARDENING = load_cases("common_role_cases.yaml", "hardening")
UNITS = load_cases("common_role_cases.yaml", "units")
CALLERS = load_cases("common_role_cases.yaml", "callers")
SPECS = yaml.safe_load(open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8"))["argument_specs"]
FRAGMENT = os.path.join(ROLE, "templates", "hardening.conf.j2")
CALL = re.compile(r"\{\{ lookup\('ansible\.builtin\.template', role_path \| dirname ~ '/_common/templates/hardening\.conf\.j2',"
                  r"\s*template_vars=\{'_common_hardening': (\{.*?\})\}\) -?\}\}", re.S)


def render_fragment(params):
    with open(FRAGMENT, encoding="utf-8") as fh:
        source = fh.read()
    templar = Templar(loader=DataLoader(), variables={"_common_hardening": params})
    return templar.template(trust_as_template(source))


def load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.mark.parametrize("case", HARDENING, ids=case_ids(HARDENING))
def test_hardening_fragment(case):
    text = render_fragment(case["params"])
    assert text.splitlines() == case["lines"]
    assert text.endswith("\n")


@pytest.mark.parametrize("unit", UNITS, ids=[u["template"] for u in UNITS])
def test_units_share_the_fragment(unit):
    with open(os.path.join(ROOT, "roles", unit["role"], "templates", unit["template"]), encoding="utf-8") as fh:
        source = fh.read()
    calls = CALL.findall(source)
    assert len(calls) == 1, "the unit renders the shared hardening fragment once"
    # The unit's own differences, evaluated (vllm.service's writable paths are the case's).
    params = Templar(loader=DataLoader(), variables={"_vllm_service_rw_paths": ["/var/lib/vllm", "/srv/models"]}).template(
        trust_as_template("{{ " + calls[0] + " }}"))
    case = next(c for c in HARDENING if c["id"] == unit["case"])
    assert params == case["params"]
    # No hardening directive of the fragment written beside it (writable paths may be: the watchdog's textfile dir).
    own = {line.split("=", 1)[0] for line in source.splitlines() if "=" in line and not line.startswith(("#", " ", "{"))}
    shared = {line.split("=", 1)[0] for c in HARDENING for line in c["lines"]} - {"ReadWritePaths"}
    assert not own & shared, own & shared


def test_main_refuses_and_every_task_file_checks_its_caller():
    main = load("roles", "_common", "tasks", "main.yml")
    assert [next(k for k in t if k.startswith("ansible.builtin.")) for t in main] == ["ansible.builtin.fail"]
    entry_points = set(SPECS) - {"main"}
    # Not entry points: the guard, and the pieces venv.yml includes (the build, uv's bootstrap).
    files = {f[:-4] for f in os.listdir(os.path.join(ROLE, "tasks")) if f.endswith(".yml")} - {"main", "guard", "uv", "venv_build"}
    assert files == entry_points, "one entry point in meta/argument_specs.yml per task file"
    for name in sorted(files):
        first = load("roles", "_common", "tasks", name + ".yml")[0]
        assert first.get("ansible.builtin.import_tasks") == "guard.yml", name
    guard = load("roles", "_common", "tasks", "guard.yml")[0]
    assert "ansible_parent_role_names" in guard["ansible.builtin.assert"]["that"]
    assert guard["tags"] == ["always"]


def test_entry_points_are_typed_and_prefixed():
    for entry, spec in SPECS.items():
        for name, option in (spec.get("options") or {}).items():
            assert name.startswith("_common_"), (entry, name)
            assert option.get("type") and option.get("description") and option.get("required") is True, (entry, name)


def _includes(tasks):
    for task in tasks_of(tasks):
        role = task.get("ansible.builtin.include_role") or {}
        if role.get("name") == "gpuhost.inference._common":
            yield role["tasks_from"][:-4], task.get("vars") or {}, role.get("apply", {}).get("tags")
        path = task.get("ansible.builtin.include_tasks") or ""
        if "/_common/tasks/" in path:
            yield os.path.basename(path)[:-4], task.get("vars") or {}, None


@pytest.mark.parametrize("caller", CALLERS, ids=[c["role"] + "/" + c["file"] for c in CALLERS])
def test_callers_pass_exactly_the_entry_points_options(caller):
    found = list(_includes(load("roles", caller["role"], caller["file"])))
    assert [found_entry[0] for found_entry in found] == caller["entry_points"]
    for entry, variables, tags in found:
        assert set(variables) == set(SPECS[entry].get("options") or {}), entry
        if tags is not None:
            # The role's tags select the included tasks (an include_role's own tags do not reach them).
            assert caller["role"] in tags, entry


def test_no_copy_left_in_the_callers():
    for role in ("vllm_install", "vllm_router"):
        assert not os.path.exists(os.path.join(ROOT, "roles", role, "tasks", "uv.yml"))
        private = load("roles", role, "vars", "main.yml")
        assert not [name for name in private if name.endswith(("_read_script", "_relocate_script"))]
