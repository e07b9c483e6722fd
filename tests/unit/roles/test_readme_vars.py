"""Each role's README.md carries its variable table, generated from the role's argument specs; README.md's and
docs/CONTRACTS.md's role tables and the plays in docs/fleet.md and CONTRACTS.md are generated from the role list and
playbooks/site.yml: all must be current (scripts/gen-role-docs.py --check)."""
from __future__ import annotations

import os
import subprocess
import sys

import yaml

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT

ROLES = os.path.join(ROOT, "roles")


def test_generated_docs_are_current():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-role-docs.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_role_readme_lists_every_role_variable():
    missing = []
    for role in sorted(os.listdir(ROLES)):
        defaults = os.path.join(ROLES, role, "defaults", "main.yml")
        if not os.path.isfile(defaults):
            continue
        readme_path = os.path.join(ROLES, role, "README.md")
        readme = open(readme_path, encoding="utf-8").read() if os.path.isfile(readme_path) else ""
        with open(defaults, encoding="utf-8") as fh:
            missing += [f"{name} (role {role})" for name in yaml.safe_load(fh) or {} if f"`{name}`" not in readme]
    assert not missing, "not in the role's README.md: " + ", ".join(missing)


def test_front_page_has_no_variable_tables():
    # The tables live in the role READMEs only: one copy, generated.
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "<!-- BEGIN vars" not in readme
