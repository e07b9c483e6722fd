# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the vllm_verify_record module (plugins/modules/vllm_verify_record.py), run in a temporary directory:
the files and links it writes, what counts as a change (only the last good profile or venv), check mode, bad names."""
from __future__ import annotations

import os
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.inference.plugins.modules import vllm_verify_record
from ansible_collections.gpuhost.inference.tests.unit.module_harness import ExitJson, FailJson, exit_json, fail_json


def run_module(args, check_mode=False):
    """-> (failed, result)."""
    args = dict(args, _ansible_check_mode=check_mode)
    with patch_module_args(args), mock.patch.multiple(basic.AnsibleModule, exit_json=exit_json, fail_json=fail_json):
        with pytest.raises((ExitJson, FailJson)) as info:
            vllm_verify_record.main()
    return info.type is FailJson, info.value.args[0]


def record(tmp_path, name="20261206T120000Z-lab", profile="lab", venv="/opt/vllm/venvs/a", passed=True):
    state = tmp_path / "state"
    args = {"report_dir": str(state / "reports"), "name": name, "report_json": '{"passed": %s}\n' % str(passed).lower(),
            "report_md": "# %s\n" % name, "latest": True, "dirs": [str(state)],
            "textfile": {"path": str(tmp_path / "textfile" / "gpuhost_verify.prom"), "content": "gpuhost_verify_passed 1\n"}}
    if passed:
        args["last_good"] = {"profile_file": str(state / "last_good_profile"), "profile": profile, "report": True,
                             "venv_file": str(state / "last_good_venv"), "venv": venv}
    return args


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_a_passed_run_writes_its_record_and_the_last_good_state(tmp_path):
    failed, result = run_module(record(tmp_path))
    reports = tmp_path / "state" / "reports"
    assert not failed and result["changed"], result
    assert read(reports / "20261206T120000Z-lab.json") == '{"passed": true}\n'
    assert read(reports / "20261206T120000Z-lab.md") == "# 20261206T120000Z-lab\n"
    assert os.readlink(reports / "latest.json") == "20261206T120000Z-lab.json"
    assert os.readlink(reports / "latest.md") == "20261206T120000Z-lab.md"
    assert read(reports / "last-good-lab.json") == '{"passed": true}\n'
    assert read(tmp_path / "state" / "last_good_profile") == "lab\n"
    assert read(tmp_path / "state" / "last_good_venv") == "/opt/vllm/venvs/a\n"
    assert read(tmp_path / "textfile" / "gpuhost_verify.prom") == "gpuhost_verify_passed 1\n"
    assert oct(os.stat(reports / "20261206T120000Z-lab.json").st_mode & 0o777) == "0o644"


# (second run's changes, whether the second run counts as a change): a new report of the same profile and venv is a
# record, not a change; a new last good profile or venv is one; a failed run records no last good state.
CASES = [
    ("same profile, same venv", {"name": "20261206T130000Z-lab"}, False),
    ("another profile", {"name": "20261206T130000Z-lab2", "profile": "lab2"}, True),
    ("another venv", {"name": "20261206T130000Z-lab", "venv": "/opt/vllm/venvs/b"}, True),
    ("a failed run", {"name": "20261206T130000Z-lab", "passed": False}, False),
]


@pytest.mark.parametrize("second,changed", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_only_a_new_last_good_state_is_a_change(tmp_path, second, changed):
    assert not run_module(record(tmp_path))[0]
    failed, result = run_module(record(tmp_path, **second))
    assert not failed and result["changed"] is changed, result
    reports = tmp_path / "state" / "reports"
    assert os.readlink(reports / "latest.json") == second["name"] + ".json"
    if not second.get("passed", True):
        assert read(tmp_path / "state" / "last_good_profile") == "lab\n"
        assert read(reports / "last-good-lab.json") == '{"passed": true}\n'


def test_check_mode_writes_nothing(tmp_path):
    failed, result = run_module(record(tmp_path), check_mode=True)
    assert not failed and result["changed"] and not os.path.exists(tmp_path / "state"), result
    assert str(tmp_path / "state" / "reports" / "latest.json") in result["files"]


def test_a_controller_copy_is_the_report_files_only(tmp_path):
    args = {"report_dir": str(tmp_path / "box1"), "name": "20261206T120000Z-lab", "report_json": "{}\n", "report_md": "#\n"}
    failed, result = run_module(args)
    assert not failed and not result["changed"], result
    assert sorted(os.listdir(tmp_path / "box1")) == ["20261206T120000Z-lab.json", "20261206T120000Z-lab.md"]


@pytest.mark.parametrize("name", ["../lab", "a/b", ""])
def test_a_name_that_is_not_a_file_name_is_refused(tmp_path, name):
    failed, result = run_module(dict(record(tmp_path), name=name))
    assert failed and "name must be a file name" in result["msg"], result
    assert not os.path.exists(tmp_path / "state")
