#!/usr/bin/python3
"""Mocked nvidia-smi: a TEST DOUBLE for containers and unit tests, never for a real host.

Installed in the lab containers as /usr/bin/nvidia-smi. Python 3 standard library only.

It answers the subset of nvidia-smi that this collection uses, with the spelling, units,
separators and exit codes of a real capture (tests/fixtures/nvidia-smi/h200-580.159.04/,
NVIDIA H200, driver 580.159.04):

  nvidia-smi                                      summary table
  nvidia-smi -L | --list-gpus
  nvidia-smi --version
  nvidia-smi --query-gpu=F1,F2 --format=csv[,noheader][,nounits] [-i IDS] [-lms MS | -l S]
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv  (no processes)
  nvidia-smi -q [-d POWER] [-i IDS]               only the POWER section is simulated
  nvidia-smi [-i IDS] -pl WATTS | --power-limit=WATTS
  nvidia-smi [-i IDS] -pm 0|1|DISABLED|ENABLED | --persistence-mode=...
  nvidia-smi topo -m | --matrix                   the GPU link matrix, in the tab-separated format of
                                                  the public captures in tests/fixtures/nvidia-smi/topo/

IDS is a comma list of indexes, UUIDs or PCI bus ids; an unknown one prints "No devices were
found" and exits 6. Errors go to stdout, as nvidia-smi prints them.

Mock-only options (not in the real tool):
  --mock-init PROFILE      write a fresh state: h200 | rtx3090x2 | rtx3090x1
  --mock-set KEY=VALUE     (root) fault=none|fail|no_devices|slow|pl_unsupported|pl_permission,
                           slow_seconds=N, unknown_fields=JSON list (--query-gpu fields answered as
                           an older driver answers a field it does not know, e.g.
                           '["power.draw.instant"]'; [] for none),
                           link=LABEL (what `topo -m` shows between every two GPUs: PHB, the
                           default of the RTX 3090 boxes (two consumer cards on the CPU's PCIe root
                           complex, no NVLink bridge); NV4 for a pair with an NVLink bridge; PIX,
                           PXB, NODE, SYS, NVn; or none: `topo -m` fails as on a driver without it),
                           or gpuN.FIELD=VALUE for a field of GPU N's state
                           (e.g. gpu0.enforced_cap_w=300, gpu1.memory_used_mib=20000;
                           VALUE is read as JSON when it parses, else as a string)
  --mock-show              print the state as JSON
  --mock-count N           with -lms/-l: stop after N sampling rounds (one row per selected
                           GPU each round) instead of running until killed

State: JSON at $NVIDIA_SMI_MOCK_STATE, else /etc/nvidia-smi-mock/state.json, written
atomically (temp file + rename), mode 0644 so that any user can read it. Without a state
file every call fails like a host without a loaded driver (rc 9) and says so on stderr.

Faults (--mock-set fault=...): "fail" makes every call exit 9 with the driver-communication
message; "no_devices" prints "No devices were found" (rc 6); "slow" sleeps slow_seconds
before answering; "pl_unsupported" answers -pl with the "not supported ... Treating as warning
and moving on." lines, "All done." and rc 0 (the real tool treats it as a warning; nothing is
changed); "pl_permission" refuses -pl as for a non-root caller, even for root. The --mock-*
options themselves are never subject to faults.

Ordering choice for -pl (not captured from a real card): the range is checked first (rc 2),
then the caller's privileges (rc 4); GPUs are handled in order and the first error stops the
run ("Terminating early due to previous errors."), leaving earlier GPUs changed.

Power draw is simulated: idle + (enforced limit - idle) * the host's CPU busy fraction
(from /proc/stat, two readings about 50 ms apart, or the previous round when looping), with
a little noise, never above the enforced limit.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import random
import re
import sys
import tempfile
import time

DEFAULT_STATE = "/etc/nvidia-smi-mock/state.json"
STATE_ENV = "NVIDIA_SMI_MOCK_STATE"
FAULTS = ("none", "fail", "no_devices", "slow", "pl_unsupported", "pl_permission")

# Every message the mock prints, in one place, so that a real capture can replace them.
# "captured": seen in tests/fixtures/nvidia-smi/; "quoted": from the public reports listed in
# that README; "assumed": not captured, written after nvidia-smi's documented behaviour.
MESSAGES = {
    # captured (nvidia-smi-queries.txt)
    "no_devices": "No devices were found\n",
    "bad_field": 'Field "{field}" is not a valid field to query.\n\n',
    "version": (
        "NVIDIA-SMI version  : {driver}\n"
        "NVML version        : {nvml}\n"
        "DRIVER version      : {driver}\n"
        "CUDA Version        : {cuda}\n"
    ),
    "list_gpu": "GPU {index}: {name} (UUID: {uuid})\n",
    # quoted (README of the fixtures)
    "pl_set": "Power limit for GPU {bus} was set to {new:.2f} W from {old:.2f} W.\n",
    "all_done": "All done.\n",
    "pl_range": (
        "Provided power limit {value:.2f} W is not a valid power limit which should be "
        "between {min:.2f} W and {max:.2f} W for GPU {bus}\n"
    ),
    "terminating": "Terminating early due to previous errors.\n",
    "pl_unsupported": (
        "Changing power management limit is not supported for GPU: {bus}.\n"
        "Treating as warning and moving on.\n"
    ),
    # assumed
    "pl_permission": "Failed to set power management limit for GPU {bus}: Insufficient Permissions\n",
    "pm_permission": "Unable to set persistence mode for GPU {bus}: Insufficient Permissions\n",
    "pm_already": "Persistence mode is already {mode} for GPU {bus}.\n",
    "pm_enabled": "Enabled persistence mode for GPU {bus}.\n",
    "pm_disabled": "Disabled persistence mode for GPU {bus}.\n",
    "driver_fail": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    ),
    "invalid_args": "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n",
    "missing_format": "Option --format must be provided with --query-gpu. Please run 'nvidia-smi -h' for help.\n",
    "usage": (
        "NVIDIA System Management Interface -- v{driver} (mocked: a test double)\n\n"
        "Supported here: -L, --version, --query-gpu=... --format=csv[,noheader][,nounits],\n"
        "-i, -l, -lms, -q -d POWER, -pl, -pm, topo -m, --mock-init, --mock-set, --mock-show, --mock-count\n"
    ),
    # quoted: the legend `nvidia-smi topo -m` prints under the matrix, as in every capture of
    # tests/fixtures/nvidia-smi/topo/ (driver 5xx)
    "topo_legend": (
        "Legend:\n\n"
        "  X    = Self\n"
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
        "  PIX  = Connection traversing at most a single PCIe bridge\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    ),
    # mock-only (stderr)
    "mock_no_state": "nvidia-smi mock: no state at {path}; run 'nvidia-smi --mock-init PROFILE' first\n",
    "mock_bad_profile": "nvidia-smi mock: unknown profile {profile!r}; choose one of {choices}\n",
    "mock_bad_set": "nvidia-smi mock: cannot set {item!r}: {why}\n",
    "mock_needs_root": "nvidia-smi mock: --mock-set changes the card state and needs root\n",
}

RC_OK = 0
RC_INVALID = 2
RC_NO_PERMISSION = 4
RC_NOT_FOUND = 6
RC_DRIVER = 9

# ---------------------------------------------------------------- card profiles
_H200 = {
    # Every value below is the captured H200 (nvidia-smi-queries.txt, -q -x, -q -d POWER).
    "name": "NVIDIA H200",
    "uuid": "GPU-1b80dd3e-e53f-bb17-9c6f-1f1f6a19254c",
    "serial": "1653724049211",
    "pci_bus_id": "00000000:00:06.0",
    "pci_device_id": "0x233510DE",
    "pci_sub_device_id": "0x18BF10DE",
    "vbios_version": "96.00.A5.00.1A",
    "compute_cap": "9.0",
    "persistence_mode": "Enabled",
    "power_management": "Enabled",
    "power_limit_w": 700.0,
    "enforced_cap_w": None,  # another limiter's ceiling; None: enforced == requested
    "default_limit_w": 700.0,
    "min_limit_w": 200.0,
    "max_limit_w": 700.0,
    "idle_power_w": 80.75,
    "memory_power_w": 33.63,
    "memory_total_mib": 143771,
    "memory_reserved_mib": 616,
    "memory_used_mib": 0,
    "utilization_gpu": 0,
    "utilization_memory": 0,
    "temperature_gpu": 41,
    "temperature_memory": 39,
    "fan_speed": None,
    "pstate": "P0",
    "clocks_gr": 345,
    "clocks_sm": 345,
    "clocks_mem": 3201,
    "clocks_video": 765,
    "clocks_max_gr": 1980,
    "clocks_max_sm": 1980,
    "clocks_max_mem": 3201,
    "clocks_max_video": 1545,
    "pcie_gen": 5,
    "pcie_width": 16,
    "display_active": "Disabled",
    "ecc_mode": "Enabled",
    "ecc_errors": "0",
    "mig_mode": "Disabled",
    "compute_mode": "Default",
    # clock event reasons, idle as the H200 capture shows them
    "event_sw_power_cap": "Not Active",
    "event_hw_slowdown": "Not Active",
    "event_sw_thermal_slowdown": "Not Active",
    "event_hw_thermal_slowdown": "Not Active",
    # `topo -m` columns (not captured on the H200 box: assumed)
    "cpu_affinity": "0-15",
    "numa_affinity": "0",
}

# RTX 3090 reference card. Power range from a public `nvidia-smi -q` dump of a 24 GB card
# with a 350 W default (Power Limit / Default / Enforced / Max 350.00 W, Min Power Limit
# 100.00 W; memory 19147 + 5121 MiB, max clocks 2100 MHz SM / 9751 MHz memory, which are
# the RTX 3090's): https://github.com/NVIDIA/nvidia-docker/issues/1547 . The product-name
# line of that dump was not in the part we could read; the same figures (Min 100.00 W,
# Max 350.00 W, FB total 24576 MiB, reserved 316 MiB, device id 0x220410DE) appear in
# another public `nvidia-smi -q` of an "NVIDIA GeForce RTX 3090" (driver 520.61.05) whose
# repository we could not name. UUIDs, bus ids and the VBIOS string are made up.
_RTX3090 = {
    "name": "NVIDIA GeForce RTX 3090",
    "uuid": None,  # filled per GPU
    "serial": None,
    "pci_bus_id": None,
    "pci_device_id": "0x220410DE",
    "pci_sub_device_id": "0x38801028",
    "vbios_version": "94.02.59.00.D6",
    "compute_cap": "8.6",
    "persistence_mode": "Disabled",
    "power_management": "Enabled",
    "power_limit_w": 350.0,
    "enforced_cap_w": None,
    "default_limit_w": 350.0,
    "min_limit_w": 100.0,
    "max_limit_w": 350.0,
    "idle_power_w": 22.0,
    "memory_power_w": None,
    "memory_total_mib": 24576,
    "memory_reserved_mib": 316,
    "memory_used_mib": 1,
    "utilization_gpu": 0,
    "utilization_memory": 0,
    "temperature_gpu": 35,
    "temperature_memory": None,
    "fan_speed": 30,
    "pstate": "P8",
    "clocks_gr": 210,
    "clocks_sm": 210,
    "clocks_mem": 405,
    "clocks_video": 555,
    "clocks_max_gr": 2100,
    "clocks_max_sm": 2100,
    "clocks_max_mem": 9751,
    "clocks_max_video": 1950,
    "pcie_gen": 4,
    "pcie_width": 16,
    "display_active": "Disabled",
    "ecc_mode": None,
    "ecc_errors": "N/A",
    "mig_mode": None,
    "compute_mode": "Default",
    # clock event reasons, idle as the H200 capture shows them
    "event_sw_power_cap": "Not Active",
    "event_hw_slowdown": "Not Active",
    "event_sw_thermal_slowdown": "Not Active",
    "event_hw_thermal_slowdown": "Not Active",
    # `topo -m` columns as in the public 2-card PHB capture (tests/fixtures/nvidia-smi/topo/rtx5090x2-phb.txt)
    "cpu_affinity": "0-63",
    "numa_affinity": "0",
}

_BOX = {"driver_version": "580.159.04", "nvml_version": "580.159", "cuda_version": "13.0"}


def _rtx(index):
    gpu = dict(_RTX3090)
    gpu["uuid"] = "GPU-3090a0%02d-7e57-4d0b-8e00-00000000%04d" % (index, index)
    gpu["pci_bus_id"] = "00000000:%02X:00.0" % (index + 1)
    return gpu


def profile_state(profile):
    if profile == "h200":
        gpus = [dict(_H200)]
    elif profile == "rtx3090x2":
        gpus = [_rtx(0), _rtx(1)]
    elif profile == "rtx3090x1":
        gpus = [_rtx(0)]
    else:
        return None
    for i, gpu in enumerate(gpus):
        gpu["index"] = i
    state = {"version": 1, "profile": profile, "fault": "none", "slow_seconds": 3, "link": DEFAULT_LINK}
    state.update(_BOX)
    state["gpus"] = gpus
    return state


PROFILES = ("h200", "rtx3090x2", "rtx3090x1")
# What `topo -m` shows between two GPUs unless --mock-set link=... says otherwise.
DEFAULT_LINK = "PHB"
LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# ---------------------------------------------------------------- state file


def state_path():
    return os.environ.get(STATE_ENV) or DEFAULT_STATE


def load_state():
    try:
        with open(state_path(), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def save_state(state):
    path = state_path()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class StateLock:
    """An exclusive lock beside the state file for read-modify-write changes (root only)."""

    def __init__(self):
        self.handle = None

    def __enter__(self):
        path = state_path() + ".lock"
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
        self.handle = open(path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


# ---------------------------------------------------------------- simulated live values


def _cpu_times():
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            parts = handle.readline().split()
    except OSError:
        return None
    values = [int(v) for v in parts[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values), idle


class Load:
    """The host's CPU busy fraction between two /proc/stat readings."""

    def __init__(self):
        self.last = None

    def busy(self):
        now = _cpu_times()
        if now is None:
            return 0.0
        if self.last is None:
            time.sleep(0.05)
            self.last, now = now, _cpu_times()
        total = now[0] - self.last[0]
        idle = now[1] - self.last[1]
        self.last = now
        if total <= 0:
            return 0.0
        return min(1.0, max(0.0, (total - idle) / total))


