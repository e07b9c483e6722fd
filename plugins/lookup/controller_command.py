# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""controller_command: run programs on the controller, an input on stdin, and return their verdicts as a registered
loop of ansible.builtin.command would (rc, stdout, stderr, item)."""
from __future__ import annotations

DOCUMENTATION = r"""
name: controller_command
author: gpuhost.inference contributors (@gpuhost)
version_added: 1.3.0
short_description: Run read-only checks on the controller (argv, stdin) and return their exit status and output
description:
  - Each term is a mapping with C(argv) (the program and its arguments, no shell) and optionally C(stdin) (the text
    given on its standard input); other keys are passed back untouched. Each program runs on the controller, in the
    process that templates the task (no module, no temporary file), with a timeout.
  - For checks that change nothing, such as a config rendered by a role's template and checked by its own program
    (C(promtool check config /dev/stdin)) in a preflight before any host changes. It never fails on the program's
    verdict; the caller reads it.
  - The result of each term is shaped as a result of a registered loop of M(ansible.builtin.command), so the same
    filters read either; a program that cannot start gives rc 127 (absent) or 126 (not executable, not a program), C(msg) saying
    why, and C(failed_to_start) true.
options:
  _terms:
    description: Mappings, each with C(argv) (list of str) and optionally C(stdin) (str).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds each program may take before it is stopped (its result then has rc 124).
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Check a rendered Prometheus config with the controller's promtool
  ansible.builtin.set_fact:
    __checked: >-
      {{ query('gpuhost.inference.controller_command',
               {'argv': ['promtool', 'check', 'config', '--syntax-only', '/dev/stdin'],
                'stdin': lookup('ansible.builtin.template', 'prometheus.yml.j2')}) }}
"""

RETURN = r"""
_raw:
  description: One result per term, in order.
  type: list
  elements: dict
  contains:
    rc:
      description: The program's exit status (126, 127 when it could not start; 124 when it was stopped).
      type: int
    stdout:
      description: Its standard output.
      type: str
    stderr:
      description: Its standard error.
      type: str
    msg:
      description: Why it could not start or was stopped (absent otherwise).
      type: str
    failed_to_start:
      description: True when the program could not be started (not found, not executable).
      type: bool
    item:
      description: The term itself, less its C(stdin) (a rendered config may hold secrets).
      type: dict
"""

import subprocess
from collections.abc import Mapping

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def run_check(term, timeout=60):
    """One term's result: {rc, stdout, stderr, item} (+ msg, failed_to_start when it could not start)."""
    if not isinstance(term, Mapping) or not isinstance(term.get("argv"), (list, tuple)) or not term["argv"]:
        raise AnsibleLookupError("controller_command: each term must be a mapping with argv, a non-empty list")
    argv = [str(arg) for arg in term["argv"]]
    stdin = term.get("stdin")
    # The term back, less its stdin (a rendered config may hold secrets; a result is shown with -v).
    result = {"item": {key: value for key, value in term.items() if key != "stdin"}}
    try:
        proc = subprocess.run(argv, input=None if stdin is None else str(stdin), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        result.update(rc=127, stdout="", stderr="", failed_to_start=True, msg="%s: not found" % argv[0])
    except OSError as exc:  # not executable, not a program (ENOEXEC), ...
        result.update(rc=126, stdout="", stderr="", failed_to_start=True, msg="%s: %s" % (argv[0], exc.strerror))
    except subprocess.TimeoutExpired:
        result.update(rc=124, stdout="", stderr="", msg="%s: stopped after %d s" % (argv[0], timeout))
    else:
        result.update(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    return result


class LookupModule(LookupBase):
    """Run each term's argv on the controller."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        timeout = self.get_option("timeout")
        return [run_check(term, timeout) for term in terms]
