"""roles/vllm_verify: the report beside the last good one (issue 46.2), in the play's summary and the Markdown report,
rendered by Ansible's own templar from the role's templates over a real report of the role. Data-driven: the cases are
in tests/unit/data/vllm_verify_report_comparison_cases.yaml."""
from __future__ import annotations

import copy
import json
import os

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.inference.plugins.filter.vllm_verify_compare import vllm_verify_compare
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, ROOT, case_ids, load_cases
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

CASES = load_cases("vllm_verify_report_comparison_cases.yaml", "cases")
TEMPLATES = os.path.join(ROOT, "roles", "vllm_verify", "templates")
with open(os.path.join(FIXTURES, "vllm-verify", "report-double-lab-faults.json"), encoding="utf-8") as _fh:
    REPORT = json.load(_fh)


def _set(data, dotted, value):
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[int(key)] if isinstance(data, list) else data[key]
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def _render(name, report):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as fh:
        source = fh.read()
    variables = {"__vllm_verify_report": report, "vllm_verify_nvidia_smi_path": "/usr/bin/nvidia-smi",
                 "vllm_verify_controller_report_dir": "/reports", "inventory_hostname": report["host"]}
    return Templar(loader=DataLoader(), variables=variables).template(trusted(source))


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_side_by_side(case):
    new = copy.deepcopy(REPORT)
    for path, value in case["change"].items():
        _set(new, path, value)
    comparison = vllm_verify_compare(new, REPORT, case["max_regression"])
    new["comparison"] = comparison
    if comparison["gate"] is not None:  # as tasks/report.yml adds it
        new["gates"] = new["gates"] + [comparison["gate"]]
    summary, markdown = _render("summary.txt.j2", new), _render("report.md.j2", new)
    for text, want in ((summary, case["summary"]), (markdown, case["markdown"])):
        for fragments in want:
            if isinstance(fragments, str):
                assert fragments in text, text
            else:
                assert any(all(f in line for f in fragments) for line in text.splitlines()), (fragments, text)
    for fragment in case["absent"]:
        assert fragment not in summary and fragment not in markdown
