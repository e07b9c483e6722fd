# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's connection to its podman boxes: nsenter into the running container's namespaces.

Lab infrastructure, not part of the collection (molecule and `make demo` put this directory on
ANSIBLE_CONNECTION_PLUGINS). containers.podman.podman runs `podman mount` at every task and one
`podman exec` per command (0.2-0.5 s each on the 2-core lab under load, four or five of them a task
without pipelining). This plugin asks podman once for the container's PID 1 (cached while that
process lives), then runs each command with `nsenter` in the container's mount, UTS, IPC, network,
PID and cgroup namespaces, with a clean environment, as root (the lab's boxes are rootful podman
containers and the roles become root anyway); modules are piped to the box's python on stdin
(pipelining), files go through a `cat` in the box. The box's own systemd runs every service;
only the transport differs from ssh.

Bytecode for the module payloads: a pipelined module is Ansible's AnsiballZ wrapper with the module and its
module_utils in a zip, which the box's python imports with zipimport, compiling every file from source on every
task (ansible.module_utils.basic and what it imports: ~115 ms of the ~170 ms a `ping` takes on the box). This
plugin adds each file's bytecode to the zip (unchecked hash-based .pyc entries, which zipimport prefers to the
source) once per payload on the controller (cached by the zip's contents and Python's magic number), and the wrapper runs
unchanged: the same modules, the same module_utils, the same arguments. A box whose python has another magic
number ignores the .pyc entries and compiles the sources as before. GPUHOST_LAB_BYTECODE=0 turns it off (the
figures: benchmarks/lab_module_overhead.sh).
"""
from __future__ import annotations

DOCUMENTATION = """
name: lab_podman
short_description: Runs commands in the lab's podman boxes through nsenter (pipelined)
description:
  - Runs commands in an existing, running rootful podman container by entering its namespaces with
    C(nsenter); modules are piped to the container's python on stdin; files go through a C(cat) there.
