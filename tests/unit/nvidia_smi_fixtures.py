"""What the tests of the nvidia-smi code share: the real captures and the mocked nvidia-smi.

For tests/unit/plugins/module_utils/test_nvidia_smi.py, test_nvidia_power_sampler.py,
test_nvidia_topology.py and tests/unit/plugins/modules/test_nvidia_gpu_info.py.

    from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import h200_capture, smi_mock
"""
from __future__ import annotations

import ast
import contextlib
import os
import shutil
import subprocess
import tempfile
from unittest import mock

from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, SMI_MOCK

H200 = os.path.join(FIXTURES, "nvidia-smi", "h200-580.159.04")   # one H200, driver 580.159.04
TOPO = os.path.join(FIXTURES, "nvidia-smi", "topo")              # public `nvidia-smi topo -m` captures


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def h200_capture(name):
    """The text of a capture of the H200 (tests/fixtures/nvidia-smi/h200-580.159.04/<name>)."""
    return _read(os.path.join(H200, name))


def topo_capture(name):
    """The text of a public `nvidia-smi topo -m` capture (tests/fixtures/nvidia-smi/topo/<name>)."""
    return _read(os.path.join(TOPO, name))


def captured_section(command_start):
    """(command, output) of exactly that command in nvidia-smi-queries.txt (its text after "### nvidia-smi ")."""
    for block in h200_capture("nvidia-smi-queries.txt").split("### nvidia-smi ")[1:]:
        command, _nl, rest = block.partition("\n")
        if command == command_start:
            return command, rest.rpartition("rc=")[0]
    raise KeyError(command_start)


def captured_compute_cap():
    """compute_cap of the captured H200 (nvidia-smi-compute-cap-topo-version.txt, a second real capture)."""
    text = h200_capture("nvidia-smi-compute-cap-topo-version.txt")
    block = text.split("$ nvidia-smi --query-gpu=compute_cap --format=csv,noheader\n", 1)[1]
    return block.splitlines()[0].strip()


def captured_row():
    """The GPU_INFO_FIELDS columns of the captured H200: the first 14 of the big capture, then compute_cap."""
    _command, out = captured_section("--query-gpu=index,uuid,name,pci.bus_id,driver_version,persistence_mode,"
                                     "power.management,power.draw,power.limit,enforced.power.limit,"
                                     "power.default_limit,power.min_limit,power.max_limit,memory.total,memory.used,"
                                     "utilization.gpu,temperature.gpu,clocks.sm,clocks.max.sm --format=csv,noheader,nounits")
    return ", ".join(out.strip().split(", ")[:14] + [captured_compute_cap()]) + "\n"


class SmiMock:
    """The mocked nvidia-smi (a test double, tests/doubles/nvidia_smi_mock.py) with its state in a temp dir."""

    path = SMI_MOCK

    def __init__(self, directory):
        self.env = {"NVIDIA_SMI_MOCK_STATE": os.path.join(directory, "state.json")}

    def _call(self, *args):
        subprocess.run([self.path] + list(args), env=dict(os.environ, **self.env), check=True)

    def init(self, profile):
        """A fresh box of that profile (h200, rtx3090x2, ...)."""
        self._call("--mock-init", profile)

    def set(self, setting):
        """``--mock-set key=value`` (link=NV4, fault=fail, ...)."""
        self._call("--mock-set", setting)


@contextlib.contextmanager
def smi_mock(profile):
    """A mocked box of ``profile``; NVIDIA_SMI_MOCK_STATE points at it inside the block."""
    directory = tempfile.mkdtemp(prefix="smi-utils-")
    try:
        box = SmiMock(directory)
        box.init(profile)
        with mock.patch.dict(os.environ, box.env):
            yield box
    finally:
        shutil.rmtree(directory)


def ansible_imports(module):
    """The modules under ``ansible`` or ``ansible_collections`` that ``module``'s source imports."""
    with open(module.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {name for name in names if name.split(".")[0] in ("ansible", "ansible_collections")}
