#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuhost_host_claims
short_description: Read who holds the TCP ports and the paths the collection would take on a host
version_added: "1.3.0"
description:
  - Reads the listening TCP sockets of the host from C(/proc/net/tcp) and C(/proc/net/tcp6) with the process and the
    systemd unit holding each (C(/proc/PID/fd), C(/proc/PID/comm), C(/proc/PID/cgroup)), as C(ss -ltnp) shows them.
  - Asks the distribution's package database which packages own the given paths (C(dpkg-query -S), else
    C(rpm -qf)).
  - Read-only; changes nothing on the host and runs the same in check mode. site.yml's first play feeds its answer
    to the filters C(gpuhost.inference.listener_errors) and C(gpuhost.inference.package_path_errors).
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  paths:
    description:
      - The absolute paths to look up in the package database.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Needs root to name the process of a socket another user owns (RV(listeners[].process) is then V(null)).
"""

EXAMPLES = r"""
- name: Read the listeners and who owns /opt/vllm
  gpuhost.inference.gpuhost_host_claims:
    paths: [/opt/vllm]
  register: __site_claims
"""

RETURN = r"""
listeners:
  description: The listening TCP sockets.
  returned: always
  type: list
  elements: dict
  contains:
    address: {description: The local address., type: str}
    family: {description: 4 or 6., type: int}
    port: {description: The port., type: int}
    wildcard: {description: Listening on every address of the family., type: bool}
    pid: {description: The process holding it (null when not found)., type: int}
    process: {description: The process's name (C(/proc/PID/comm))., type: str}
    unit: {description: The systemd service of the process (empty when none)., type: str}
path_owners:
  description: The packages owning each path that a package owns (paths no package owns are absent).
  returned: always
  type: dict
package_manager:
  description: dpkg, rpm or none (no package database was read).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import (
    parse_dpkg_search,
    parse_proc_net_tcp,
    unit_of_cgroup,
)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def read_listeners(proc="/proc"):
    sockets = []
    for family, name in ((4, "tcp"), (6, "tcp6")):
        sockets.extend(parse_proc_net_tcp(_read(os.path.join(proc, "net", name)), family))
    wanted = {"socket:[%s]" % s["inode"]: s for s in sockets}
    holders = {}
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted and target not in holders:
                holders[target] = int(pid)
    out = []
    for key, sock in wanted.items():
        pid = holders.get(key)
        out.append({"address": sock["address"], "family": sock["family"], "port": sock["port"],
                    "wildcard": sock["wildcard"], "pid": pid,
                    "process": _read(os.path.join(proc, str(pid), "comm")).strip() or None if pid else None,
                    "unit": unit_of_cgroup(_read(os.path.join(proc, str(pid), "cgroup"))) if pid else ""})
    return sorted(out, key=lambda s: (s["port"], s["family"], s["address"]))


def read_owners(module, paths):
    if not paths:
        return "none", {}
    dpkg = module.get_bin_path("dpkg-query")
    if dpkg:
        _rc, out, _err = module.run_command([dpkg, "-S"] + paths)  # rc 1 when one path is no package's
        return "dpkg", parse_dpkg_search(out)
    rpm = module.get_bin_path("rpm")
    if rpm:
        owners = {}
        for path in paths:
            rc, out, _err = module.run_command([rpm, "-qf", "--queryformat", "%{NAME}\\n", path])
            if rc == 0:
                owners[path] = sorted(set(out.split()))
        return "rpm", owners
    return "none", {}


def main():
    module = AnsibleModule(argument_spec={"paths": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)
    paths = [p for p in module.params["paths"] if p.startswith("/")]
    manager, owners = read_owners(module, paths)
    module.exit_json(changed=False, listeners=read_listeners(), path_owners=owners, package_manager=manager)


if __name__ == "__main__":
    main()
