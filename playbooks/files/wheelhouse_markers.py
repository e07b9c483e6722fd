# -*- coding: utf-8 -*-
# Copyright (c) 2026 gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Complete a wheelhouse with what its wheels need only on the TARGET's Python (playbooks/wheelhouse.yml).

`pip download --python-version X` picks wheels for the target's tags but evaluates environment markers with the
Python that runs it: a controller on 3.11 building for 3.12 leaves out what vLLM 0.28.0 needs only there
(`six>=1.16.0` and `setuptools<81` behind `python_version > "3.11"`), and the offline install on the target then
fails to resolve ("No solution found"). This reads every wheel's Requires-Dist, keeps the requirements whose markers
hold on the target and not on the Python that ran pip (python_version; Linux, the machine and the extras other
requirements ask for as on both), and downloads those no wheel of the wheelhouse satisfies with the same pip
command, until none is missing (5 rounds at most).

    python3 wheelhouse_markers.py DEST PYTHON_VERSION MACHINE -- PIP_DOWNLOAD_ARGV...

PIP_DOWNLOAD_ARGV is the download command without its requirements (python -m pip download --dest ... target
args). Prints JSON {"added": [requirement, ...], "rounds": n}; exit 1 when something is still missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import InvalidVersion, Version


def wheels(dest):
    """{canonical name: [(Version, path)]} of the wheelhouse's wheels."""
    out = {}
    for name in sorted(os.listdir(dest)):
        if not name.endswith(".whl"):
            continue
        parts = name[:-4].split("-")
        try:
            version = Version(parts[1])
        except (IndexError, InvalidVersion):
            continue
        out.setdefault(canonicalize_name(parts[0]), []).append((version, os.path.join(dest, name)))
    return out


def requires(path):
    """The Requires-Dist requirements of one wheel."""
    with zipfile.ZipFile(path) as whl:
        meta = next((n for n in whl.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if meta is None:
            return []
        text = whl.read(meta).decode("utf-8", "replace")
    reqs = []
    for line in text.split("\n\n", 1)[0].splitlines():
        if line.startswith("Requires-Dist:"):
            try:
                reqs.append(Requirement(line.split(":", 1)[1].strip()))
            except InvalidRequirement:
                continue
    return reqs


def missing(dest, python_version, machine):
    """The requirements (strings, without markers) that hold on the target and that no wheel satisfies."""
    have = wheels(dest)
    env = {"python_version": python_version, "python_full_version": python_version + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": machine, "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    per_wheel = {path: requires(path) for versions in have.values() for _v, path in versions}
    extras = {}
    for reqs in per_wheel.values():
        for req in reqs:
            extras.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    # pip resolved for this Python's markers: only a requirement that holds on the target and not here was left out.
    here_version = "%d.%d" % sys.version_info[:2]
    here = dict(env, python_version=here_version, python_full_version=here_version + ".0")
    out = []
    for name, versions in have.items():
        for _version, path in versions:
            for req in per_wheel[path]:
                if req.marker is None:
                    continue
                wanted = [""] + sorted(extras.get(name, ()))
                on_target = any(req.marker.evaluate(dict(env, extra=e)) for e in wanted)
                on_here = any(req.marker.evaluate(dict(here, extra=e)) for e in wanted)
                if not on_target or on_here:
                    continue
                target = canonicalize_name(req.name)
                if any(req.specifier.contains(v, prereleases=True) for v, _p in have.get(target, [])):
                    continue
                text = req.name + ("[%s]" % ",".join(sorted(req.extras)) if req.extras else "") + str(req.specifier)
                if text not in out:
                    out.append(text)
    return out


def main(argv):
    if "--" not in argv or argv.index("--") != 3:
        sys.stderr.write(__doc__)
        return 2
    dest, python_version, machine = argv[:3]
    pip = argv[4:]
    added = []
    for rounds in range(1, 6):
        todo = missing(dest, python_version, machine)
        if not todo:
            print(json.dumps({"added": added, "rounds": rounds - 1}))
            return 0
        subprocess.run(pip + todo, check=True)
        added.extend(todo)
    todo = missing(dest, python_version, machine)
    print(json.dumps({"added": added, "rounds": 5, "still_missing": todo}))
    return 1 if todo else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
