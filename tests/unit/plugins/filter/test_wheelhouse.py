"""Unit tests of the wheelhouse filter (plugins/filter/wheelhouse.py): the platform tags pip download needs."""
from __future__ import annotations

import pytest

from ansible_collections.gpuhost.inference.plugins.filter.wheelhouse import FilterModule, wheelhouse_platform_tags

TAGS_2_28 = ["manylinux_2_%d_x86_64" % m for m in range(28, 16, -1)] + ["manylinux2014_x86_64"]


@pytest.mark.parametrize("platforms, python_version, expect", [
    # The README's old cross-target form: one tag, pip would not take uv's manylinux_2_17 wheel.
    (["manylinux_2_28_x86_64"], "3.12", TAGS_2_28),
    ("manylinux_2_28_x86_64", "", TAGS_2_28),
    # A target Python and no platform: Ubuntu 24.04's glibc 2.39 down to 2.17.
    ([], "3.12", ["manylinux_2_%d_x86_64" % m for m in range(39, 16, -1)] + ["manylinux2014_x86_64"]),
    # Nothing asked: pip's own platform (the controller's).
    ([], "", []),
    (["manylinux2014_aarch64"], "3.10", ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]),
    (["linux_x86_64", "manylinux_2_17_x86_64"], "3.12", ["linux_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]),
    (["manylinux_2_12_x86_64"], "3.10", ["manylinux_2_12_x86_64"]),
    (["manylinux_2_28_x86_64", "manylinux_2_17_x86_64"], "3.12", TAGS_2_28),
])
def test_platform_tags(platforms, python_version, expect):
    assert wheelhouse_platform_tags(platforms, python_version) == expect


def test_registered():
    assert FilterModule().filters()["wheelhouse_platform_tags"] is wheelhouse_platform_tags
