"""The bad-input matrix of the fault checks of molecule's default scenario (molecule/default/faults/tests/test_bad_inputs.py), read
without importing it (it needs molecule's conftest): {case: (bad host vars, strings the message must hold)}."""
from __future__ import annotations

import ast
import os

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT


def matrix_cases():
    path = os.path.join(ROOT, "molecule", "default", "faults", "tests", "test_bad_inputs.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CASES" for t in node.targets):
            return {name: (bad, expected) for name, bad, expected in ast.literal_eval(node.value)}
    raise AssertionError("no CASES in %s" % path)