author: gpuhost.inference lab
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  podman_executable:
    description: Executable for podman command (asked once for the container's PID).
    default: podman
    vars:
      - name: ansible_podman_executable
  pipelining:
    description: Pipe modules on stdin.
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
"""

import base64
import hashlib
import importlib.util
import io
import json
import marshal
import os
import re
import shlex
import subprocess
import tempfile
import zipfile

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.utils.display import Display

display = Display()

# The environment of a root login on the box (nothing of the controller's leaks in).
BOX_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
           "LANG=C.UTF-8", "USER=root", "LOGNAME=root", "SHELL=/bin/sh"]
NAMESPACES = ["--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup"]


# The payload argument of the AnsiballZ wrapper's main call: `zip_data='<base64>',` on a line of its own.
ZIP_DATA = re.compile(rb"^zip_data='([A-Za-z0-9+/=]+)',$", re.M)


def bytecode_entries(zin):
    """{name.pyc: bytecode} for each .py of the open zip without one: unchecked hash-based .pyc (PEP 552: magic,
    flags 0b01, the source's hash, the code), which zipimport prefers to the source beside it."""
    names = set(zin.namelist())
    entries = {}
    for info in zin.infolist():
        if info.filename.endswith(".py") and info.filename + "c" not in names:
            body = zin.read(info)
            code = compile(body, info.filename, "exec", dont_inherit=True)
            header = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(body)
            entries[info.filename + "c"] = header + marshal.dumps(code)
    return entries


def add_bytecode(in_data, cache_dir):
    """The pipelined wrapper with bytecode_entries added to its zip (the zip's own entries unchanged); other input as
    it is. The entries are cached in cache_dir by the zip's contents (names and bytes: every run stamps its zips with
    its own start time) and this python's magic number."""
    if not in_data or b"_ANSIBALLZ_WRAPPER = True" not in in_data:
        return in_data
    match = ZIP_DATA.search(in_data)
    if match is None:
        return in_data
    raw = base64.b64decode(match.group(1))
    with zipfile.ZipFile(io.BytesIO(raw)) as zin:
        digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
        for info in zin.infolist():
            digest.update(info.filename.encode("utf-8") + b"\0" + zin.read(info) + b"\0")
        path = os.path.join(cache_dir, digest.hexdigest() + ".zip")
        try:
            with zipfile.ZipFile(path) as cached:
                entries = {name: cached.read(name) for name in cached.namelist()}
        except (OSError, zipfile.BadZipFile):
            entries = bytecode_entries(zin)
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            tmp = "%s.%d" % (path, os.getpid())
            with zipfile.ZipFile(tmp, "w") as cache:
                for name, body in entries.items():
                    cache.writestr(name, body)
            os.replace(tmp, path)
        stamps = {info.filename: info.date_time for info in zin.infolist()}
    out = io.BytesIO(raw)
    with zipfile.ZipFile(out, "a") as zout:
        for name, body in entries.items():
            zout.writestr(zipfile.ZipInfo(name, stamps[name[:-1]]), body)
    return in_data[:match.start(1)] + base64.b64encode(out.getvalue()) + in_data[match.end(1):]


def _start_time(pid):
    """Field 22 of /proc/<pid>/stat (the process's start time), None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def cache_file(container):
    """One file per container name and podman storage: two lab states (GPUHOST_CACHE moved) may each hold a box of
    the same name, and the cached PID of the one must not answer for the other."""
    storage = hashlib.sha256(os.environ.get("CONTAINERS_STORAGE_CONF", "").encode("utf-8")).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), "lab_podman-%d" % os.getuid(), "%s-%s.json" % (container, storage))


def container_pid(container, podman, cache):
    """The container's PID 1 on this host: from the cache file while that process lives, else podman (and cached).
    The lab's Ansible connection and its testinfra transport (tests/lab/lab_testinfra.py) both ask here."""
    try:
        with open(cache, encoding="utf-8") as handle:
            cached = json.load(handle)
        # A process that is gone has no start time: None never matches (a cache written while the box was
        # stopping held {"start": null}, and every later run nsentered a PID that no longer existed).
        if cached["start"] is not None and _start_time(cached["pid"]) == cached["start"]:
            return cached["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cmd = [podman, "inspect", "--type", "container", "--format", "{{.State.Pid}}", container]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    pid = proc.stdout.strip()
    if proc.returncode != 0 or not pid.isdigit() or int(pid) == 0:
        raise AnsibleConnectionFailure("container %s is not running: %s" % (
            container, to_native(proc.stderr.strip() or pid)))
    pid = int(pid)
    start = _start_time(pid)
    if start is None:
        raise AnsibleConnectionFailure("container %s is stopping: its PID %d is gone" % (container, pid))
    os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
    tmp = "%s.%d" % (cache, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"pid": pid, "start": start}, handle)
    os.replace(tmp, cache)
    return pid


def nsenter_argv(pid, argv):
    """The command line that runs argv in the box of PID 1 `pid`: its namespaces, its root and a root login's
    environment (nothing of the caller's)."""
    return ["nsenter", "--target", str(pid)] + NAMESPACES + ["--root", "--wd", "--", "env", "-i"] + BOX_ENV + list(argv)


class Connection(ConnectionBase):
    """nsenter into a running podman container (root, pipelined)."""

    transport = "lab_podman"
    has_pipelining = True

    def __init__(self, play_context, new_stdin, *args, **kwargs):
        super().__init__(play_context, new_stdin, *args, **kwargs)
        self._container = self._play_context.remote_addr
        self._pid = None

    def _cache_file(self):
        return cache_file(self._container)

    def _container_pid(self):
        """The container's PID 1 on this host (container_pid, with this connection's cache file and podman)."""
        return container_pid(self._container, self.get_option("podman_executable"), self._cache_file())

    def _connect(self):
        if not self._connected:
            self._pid = self._container_pid()
            display.vvv("ESTABLISH lab_podman (nsenter) TO %s (pid %d)" % (self._container, self._pid),
                        host=self._container)
            self._connected = True
        return self

    def _nsenter(self, argv, in_data=None):
        args = nsenter_argv(self._pid, argv)
        display.vvv("EXEC %s" % args, host=self._container)
        proc = subprocess.run([to_bytes(a, errors="surrogate_or_strict") for a in args], input=in_data,
                              capture_output=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if os.environ.get("GPUHOST_LAB_BYTECODE", "1") != "0":
            in_data = add_bytecode(in_data, os.path.join(tempfile.gettempdir(), "lab_podman-%d" % os.getuid(),
                                                         "bytecode"))
        return self._nsenter(shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    # Files go through a `cat` in the box, so that paths (and their symlinks) resolve there.
    @ensure_connect
    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self._container)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as handle:
            rc, _out, err = self._nsenter(["/bin/sh", "-c", 'cat > "$1"', "sh", out_path], handle.read())
        if rc != 0:
            raise AnsibleError("failed to copy %s to %s in %s: %s" % (in_path, out_path, self._container,
                                                                      to_native(err)))

    @ensure_connect
    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv("FETCH %s TO %s" % (in_path, out_path), host=self._container)
        rc, out, err = self._nsenter(["cat", in_path])
        if rc != 0:
            raise AnsibleError("failed to fetch %s from %s: %s" % (in_path, self._container, to_native(err)))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as handle:
            handle.write(out)

    def close(self):
        self._connected = False
