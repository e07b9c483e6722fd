"""The one role list (issue 30): playbooks/vars/roles.yml names each public role of the collection and the inventory
group whose hosts run it; site.yml's first play is driven by it. These tests fail when a role under roles/ (not an
internal `_`-prefixed one) is missing from the list or from site.yml, when the first play hand-types a role name
again, or when a preflight stops taking its variables by name prefix. README.md's and docs/CONTRACTS.md's role
tables and the plays listed in docs/fleet.md and CONTRACTS.md are generated from the list and site.yml by
scripts/gen-role-docs.py (tests/unit/roles/test_readme_vars.py runs its --check). The cases of the rendering are in
data/site_preflight_cases.yaml (`role_list`), each over a role list of its own."""
from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases, tasks_of
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

LIST_FILE = os.path.join("playbooks", "vars", "roles.yml")
CASES = load_cases("site_preflight_cases.yaml", "role_list")


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def role_list():
    return yaml.safe_load(read(LIST_FILE))["gpuhost_roles"]


def public_roles():
    """The roles under roles/ but the internal ones (`_common`: run only inside the roles that include it)."""
    return sorted(d for d in os.listdir(os.path.join(ROOT, "roles"))
                  if os.path.isdir(os.path.join(ROOT, "roles", d)) and not d.startswith("_"))


def site_plays():
    return yaml.safe_load(read("playbooks", "site.yml"))


def listed():
    return [entry["role"] for entry in role_list()]


def test_the_list_names_every_public_role_once():
    names = listed()
    assert len(names) == len(set(names)), "a role is listed twice in %s: %s" % (LIST_FILE, names)
    assert sorted(names) == public_roles(), (
        "%s must list every role under roles/ but the internal `_` ones: missing %s, not a role %s"
        % (LIST_FILE, sorted(set(public_roles()) - set(names)), sorted(set(names) - set(public_roles()))))


def test_every_entry_has_a_role_a_group_its_docs_and_known_keys():
    for entry in role_list():
        assert set(entry) <= {"role", "group", "stops_the_run", "does", "owns"}, entry
        assert all(isinstance(entry.get(key), str) and entry[key].strip() for key in ("does", "owns")), (
            "%s: `does` and `owns` (README.md's and docs/CONTRACTS.md's tables are generated from them)" % entry["role"])
        assert re.fullmatch(r"[a-z][a-z0-9_]*", entry["role"]), entry
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", entry["group"]), entry
        assert isinstance(entry.get("stops_the_run", False), bool), entry


@pytest.mark.parametrize("role", public_roles())
def test_every_role_has_argument_specs_and_a_read_only_preflight(role):
    for part in (("meta", "argument_specs.yml"), ("tasks", "preflight.yml")):
        assert os.path.isfile(os.path.join(ROOT, "roles", role, *part)), "roles/%s/%s is missing" % (role, "/".join(part))


@pytest.mark.parametrize("role", public_roles())
def test_every_role_runs_in_a_play_of_its_group(role):
    """A play after the preflight runs the role on the hosts of the group the list gives it."""
    group = next(e["group"] for e in role_list() if e["role"] == role)
    plays = [p for p in site_plays()[1:]
             if any((r["role"] if isinstance(r, dict) else r) == "gpuhost.inference." + role for r in p.get("roles", []))]
    assert plays, "no play of playbooks/site.yml runs gpuhost.inference.%s" % role
    assert all(p["hosts"] == group for p in plays), "gpuhost.inference.%s runs on %s, the list says %s" % (
        role, [p["hosts"] for p in plays], group)


def test_contracts_names_the_list_file():
    assert LIST_FILE in read("docs", "CONTRACTS.md")


def test_the_first_play_hand_types_no_role():
    """Play 1 and its task file take every role name from the list (its pattern too): none is typed there."""
    play = site_plays()[0]
    assert "vars/roles.yml" in play["vars_files"]
    text = yaml.safe_dump(play) + read("playbooks", "tasks", "site_preflight.yml")
    typed = [role for role in public_roles() if re.search(r"\b%s\b" % role, re.sub(r"\w+_preflight_only", "", text))]
    assert typed == [], "site.yml's first play names %s by hand: take them from %s" % (typed, LIST_FILE)


@pytest.mark.parametrize("role", public_roles())
def test_every_preflight_takes_its_variables_by_prefix(role):
    text = read("roles", role, "tasks", "preflight.yml")
    assert "query('ansible.builtin.varnames', '^%s_')" % role in text, \
        "roles/%s/tasks/preflight.yml must take its variables by name prefix (varnames '^%s_')" % (role, role)
    assert "gpuhost.inference.line_errors" in text, "roles/%s/tasks/preflight.yml must check that its strings are single lines" % role