def enforced_limit(gpu):
    cap = gpu.get("enforced_cap_w")
    limit = gpu["power_limit_w"]
    return limit if cap is None else min(limit, float(cap))


def power_draw(gpu, busy):
    enforced = enforced_limit(gpu)
    idle = min(gpu["idle_power_w"], enforced)
    load = (enforced - idle) * busy
    value = idle + load * random.uniform(0.97, 1.0) + random.uniform(-0.04, 0.04)
    return round(max(0.0, min(enforced, value)), 2)


def timestamp(now=None):
    now = now or datetime.datetime.now()
    return now.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (now.microsecond // 1000)


def ctime_stamp(now=None):
    now = now or datetime.datetime.now()
    return now.strftime("%a %b ") + "%2d" % now.day + now.strftime(" %H:%M:%S %Y")


# ---------------------------------------------------------------- --query-gpu fields
# (canonical name, aliases, unit, getter). The header shows the canonical name plus the unit,
# e.g. clocks.sm -> "clocks.current.sm [MHz]" (names from nvidia-smi --help-query-gpu).
W, MIB, PCT, MHZ = "W", "MiB", "%", "MHz"


def _g(key):
    return lambda ctx, gpu: gpu.get(key)


def _reason(name):
    return lambda ctx, gpu: gpu.get("event_" + name) or "Not Active"


def _mem_free(ctx, gpu):
    return max(0, gpu["memory_total_mib"] - gpu["memory_reserved_mib"] - gpu["memory_used_mib"])


def _hexbyte(pos):
    def getter(ctx, gpu):
        domain, bus, devfn = gpu["pci_bus_id"].split(":")
        return {"domain": "0x" + domain[-4:], "bus": "0x" + bus, "device": "0x" + devfn.split(".")[0]}[pos]
    return getter


FIELDS = [
    ("timestamp", (), None, lambda ctx, gpu: ctx["timestamp"]),
    ("driver_version", (), None, lambda ctx, gpu: ctx["state"]["driver_version"]),
    ("count", (), None, lambda ctx, gpu: len(ctx["state"]["gpus"])),
    ("name", ("gpu_name",), None, _g("name")),
    ("serial", ("gpu_serial",), None, _g("serial")),
    ("uuid", ("gpu_uuid",), None, _g("uuid")),
    ("pci.bus_id", ("gpu_bus_id",), None, _g("pci_bus_id")),
    ("pci.domain", (), None, _hexbyte("domain")),
    ("pci.bus", (), None, _hexbyte("bus")),
    ("pci.device", (), None, _hexbyte("device")),
    ("pci.device_id", (), None, _g("pci_device_id")),
    ("pci.sub_device_id", (), None, _g("pci_sub_device_id")),
    ("pcie.link.gen.current", (), None, _g("pcie_gen")),
    ("pcie.link.gen.gpucurrent", (), None, _g("pcie_gen")),
    ("pcie.link.gen.max", (), None, _g("pcie_gen")),
    ("pcie.link.width.current", (), None, _g("pcie_width")),
    ("pcie.link.width.max", (), None, _g("pcie_width")),
    ("index", (), None, _g("index")),
    ("display_active", (), None, _g("display_active")),
    ("persistence_mode", (), None, _g("persistence_mode")),
    ("vbios_version", (), None, _g("vbios_version")),
    ("fan.speed", (), PCT, _g("fan_speed")),
    ("pstate", (), None, _g("pstate")),
    ("memory.total", (), MIB, _g("memory_total_mib")),
    ("memory.reserved", (), MIB, _g("memory_reserved_mib")),
    ("memory.used", (), MIB, _g("memory_used_mib")),
    ("memory.free", (), MIB, _mem_free),
    ("compute_mode", (), None, _g("compute_mode")),
    ("compute_cap", (), None, _g("compute_cap")),
    ("utilization.gpu", (), PCT, _g("utilization_gpu")),
    ("utilization.memory", (), PCT, _g("utilization_memory")),
    ("ecc.mode.current", (), None, _g("ecc_mode")),
    ("temperature.gpu", (), None, _g("temperature_gpu")),
    ("temperature.memory", (), None, _g("temperature_memory")),
    ("power.management", (), None, _g("power_management")),
    ("power.draw", (), W, lambda ctx, gpu: ctx["draw"][gpu["index"]]),
    ("power.draw.average", ("gpu.power.draw.average",), W, lambda ctx, gpu: ctx["draw"][gpu["index"]]),
    ("power.draw.instant", ("gpu.power.draw.instant",), W, lambda ctx, gpu: ctx["draw"][gpu["index"]]),
    ("power.limit", ("gpu.power.requested_limit",), W, _g("power_limit_w")),
    ("enforced.power.limit", ("gpu.power.current_limit",), W, lambda ctx, gpu: enforced_limit(gpu)),
    ("power.default_limit", ("gpu.power.default_limit",), W, _g("default_limit_w")),
    ("power.min_limit", ("gpu.power.min_limit",), W, _g("min_limit_w")),
    ("power.max_limit", ("gpu.power.max_limit",), W, _g("max_limit_w")),
    ("clocks.current.graphics", ("clocks.gr",), MHZ, _g("clocks_gr")),
    ("clocks.current.sm", ("clocks.sm",), MHZ, _g("clocks_sm")),
    ("clocks.current.memory", ("clocks.mem",), MHZ, _g("clocks_mem")),
    ("clocks.current.video", ("clocks.video",), MHZ, _g("clocks_video")),
    ("clocks.max.graphics", ("clocks.max.gr",), MHZ, _g("clocks_max_gr")),
    ("clocks.max.sm", (), MHZ, _g("clocks_max_sm")),
    ("clocks.max.memory", ("clocks.max.mem",), MHZ, _g("clocks_max_mem")),
    ("mig.mode.current", (), None, _g("mig_mode")),
    # Clock event reasons as the real driver prints them ("Active" / "Not Active", the H200 capture's help lists both
    # names); gpuN.event_<reason>=Active turns one on (the monitoring's thermal alert), unknown_fields hides the new names.
    ("clocks_event_reasons.sw_power_cap", ("clocks_throttle_reasons.sw_power_cap",), None, _reason("sw_power_cap")),
    ("clocks_event_reasons.hw_slowdown", ("clocks_throttle_reasons.hw_slowdown",), None, _reason("hw_slowdown")),
    ("clocks_event_reasons.sw_thermal_slowdown", ("clocks_throttle_reasons.sw_thermal_slowdown",), None,
     _reason("sw_thermal_slowdown")),
    ("clocks_event_reasons.hw_thermal_slowdown", ("clocks_throttle_reasons.hw_thermal_slowdown",), None,
     _reason("hw_thermal_slowdown")),
]
FIELD_INDEX = {}
for _entry in FIELDS:
    for _name in (_entry[0],) + _entry[1]:
        FIELD_INDEX[_name] = _entry

COMPUTE_APP_FIELDS = {
    "pid": "pid",
    "process_name": "process_name",
    "name": "process_name",
    "used_memory": "used_gpu_memory [MiB]",
    "used_gpu_memory": "used_gpu_memory [MiB]",
    "gpu_uuid": "gpu_uuid",
    "gpu_bus_id": "gpu_bus_id",
    "gpu_name": "gpu_name",
}


def format_value(value, unit, nounits):
    if value is None:
        return "[N/A]"
    if isinstance(value, float) or unit == W:
        text = "%.2f" % float(value)
    else:
        text = str(value)
    if unit and not nounits:
        text += " " + unit
    return text


# ---------------------------------------------------------------- argument parsing


class UsageError(Exception):
    pass


# option -> (destination, takes a value)
OPTIONS = {
    "-h": ("help", False), "--help": ("help", False),
    "--version": ("version", False),
    "-L": ("list", False), "--list-gpus": ("list", False),
    "-q": ("query", False), "--query": ("query", False),
    "-d": ("display", True), "--display": ("display", True),
    "-i": ("ids", True), "--id": ("ids", True),
    "--query-gpu": ("query_gpu", True),
    "--query-compute-apps": ("query_apps", True),
    "--format": ("format", True),
    "-l": ("loop_s", True), "--loop": ("loop_s", True),
    "-lms": ("loop_ms", True), "--loop-ms": ("loop_ms", True),
    "-pl": ("power_limit", True), "--power-limit": ("power_limit", True),
    "-pm": ("persistence", True), "--persistence-mode": ("persistence", True),
    "topo": ("topo", False),
    "-m": ("matrix", False), "--matrix": ("matrix", False),
    "--mock-init": ("mock_init", True),
    "--mock-set": ("mock_set", True),
    "--mock-show": ("mock_show", False),
    "--mock-count": ("mock_count", True),
}


def parse_args(argv):
    opts = {"mock_set": []}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        if name not in OPTIONS:
            raise UsageError(arg)
        dest, takes = OPTIONS[name]
        if takes:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise UsageError(arg)
                value = argv[i]
            if dest == "mock_set":
                opts["mock_set"].append(value)
            else:
                opts[dest] = value
        elif value is not None:
            raise UsageError(arg)
        else:
            opts[dest] = True
        i += 1
    return opts


# ---------------------------------------------------------------- commands


class Out:
    def __init__(self):
        self.stdout = sys.stdout

    def write(self, text):
        self.stdout.write(text)


def select_gpus(state, ids):
    gpus = state["gpus"]
    if ids is None:
        return list(gpus)
    chosen = []
    for ident in ids.split(","):
        ident = ident.strip()
        match = None
        for gpu in gpus:
            bus = gpu["pci_bus_id"]
            if ident == str(gpu["index"]) or ident == gpu["uuid"] or ident.upper() in (bus, bus[4:]):
                match = gpu
        if match is None:
            return None
        if match not in chosen:
            chosen.append(match)
    return chosen


def cmd_list(state, gpus, out):
    for gpu in gpus:
        out.write(MESSAGES["list_gpu"].format(index=gpu["index"], name=gpu["name"], uuid=gpu["uuid"]))
    return RC_OK


def parse_format(text):
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if "csv" not in parts or any(p not in ("csv", "noheader", "nounits") for p in parts):
        raise UsageError("--format=" + (text or ""))
    return "noheader" in parts, "nounits" in parts


def cmd_query_gpu(state, gpus, opts, out):
    if "format" not in opts:
        out.write(MESSAGES["missing_format"])
        return RC_INVALID
    noheader, nounits = parse_format(opts["format"])
    names = [f.strip() for f in opts["query_gpu"].split(",") if f.strip()]
    entries = []
    unknown = state.get("unknown_fields") or []
    for name in names:
        if name not in FIELD_INDEX or name in unknown:
            out.write(MESSAGES["bad_field"].format(field=name))
            return RC_INVALID
        entries.append(FIELD_INDEX[name])
    interval = None
    if "loop_ms" in opts:
        interval = int(opts["loop_ms"]) / 1000.0
    elif "loop_s" in opts:
        interval = float(int(opts["loop_s"]))
    if interval is not None and interval <= 0:
        raise UsageError("loop interval")
    count = int(opts["mock_count"]) if "mock_count" in opts else None
    needs_draw = any(e[0].startswith("power.draw") for e in entries)
    load = Load()
    if not noheader:
        out.write(", ".join(e[0] + (" [%s]" % e[2] if e[2] else "") for e in entries) + "\n")
    rounds = 0
    start = None
    while True:
        busy = load.busy() if needs_draw else 0.0
        if start is None:
            start = time.monotonic()
        ctx = {
            "state": state,
            "timestamp": timestamp(),
            "draw": {g["index"]: power_draw(g, busy) for g in gpus},
        }
        for gpu in gpus:
            row = [format_value(e[3](ctx, gpu), e[2], nounits) for e in entries]
            out.write(", ".join(row) + "\n")
        out.stdout.flush()
        rounds += 1
        if interval is None or (count is not None and rounds >= count):
            return RC_OK
        delay = start + rounds * interval - time.monotonic()
        time.sleep(max(0.0, delay))


def cmd_query_apps(state, opts, out):
    if "format" not in opts:
        out.write(MESSAGES["missing_format"])
        return RC_INVALID
    noheader, _nounits = parse_format(opts["format"])
    headers = []
    for name in [f.strip() for f in opts["query_apps"].split(",") if f.strip()]:
        if name not in COMPUTE_APP_FIELDS:
            out.write(MESSAGES["bad_field"].format(field=name))
            return RC_INVALID
        headers.append(COMPUTE_APP_FIELDS[name])
    if not noheader:
        out.write(", ".join(headers) + "\n")
    return RC_OK


def _w(value):
    return "N/A" if value is None else "%.2f W" % value


def cmd_query_power(state, gpus, out):
    label = "{:<55}: {}\n"
    subsub = "        {:<47}: {}\n"
    out.write("\n==============NVSMI LOG==============\n\n")
    out.write(label.format("Timestamp", ctime_stamp()))
    out.write(label.format("Driver Version", state["driver_version"]))
    out.write(label.format("CUDA Version", state["cuda_version"]))
    out.write("\n")
    out.write(label.format("Attached GPUs", len(state["gpus"])))
    busy = Load().busy()
    for gpu in gpus:
        draw = power_draw(gpu, busy)
        avg = round(min(enforced_limit(gpu), draw * random.uniform(1.0, 1.05)), 2)
        spread = max(0.5, draw * 0.02)
        out.write("GPU %s\n" % gpu["pci_bus_id"])
        out.write("    GPU Power Readings\n")
        out.write(subsub.format("Average Power Draw", _w(avg)))
        out.write(subsub.format("Instantaneous Power Draw", _w(draw)))
        out.write(subsub.format("Current Power Limit", _w(enforced_limit(gpu))))
        out.write(subsub.format("Requested Power Limit", _w(gpu["power_limit_w"])))
        out.write(subsub.format("Default Power Limit", _w(gpu["default_limit_w"])))
        out.write(subsub.format("Min Power Limit", _w(gpu["min_limit_w"])))
        out.write(subsub.format("Max Power Limit", _w(gpu["max_limit_w"])))
        out.write("    Power Samples\n")
        out.write(subsub.format("Duration", "%.2f sec" % random.uniform(2.0, 2.5)))
        out.write(subsub.format("Number of Samples", 119))
        out.write(subsub.format("Max", _w(round(min(enforced_limit(gpu), draw + spread), 2))))
        out.write(subsub.format("Min", _w(round(max(0.0, draw - spread / 4), 2))))
        out.write(subsub.format("Avg", _w(avg)))
        out.write("    GPU Memory Power Readings \n")
        out.write(subsub.format("Average Power Draw", _w(gpu.get("memory_power_w"))))
        out.write(subsub.format("Instantaneous Power Draw", "N/A"))
        out.write("    Module Power Readings\n")
        for key in ("Average Power Draw", "Instantaneous Power Draw", "Current Power Limit",
                    "Requested Power Limit", "Default Power Limit", "Min Power Limit", "Max Power Limit"):
            out.write(subsub.format(key, "N/A"))
    out.write("\n")
    return RC_OK


def cmd_summary(state, gpus, out):
    edge = "+" + "-" * 89 + "+\n"
    cols = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+\n"
    out.write(ctime_stamp() + "       \n")
    out.write(edge)
    out.write("| NVIDIA-SMI {:<23}Driver Version: {:<15}CUDA Version: {:<9}|\n".format(
        state["driver_version"], state["driver_version"], state["cuda_version"]))
    out.write(cols)
    out.write("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n")
    out.write("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n")
    out.write("|                                         |                        |               MIG M. |\n")
    out.write("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|\n")
    busy = Load().busy()
    for n, gpu in enumerate(gpus):
        name = gpu["name"] if len(gpu["name"]) <= 27 else gpu["name"][:23] + " ..."
        pm = "On" if gpu["persistence_mode"] == "Enabled" else "Off"
        disp = "On" if gpu["display_active"] == "Enabled" else "Off"
        ecc = "N/A" if gpu["ecc_mode"] is None else gpu["ecc_errors"]
        fan = "N/A" if gpu["fan_speed"] is None else "%d%%" % gpu["fan_speed"]
        usage = "%dW" % round(power_draw(gpu, busy))
        mig = "N/A" if gpu["mig_mode"] is None else gpu["mig_mode"]
        out.write("| {:>3}  {:<27}    {:<3} |   {} {:>3} | {:>20} |\n".format(
            gpu["index"], name, pm, gpu["pci_bus_id"], disp, ecc))
        out.write("| {:>3}  {:>3}C    {:>2}  {:>14} / {:>4}W |{:>8}MiB / {:>6}MiB |{:>7}%{:>13} |\n".format(
            fan, gpu["temperature_gpu"], gpu["pstate"], usage, round(enforced_limit(gpu)),
            gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["utilization_gpu"], gpu["compute_mode"]))
        out.write("|                                         |                        | {:>20} |\n".format(mig))
        if n == len(gpus) - 1:
            out.write(cols)
        else:
            out.write("+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+\n")
    out.write("\n")
    out.write(edge)
    out.write("| Processes:" + " " * 78 + "|\n")
    out.write("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n")
    out.write("|        ID   ID                                                               Usage      |\n")
    out.write("|" + "=" * 89 + "|\n")
    out.write("|  No running processes found" + " " * 61 + "|\n")
    out.write(edge)
    return RC_OK


def cmd_topo(state, out):
    """`topo -m`: header, one row a GPU (X on the diagonal, the state's link elsewhere), legend."""
    link = state.get("link", DEFAULT_LINK)
    if link == "none":
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID
    gpus = state["gpus"]
    names = ["GPU%d" % g["index"] for g in gpus]
    out.write("\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\n")
    for gpu in gpus:
        cells = [" X " if peer["index"] == gpu["index"] else link for peer in gpus]
        affinity = [gpu.get("cpu_affinity") or "N/A", gpu.get("numa_affinity") or "N/A"]
        out.write("\t".join(["GPU%d" % gpu["index"]] + cells + affinity) + "\t\tN/A\n")
    out.write("\n" + MESSAGES["topo_legend"])
    return RC_OK


def is_root():
    return os.geteuid() == 0


def cmd_power_limit(state, gpus, value, out):
    try:
        watts = float(value)
    except ValueError:
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID
    fault = state.get("fault", "none")
    changed = False
    rc = RC_OK
    for gpu in gpus:
        bus = gpu["pci_bus_id"]
        if fault == "pl_unsupported" or gpu.get("power_management") != "Enabled":
            out.write(MESSAGES["pl_unsupported"].format(bus=bus))
            continue
        if not gpu["min_limit_w"] <= watts <= gpu["max_limit_w"]:
            out.write(MESSAGES["pl_range"].format(value=watts, min=gpu["min_limit_w"],
                                                  max=gpu["max_limit_w"], bus=bus))
            rc = RC_INVALID
            break
        if not is_root() or fault == "pl_permission":
            out.write(MESSAGES["pl_permission"].format(bus=bus))
            rc = RC_NO_PERMISSION
            break
        old = gpu["power_limit_w"]
        gpu["power_limit_w"] = watts
        changed = True
        out.write(MESSAGES["pl_set"].format(bus=bus, new=watts, old=old))
    if changed:
        save_state(state)
    if rc != RC_OK:
        out.write(MESSAGES["terminating"])
        return rc
    out.write(MESSAGES["all_done"])
    return RC_OK


def cmd_persistence(state, gpus, value, out):
    wanted = {"0": "Disabled", "DISABLED": "Disabled", "1": "Enabled", "ENABLED": "Enabled"}.get(value.upper())
    if wanted is None:
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID
    changed = False
    for gpu in gpus:
        bus = gpu["pci_bus_id"]
        if not is_root():
            out.write(MESSAGES["pm_permission"].format(bus=bus))
            out.write(MESSAGES["terminating"])
            return RC_NO_PERMISSION
        if gpu["persistence_mode"] == wanted:
            out.write(MESSAGES["pm_already"].format(mode=wanted, bus=bus))
            continue
        gpu["persistence_mode"] = wanted
        changed = True
        out.write(MESSAGES["pm_enabled" if wanted == "Enabled" else "pm_disabled"].format(bus=bus))
    if changed:
        save_state(state)
    out.write(MESSAGES["all_done"])
    return RC_OK


def _parse_set_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_mock_set(items):
    if not is_root():
        sys.stderr.write(MESSAGES["mock_needs_root"])
        return RC_NO_PERMISSION
    with StateLock():
        state = load_state()
        if state is None:
            sys.stderr.write(MESSAGES["mock_no_state"].format(path=state_path()))
            return RC_DRIVER
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="use KEY=VALUE"))
                return RC_INVALID
            if key == "fault":
                if value not in FAULTS:
                    sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="fault is one of " + "|".join(FAULTS)))
                    return RC_INVALID
                state["fault"] = value
            elif key == "slow_seconds":
                try:
                    state["slow_seconds"] = float(value)
                except ValueError:
                    sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="a number of seconds"))
                    return RC_INVALID
            elif key == "link":
                if value not in LINKS + ("none",) and not re.match(r"^NV[1-9][0-9]?$", value):
                    sys.stderr.write(MESSAGES["mock_bad_set"].format(
                        item=item, why="link is one of %s, NV1-NV99 or none" % "|".join(LINKS)))
                    return RC_INVALID
                state["link"] = value
            elif key == "unknown_fields":
                fields = _parse_set_value(value)
                if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
                    sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="a JSON list of field names"))
                    return RC_INVALID
                state["unknown_fields"] = fields
            elif key.startswith("gpu") and "." in key:
                prefix, field = key.split(".", 1)
                gpus = [g for g in state["gpus"] if "gpu%d" % g["index"] == prefix]
                if not gpus or field not in gpus[0] or field == "index":
                    sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="no such GPU or field"))
                    return RC_INVALID
                gpus[0][field] = _parse_set_value(value)
            else:
                sys.stderr.write(MESSAGES["mock_bad_set"].format(item=item, why="unknown key"))
                return RC_INVALID
        save_state(state)
    return RC_OK


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    out = Out()
    try:
        opts = parse_args(argv)
    except UsageError:
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID

    if "mock_init" in opts:
        state = profile_state(opts["mock_init"])
        if state is None:
            sys.stderr.write(MESSAGES["mock_bad_profile"].format(profile=opts["mock_init"], choices=", ".join(PROFILES)))
            return RC_INVALID
        with StateLock():
            save_state(state)
        return RC_OK
    if opts["mock_set"]:
        return cmd_mock_set(opts["mock_set"])

    state = load_state()
    if state is None:
        sys.stderr.write(MESSAGES["mock_no_state"].format(path=state_path()))
        out.write(MESSAGES["driver_fail"])
        return RC_DRIVER
    if opts.get("mock_show"):
        out.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
        return RC_OK

    fault = state.get("fault", "none")
    if fault == "slow":
        time.sleep(float(state.get("slow_seconds", 3)))
    if fault == "fail":
        out.write(MESSAGES["driver_fail"])
        return RC_DRIVER
    if opts.get("help"):
        out.write(MESSAGES["usage"].format(driver=state["driver_version"]))
        return RC_OK
    if opts.get("version"):
        out.write(MESSAGES["version"].format(driver=state["driver_version"], nvml=state["nvml_version"],
                                             cuda=state["cuda_version"]))
        return RC_OK
    if fault == "no_devices" or not state["gpus"]:
        out.write(MESSAGES["no_devices"])
        return RC_NOT_FOUND

    gpus = select_gpus(state, opts.get("ids"))
    if gpus is None:
        out.write(MESSAGES["no_devices"])
        return RC_NOT_FOUND

    if opts.get("topo"):
        if not opts.get("matrix") or set(opts) - {"mock_set", "topo", "matrix"}:
            out.write(MESSAGES["invalid_args"])
            return RC_INVALID
        return cmd_topo(state, out)
    if opts.get("matrix"):
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID
    actions = [k for k in ("list", "query", "query_gpu", "query_apps", "power_limit", "persistence") if k in opts]
    looping = "loop_ms" in opts or "loop_s" in opts
    if len(actions) > 1 or (looping and actions != ["query_gpu"]):
        out.write(MESSAGES["invalid_args"])
        return RC_INVALID
    action = actions[0] if actions else "summary"
    if action == "list":
        return cmd_list(state, gpus, out)
    if action == "query_gpu":
        return cmd_query_gpu(state, gpus, opts, out)
    if action == "query_apps":
        return cmd_query_apps(state, opts, out)
    if action == "query":
        return cmd_query_power(state, gpus, out)
    if action in ("power_limit", "persistence"):
        with StateLock() if is_root() else _NoLock():
            if is_root():
                state = load_state()
                gpus = select_gpus(state, opts.get("ids"))
            if action == "power_limit":
                return cmd_power_limit(state, gpus, opts["power_limit"], out)
            return cmd_persistence(state, gpus, opts["persistence"], out)
    return cmd_summary(state, gpus, out)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _entry():
    try:
        code = main()
        sys.stdout.flush()
    except UsageError:
        sys.stdout.write(MESSAGES["invalid_args"])
        code = RC_INVALID
    except KeyboardInterrupt:
        code = 0
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    _entry()
