# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place where this collection builds nvidia-smi command lines and parses their CSV output.

Works inside an Ansible module (``runner=module.run_command``) and standalone (``subprocess``,
for benchmark scripts); it needs nothing but the Python standard library and never imports
AnsibleModule.

    smi = NvidiaSmi("/usr/bin/nvidia-smi", runner=module.run_command)
    smi.gpu_info()                      # list of fact dicts, see GPU_INFO_FIELDS
    smi.query(["index", "power.draw"])  # [{"index": 0, "power.draw": 80.75}]
    smi.set_power_limit(250, gpus=[0])  # nvidia-smi -i 0 -pl 250
    power_source(smi.path)              # "nvidia-smi" | "test double" | "none"

Built on it, each in its own file: nvidia_power_sampler.py (PowerSampler, LevelPower: power read
with ``-lms`` while a load runs) and nvidia_topology.py (the ``nvidia-smi topo -m`` reader).
"""
from __future__ import annotations

import csv
import datetime
import re
import subprocess

__all__ = [
    "GPU_INFO_FIELDS",
    "NOT_A_FIELD",
    "NvidiaSmi",
    "NvidiaSmiError",
    "describe_failure",
    "parse_csv",
    "parse_value",
    "parse_timestamp",
    "power_source",
]

# --query-gpu field -> fact key returned by gpu_info() (and by the nvidia_gpu_info module).
GPU_INFO_FIELDS = (
    ("index", "index"),
    ("uuid", "uuid"),
    ("name", "name"),
    ("pci.bus_id", "pci_bus_id"),
    ("driver_version", "driver_version"),
    ("persistence_mode", "persistence_mode"),
    ("power.management", "power_management"),
    ("power.draw", "power_draw_w"),
    ("power.limit", "power_limit_w"),
    ("enforced.power.limit", "enforced_power_limit_w"),
    ("power.default_limit", "default_power_limit_w"),
    ("power.min_limit", "min_power_limit_w"),
    ("power.max_limit", "max_power_limit_w"),
    ("memory.total", "memory_total_mib"),
    ("compute_cap", "compute_cap"),
)
_FLOAT_FACTS = {
    "power_draw_w", "power_limit_w", "enforced_power_limit_w", "default_power_limit_w",
    "min_power_limit_w", "max_power_limit_w",
}
_INT_FACTS = {"index", "memory_total_mib"}

# Fields whose values stay text even when they look like numbers.
STRING_FIELDS = frozenset((
    "timestamp", "driver_version", "name", "gpu_name", "serial", "gpu_serial", "uuid", "gpu_uuid",
    "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus", "pci.device", "pci.device_id",
    "pci.sub_device_id", "vbios_version", "compute_cap", "pstate", "persistence_mode",
    "power.management", "compute_mode", "display_active", "display_mode", "mig.mode.current",
    "mig.mode.pending", "ecc.mode.current", "ecc.mode.pending", "inforom.img", "inforom.image",
))

# What nvidia-smi prints instead of a value it cannot give.
_UNAVAILABLE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU requires reset|Not Available)\]?$", re.I)
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+\.\d*$")
_UNIT = re.compile(r"^(-?\d+(?:\.\d*)?) (W|MiB|%|MHz|C|sec)$")

NO_DEVICES = "No devices were found"
# What nvidia-smi prints for a --query-gpu field it does not know (captured, rc 2).
NOT_A_FIELD = "is not a valid field to query"
# The first bytes of the real nvidia-smi, an ELF executable (power_source()).
ELF_MAGIC = b"\x7fELF"
RC_NO_DEVICES = 6
RC_DRIVER = 9
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


class NvidiaSmiError(Exception):
    """nvidia-smi could not be run or answered with an error.

    ``rc`` is None when the program could not be started at all.
    """

    def __init__(self, msg, rc=None, stdout="", stderr=""):
        super().__init__(msg)
        self.msg = msg
        self.rc = rc
        self.stdout = stdout or ""
        self.stderr = stderr or ""

    @property
    def no_devices(self):
        return self.rc == RC_NO_DEVICES or NO_DEVICES in self.stdout + self.stderr

    @property
    def output(self):
        return "\n".join(t.strip() for t in (self.stdout, self.stderr) if t and t.strip())

    def to_dict(self):
        return {"msg": self.msg, "rc": self.rc, "stdout": self.stdout, "stderr": self.stderr}


def parse_value(text, field=None):
    """One CSV cell -> None (N/A and friends), int, float or str.

    Units (``80.75 W``, ``143771 MiB``) are dropped, so csv output with or without
    ``nounits`` gives the same values. Fields in STRING_FIELDS stay text.
    """
    text = text.strip()
    if _UNAVAILABLE.match(text):
        return None
    if field in STRING_FIELDS:
        return text
    unit = _UNIT.match(text)
    if unit:
        text = unit.group(1)
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_csv(text, fields, header=False):
    """Rows of ``--format=csv[,noheader][,nounits]`` output -> list of dicts keyed by ``fields``."""
    lines = [line for line in text.splitlines() if line.strip()]
    if header and lines:
        lines = lines[1:]
    rows = []
    for cells in csv.reader(lines, skipinitialspace=True):
        if len(cells) != len(fields):
            raise NvidiaSmiError(
                "unexpected nvidia-smi output: %d values for %d fields in %r" % (len(cells), len(fields), ", ".join(cells)),
                stdout=text,
            )
        rows.append({field: parse_value(cell, field) for field, cell in zip(fields, cells)})
    return rows


def parse_timestamp(text):
    """``2026/12/02 14:39:51.056`` -> seconds since the epoch (local time), or None."""
    try:
        return datetime.datetime.strptime(text.strip(), TIMESTAMP_FORMAT).timestamp()
    except (TypeError, ValueError):
        return None


def _subprocess_runner(timeout):
    def run(args):
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        except FileNotFoundError as exc:
            raise NvidiaSmiError("nvidia-smi not found: %s (%s)" % (args[0], exc.strerror)) from exc
        except PermissionError as exc:
            raise NvidiaSmiError("nvidia-smi cannot be run: %s (%s)" % (args[0], exc.strerror)) from exc
        except subprocess.TimeoutExpired as exc:
            raise NvidiaSmiError("nvidia-smi did not answer within %ss: %s" % (timeout, " ".join(args))) from exc
        return proc.returncode, proc.stdout, proc.stderr
    return run


def _gpu_list(gpus):
    if gpus is None:
        return None
    if isinstance(gpus, (int, str)):
        gpus = [gpus]
    gpus = [str(g) for g in gpus]
    if not gpus:
        return None
    return ",".join(gpus)


def describe_failure(args, rc, out, err):
    """The message of a failed nvidia-smi command line ``args`` (what it means, rc, command, its output)."""
    text = " / ".join(t.strip().replace("\n", " / ") for t in (out, err) if t and t.strip())
    if rc == RC_NO_DEVICES or NO_DEVICES in out + err:
        what = "nvidia-smi reports no GPUs"
    elif rc == RC_DRIVER:
        what = "nvidia-smi cannot talk to the NVIDIA driver"
    else:
        what = "nvidia-smi failed"
    return "%s (rc=%s, command: %s): %s" % (what, rc, " ".join(args), text or "no output")


class NvidiaSmi:
    """A thin client for the nvidia-smi CLI.

    ``runner(args) -> (rc, stdout, stderr)``; an AnsibleModule's ``run_command`` fits. Without
    one, ``subprocess`` runs the program with ``timeout`` seconds to answer.
    """

    def __init__(self, path="nvidia-smi", runner=None, timeout=60):
        self.path = path
        self.timeout = timeout
        self.runner = runner or _subprocess_runner(timeout)

    # -- command lines (built here only) --------------------------------------------------
    def _ids(self, gpus):
        ids = _gpu_list(gpus)
        return ["-i", ids] if ids else []

    def query_cmd(self, fields, gpus=None, units=False, header=False, loop_ms=None):
        fmt = "csv" + ("" if header else ",noheader") + ("" if units else ",nounits")
        cmd = [self.path] + self._ids(gpus) + ["--query-gpu=" + ",".join(fields), "--format=" + fmt]
        if loop_ms is not None:
            cmd += ["-lms", str(int(loop_ms))]
        return cmd

    def power_limit_cmd(self, watts, gpus=None):
        """``nvidia-smi -i 0,1 -pl 250`` (a whole number of watts prints without decimals)."""
        value = float(watts)
        text = str(int(value)) if value.is_integer() else ("%.2f" % value).rstrip("0")
        return [self.path] + self._ids(gpus) + ["-pl", text]

    def persistence_mode_cmd(self, enabled, gpus=None):
        return [self.path] + self._ids(gpus) + ["-pm", "1" if enabled else "0"]

    def list_cmd(self):
        return [self.path, "-L"]

    def topology_cmd(self):
        """``nvidia-smi topo -m``: the link matrix of the GPUs (all of them; it takes no -i)."""
        return [self.path, "topo", "-m"]

    # -- running ----------------------------------------------------------------------------
    def run(self, args, check=True):
        """Run ``args`` (a full command line from one of the *_cmd methods)."""
        rc, out, err = self.runner(args)
        out = out or ""
        err = err or ""
        if check and rc != 0:
            raise NvidiaSmiError(describe_failure(args, rc, out, err), rc=rc, stdout=out, stderr=err)
        return rc, out, err

    def query(self, fields, gpus=None):
        """``--query-gpu`` -> list of dicts keyed by the requested field names."""
        fields = list(fields)
        _rc, out, _err = self.run(self.query_cmd(fields, gpus))
        return parse_csv(out, fields)

    def gpu_info(self, gpus=None):
        """One fact dict per GPU (keys: the second column of GPU_INFO_FIELDS).

        A driver that does not know ``compute_cap`` (older than the field) is asked again without it;
        its ``compute_cap`` is None.
        """
        fields = [f for f, _k in GPU_INFO_FIELDS]
        try:
            rows = self.query(fields, gpus)
        except NvidiaSmiError as exc:
            if NOT_A_FIELD not in exc.output or "compute_cap" not in fields:
                raise
            fields = [f for f in fields if f != "compute_cap"]
            rows = self.query(fields, gpus)
        facts = []
        for row in rows:
            item = {}
            for field, key in GPU_INFO_FIELDS:
                value = row.get(field)
                if value is not None and key in _FLOAT_FACTS:
                    value = float(value)
                elif value is not None and key in _INT_FACTS:
                    value = int(value)
                elif value is not None and not isinstance(value, str):
                    value = str(value)
                item[key] = value
            facts.append(item)
        return facts

    def set_power_limit(self, watts, gpus=None):
        return self.run(self.power_limit_cmd(watts, gpus))

    def set_persistence_mode(self, enabled, gpus=None):
        return self.run(self.persistence_mode_cmd(enabled, gpus))


def power_source(path):
    """What the nvidia-smi at ``path`` is: ``nvidia-smi`` | ``test double`` | ``none``.

    The real nvidia-smi is an ELF executable. Anything else at the resolved path (the lab's
    Python mock, a shell wrapper) is taken for a test double: its watts are not a measurement.
    ``none``: no path. A file that cannot be read is taken for the real one (it cannot be told apart).
    """
    if not path:
        return "none"
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError:
        return "nvidia-smi"
    return "nvidia-smi" if magic == ELF_MAGIC else "test double"
