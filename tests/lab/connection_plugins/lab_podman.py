# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's connection to its podman boxes: containers.podman.podman with pipelining.

Lab infrastructure, not part of the collection (molecule and `make demo` put this directory on
ANSIBLE_CONNECTION_PLUGINS). containers.podman.podman runs `podman exec` without `-i`, so it cannot
pipeline: every module costs a temp dir, a copy, a chmod, the run and a clean-up, each a `podman exec`
(0.2-0.5 s each on the 2-core lab under load). With `-i` the module goes to the box's python on stdin in
one `podman exec`, as ssh pipelining does.
"""
from __future__ import annotations

DOCUMENTATION = """
name: lab_podman
short_description: containers.podman.podman with pipelining (the lab's boxes)
description:
  - Runs commands in an existing podman container; modules are piped to the container's python on
    stdin (C(podman exec -i)) in one call.
author: gpuhost.inference lab
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User inside the container (none for the image's default, root in the lab).
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to pass to the podman command line.
    default: ''
    vars:
      - name: ansible_podman_extra_args
  podman_executable:
    description: Executable for podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
  pipelining:
    description: Pipe modules on stdin (one C(podman exec) per module).
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
"""

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect

from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    """containers.podman.podman, with `podman exec -i` when there is stdin to pass (pipelining)."""

    transport = "lab_podman"
    has_pipelining = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i"] + (["--user", self.user] if self.user else [])
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