@pytest.mark.parametrize("role", public_roles())
def test_every_refusal_of_bad_input_reads_alike(role):
    """An operator greps one shape: `<role>: bad input (nothing was changed on the host): <what and the allowed values>`."""
    prefix = "%s: bad input (nothing was changed on the host): " % role
    msgs = [t["ansible.builtin.assert"]["fail_msg"] for t in tasks_of(yaml.safe_load(read("roles", role, "tasks", "preflight.yml")))
            if "bad input" in str(t.get("ansible.builtin.assert", {}).get("fail_msg", ""))]
    assert msgs, "roles/%s/tasks/preflight.yml refuses no bad input with an assert" % role
    assert [m for m in msgs if not m.startswith(prefix)] == []


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_the_first_play_renders_from_the_list(case):
    """The play's hosts, the host's roles and the roles whose refusal stops the run, rendered by Ansible's templar
    from the play's own expressions over the case's role list."""
    play = site_plays()[0]
    variables = dict(trusted(play["vars"]), gpuhost_roles=case["gpuhost_roles"], group_names=case["group_names"])
    templar = Templar(loader=DataLoader(), variables=variables)
    preflight = {t["name"]: t for t in play["tasks"]}
    host_roles = {
        "stop_the_host": templar.template(trusted(preflight["Check the inputs of the roles whose refusal stops the host"]["vars"]["__site_roles"])),
        "stop_the_run": templar.template(trusted(preflight["Check the inputs of the roles whose refusal stops the run"]["vars"]["__site_roles"])),
    }
    assert templar.template(trusted(play["hosts"])) == case["expect"]["hosts"]
    assert host_roles == case["expect"]["roles"]


def test_development_md_has_the_checklist():
    """docs/development.md "Adding a role" names the role list, the prefix preflight and this test."""
    section = read("docs", "development.md").split("## Adding a role", 1)[1].split("\n## ", 1)[0]
    for needle in (LIST_FILE, "query('ansible.builtin.varnames', '^<role>_')", "line_errors", "meta/argument_specs.yml",
                   "test_bad_inputs.py", "gen-role-docs.py", "changelogs/fragments", "test_role_list.py", "_common"):
        assert needle in section, "docs/development.md 'Adding a role' does not name %s" % needle


def _includes(items):
    """Every include_role / include_tasks task of a loaded playbook or task file."""
    return [t for t in tasks_of(items) if "ansible.builtin.include_role" in t or "ansible.builtin.include_tasks" in t]


def test_a_tagged_include_applies_its_tags_to_its_tasks():
    """A dynamic include's tags are its own: with `--tags vllm_service` the included tasks would not run (the
    rejoin after a roll, each role's preflight in play 1) unless `apply` gives them the tags. site.yml's includes
    with tags, and play 1's preflight include (tagged by the import of tasks/site_preflight.yml)."""
    tagged = [t for t in _includes(site_plays()) if "tags" in t]
    tagged += _includes(yaml.safe_load(read("playbooks", "tasks", "site_preflight.yml")))
    assert len(tagged) == 2, tagged
    for task in tagged:
        args = task.get("ansible.builtin.include_role") or task.get("ansible.builtin.include_tasks")
        assert isinstance(args, dict) and "tags" in (args.get("apply") or {}), (
            "%r has tags but does not apply them to its tasks (apply: {tags: ...})" % task.get("name"))


@pytest.mark.parametrize("role", [entry["role"] for entry in role_list()])
def test_a_role_skips_only_the_checks_site_yml_ran_in_this_run(role):
    """site.yml's play 1 runs every listed role's preflight; its later plays pass the host's checked roles on
    (__site_checked_roles) and the role's main.yml skips its preflight for them, as one skipped include (not a skip per
    task). Any other play of a role (sweep, tune, a user's) leaves the variable undefined: the role checks itself."""
    first = yaml.safe_load(read("roles", role, "tasks", "main.yml"))[0]
    assert first["ansible.builtin.include_tasks"]["file"] == "preflight.yml", first
    assert first["when"] == "'%s' not in (__site_checked_roles | default([]))" % role
    assert first["ansible.builtin.include_tasks"]["apply"]["tags"] == first["tags"]
    plays = site_plays()
    noted = [t for t in plays[0]["tasks"] if "__site_preflight_passed" in t.get("ansible.builtin.set_fact", {})]
    assert [t["ansible.builtin.set_fact"]["__site_preflight_passed"] for t in noted] == ["{{ __site_host_roles }}"]
    assert plays[0]["tasks"][-1] is noted[0], "the roles are noted as checked after every check of play 1"
    running = [p for p in plays[1:] if any(r["role"] == "gpuhost.inference." + role for r in p.get("roles", []))]
    assert len(running) == 1
    assert running[0]["vars"]["__site_checked_roles"] == "{{ __site_preflight_passed | default([]) }}"
