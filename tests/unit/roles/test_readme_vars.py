"""README.md's variable tables are generated from the roles' argument specs: they must be current."""
from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT


def test_readme_variable_tables_are_current():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-role-docs.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_readme_lists_every_role_variable():
    import yaml

    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for role in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as fh:
            for name in yaml.safe_load(fh) or {}:
                assert f"`{name}`" in readme, f"{name} of role {role} is not in README.md"
