"""scripts/brief.sh, the "failures in brief" list at the end of `make test` (what CI's tail shows of a failure).

Data-driven cases in tests/unit/data/brief_cases.yaml: a log, the lines the list prints for it.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases

SCRIPT = os.path.join(ROOT, "scripts", "brief.sh")
CASES = load_cases("brief_cases.yaml")


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_brief_names_what_failed(case, tmp_path):
    log = tmp_path / "stage.log"
    log.write_text(case["log"].replace("\\e", "\x1b"), encoding="utf-8")
    out = subprocess.run(["bash", SCRIPT, str(log), "20"], capture_output=True, text=True, check=True).stdout
    got = [line.strip() for line in out.splitlines()]
    assert got == [line.replace("LOG", str(log)) for line in case["lines"]]


def test_brief_keeps_the_last_lines_when_there_are_more(tmp_path):
    lines = ["FAILED tests/test_%d.py::test_x - boom" % i for i in range(5)]
    log = tmp_path / "stage.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = subprocess.run(["bash", SCRIPT, str(log), "3"], capture_output=True, text=True, check=True).stdout
    assert [line.strip() for line in out.splitlines()] == ["(2 more in %s)" % log] + lines[2:]
