# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/wheelhouse.yml: the platform tags a wheelhouse for another Python must ask pip for.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import re

_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
_LEGACY = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
# glibc 2.17 (manylinux2014, what uv, NCCL and nvshmem are built for) up to Ubuntu 24.04's 2.39.
DEFAULT_GLIBC = (17, 39)


def wheelhouse_platform_tags(platforms, python_version="", arch="x86_64"):
    """The --platform values for pip download: each manylinux_2_N tag widened to every older one down to 2_17
    (and manylinux2014), as pip does for the machine it runs on but not for a --platform it is given; with a
    target Python and no platform, manylinux_2_17..2_39 of ``arch``. Other tags are kept as they are."""
    if isinstance(platforms, str):
        platforms = platforms.split()
    platforms = [str(p) for p in platforms or []]
    if not platforms:
        if not python_version:
            return []
        platforms = ["manylinux_2_%d_%s" % (DEFAULT_GLIBC[1], arch)]
    tags = []
    for tag in platforms:
        legacy = next((name for name in _LEGACY if tag.startswith(name + "_")), None)
        if legacy:
            major, minor = _LEGACY[legacy]
            tag = "manylinux_%d_%d_%s" % (major, minor, tag[len(legacy) + 1:])
        match = _MANYLINUX.match(tag)
        if not match or int(match.group(1)) != 2:
            tags.append(tag)
            continue
        top, tag_arch = int(match.group(2)), match.group(3)
        for minor in range(top, min(DEFAULT_GLIBC[0], top) - 1, -1):
            tags.append("manylinux_2_%d_%s" % (minor, tag_arch))
        if top >= 17:
            tags.append("manylinux2014_%s" % tag_arch)
    seen = set()
    return [t for t in tags if not (t in seen or seen.add(t))]


class FilterModule:
    """wheelhouse filters."""

    def filters(self):
        return {"wheelhouse_platform_tags": wheelhouse_platform_tags}
