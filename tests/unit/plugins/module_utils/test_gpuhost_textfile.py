"""The one writer of textfile-collector text (plugins/module_utils/gpuhost_textfile.py); cases in
tests/unit/data/gpuhost_textfile_cases.yaml. What it writes is read back with the collection's one reader."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_textfile import (
    Family,
    TextfileError,
    format_value,
    render,
    write_atomic,
)
from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import samples
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("gpuhost_textfile_cases.yaml")


@pytest.mark.parametrize("case", CASES["values"], ids=case_ids(CASES["values"]))
def test_values(case):
    assert format_value(case["value"]) == case["text"]


@pytest.mark.parametrize("case", CASES["render"], ids=case_ids(CASES["render"]))
def test_render(case):
    families = []
    for spec in case["families"]:
        fam = Family(spec["name"], spec["type"], spec["help"])
        for value, labels in spec["samples"]:
            fam.add(value, **labels)
        families.append(fam)
    text = render(families)
    assert text == case["text"]
    # The reader gets the label values back unescaped.
    first = samples(text, use_client=False)[0]
    assert first.labels == dict(case["families"][0]["samples"][0][1])


@pytest.mark.parametrize("case", CASES["errors"], ids=case_ids(CASES["errors"]))
def test_errors(case):
    with pytest.raises(TextfileError):
        Family(case["name"], case["type"]).add(1, **case["labels"])


def test_a_family_twice_is_refused():
    with pytest.raises(TextfileError):
        render([Family("gpuhost_a").add(1), Family("gpuhost_a").add(2)])


def test_write_atomic(tmp_path):
    path = str(tmp_path / "x.prom")
    assert write_atomic(path, "a 1\n") is True
    assert write_atomic(path, "a 1\n") is False
    assert write_atomic(path, "a 2\n") is True
    assert open(path, encoding="utf-8").read() == "a 2\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path)) == ["x.prom"]
