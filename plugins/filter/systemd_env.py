# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An env file's text as a systemd service gets it (EnvironmentFile=): the filter over the collection's one reader,
plugins/module_utils/systemd_env.py.

The docs of the filter are in the YAML file of the same name beside this one; its unit tests are
tests/unit/plugins/filter/test_systemd_env.py with the cases of tests/unit/data/systemd_env_cases.yaml (the reader's).
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils.systemd_env import EnvFileError, parse_env_file
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name


def systemd_env(text, systemd_version=None):
    """{name: value} of an env file's text as systemd gives them to a service (the last assignment wins)."""
    if text is None:
        return {}
    if not isinstance(text, (str, bytes)):
        raise AnsibleFilterError("systemd_env expects the text of an env file (a string), got %s" % type_name(text))
    try:
        return parse_env_file(text, systemd_version)
    except (EnvFileError, TypeError) as exc:
        raise AnsibleFilterError("systemd_env: %s" % exc) from exc


class FilterModule:
    """The env-file reader."""

    def filters(self):
        return {"systemd_env": systemd_env}
