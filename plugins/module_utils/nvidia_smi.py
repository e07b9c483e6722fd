# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place where this collection builds nvidia-smi command lines and parses their output.

Works inside an Ansible module (``runner=module.run_command``) and standalone (``subprocess``,
for benchmark scripts); it needs nothing but the Python standard library and never imports
AnsibleModule.

    smi = NvidiaSmi("/usr/bin/nvidia-smi", runner=module.run_command)
    smi.gpu_info()                      # list of fact dicts, see GPU_INFO_FIELDS
    smi.query(["index", "power.draw"])  # [{"index": 0, "power.draw": 80.75}]
    smi.topology()                      # parse_topology() of ``nvidia-smi topo -m``
    read_topology(smi, gpu_count=2)     # topology_facts(), or why there are none; never raises
    with smi.sampler(interval_ms=200) as sampler:
        ...                             # load
    sampler.summary()                   # {"0": {"mean_w", "max_w", "samples", "energy_j", ...}}
"""
from __future__ import annotations

import csv
import datetime
import re
import subprocess
import threading
import time

__all__ = [
    "GPU_INFO_FIELDS",
    "LevelPower",
    "NvidiaSmi",
    "NvidiaSmiError",
    "PowerSampler",
    "TOPOLOGY_LINKS",
    "link_description",
    "link_kind",
    "link_rank",
    "no_topology",
    "parse_csv",
    "parse_topology",
    "parse_value",
    "parse_timestamp",
    "power_draw_field",
    "power_source",
    "read_topology",
    "summarize",
    "topology_facts",
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
# The power fields, best first: the instant reading where the driver has it, else the 1 s average.
POWER_DRAW_INSTANT = "power.draw.instant"
POWER_DRAW_AVERAGE = "power.draw"
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
            raise NvidiaSmiError(self._describe(args, rc, out, err), rc=rc, stdout=out, stderr=err)
        return rc, out, err

    @staticmethod
    def _describe(args, rc, out, err):
        text = " / ".join(t.strip().replace("\n", " / ") for t in (out, err) if t and t.strip())
        if rc == RC_NO_DEVICES or NO_DEVICES in out + err:
            what = "nvidia-smi reports no GPUs"
        elif rc == RC_DRIVER:
            what = "nvidia-smi cannot talk to the NVIDIA driver"
        else:
            what = "nvidia-smi failed"
        return "%s (rc=%s, command: %s): %s" % (what, rc, " ".join(args), text or "no output")

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

    def topology(self):
        """``nvidia-smi topo -m`` -> parse_topology() of its output (NvidiaSmiError when it fails)."""
        args = self.topology_cmd()
        _rc, out, _err = self.run(args)
        try:
            return parse_topology(out)
        except ValueError as exc:
            raise NvidiaSmiError("unexpected output of %s: %s" % (" ".join(args), exc), stdout=out) from exc

    def set_power_limit(self, watts, gpus=None):
        return self.run(self.power_limit_cmd(watts, gpus))

    def set_persistence_mode(self, enabled, gpus=None):
        return self.run(self.persistence_mode_cmd(enabled, gpus))

    def sampler(self, fields=None, interval_ms=200, gpus=None):
        return PowerSampler(self, fields=fields, interval_ms=interval_ms, gpus=gpus)


class PowerSampler:
    """Reads ``nvidia-smi --query-gpu=timestamp,index,power.draw ... -lms N`` in a thread.

    ``start()`` launches it, ``stop()`` ends it and returns the samples (dicts of the fields,
    plus ``t``: seconds since the epoch from the row's timestamp, or the time it was read),
    ``summary()`` gives per GPU (keyed by the index as a string, as it reads in JSON):
    ``mean_w``, ``max_w``, ``min_w``, ``samples``, ``duration_s`` and ``energy_j`` (trapezoid
    rule over the timestamps). Rows with an unavailable power value are kept but not counted.
    ``error`` holds a message when nvidia-smi ended by itself with an error.
    """

    REQUIRED = ("timestamp", "index")

    def __init__(self, smi, fields=None, interval_ms=200, gpus=None, popen=subprocess.Popen,
                 power_field=POWER_DRAW_AVERAGE):
        fields = list(fields or ())
        required = list(self.REQUIRED) + [power_field]
        self.power_field = power_field
        self.fields = required + [f for f in fields if f not in required]
        self.smi = smi
        self.interval_ms = int(interval_ms)
        self.gpus = gpus
        self.popen = popen
        self.samples = []
        self.error = None
        self._proc = None
        self._thread = None
        self._stderr = ""
        self._lock = threading.Lock()

    @property
    def command(self):
        return self.smi.query_cmd(self.fields, self.gpus, loop_ms=self.interval_ms)

    def start(self):
        if self._proc is not None:
            raise NvidiaSmiError("power sampler already started")
        try:
            self._proc = self.popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            )
        except OSError as exc:
            raise NvidiaSmiError("nvidia-smi cannot be started: %s (%s)" % (self.smi.path, exc)) from exc
        self._thread = threading.Thread(target=self._read, name="nvidia-smi-power-sampler", daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            if not line.strip():
                continue
            try:
                row = parse_csv(line, self.fields)[0]
            except NvidiaSmiError:
                # an error message instead of a row: keep it for the report
                self._stderr += line
                continue
            stamp = parse_timestamp(row["timestamp"]) if isinstance(row["timestamp"], str) else None
            row["t"] = stamp if stamp is not None else time.time()
            with self._lock:
                self.samples.append(row)

    def stop(self, timeout=5.0):
        """Stop nvidia-smi (terminate, then kill) and return the samples."""
        proc = self._proc
        if proc is None:
            return []
        rc = proc.poll()
        if rc is None and self._thread is not None and not self._thread.is_alive():
            # The reader saw EOF: nvidia-smi is exiting on its own; reap it for its status.
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
        if rc is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        elif rc != 0:
            err = ""
            if proc.stderr is not None:
                err = proc.stderr.read() or ""
            self.error = NvidiaSmi._describe(self.command, rc, self._stderr, err)
        if self._thread is not None:
            self._thread.join(timeout)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        with self._lock:
            return list(self.samples)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def summary(self, window=None):
        with self._lock:
            samples = list(self.samples)
        return summarize(samples, self.power_field, window)


def _gpu_key(index):
    return (0, int(index), "") if index.isdigit() else (1, 0, index)


def summarize(samples, field=POWER_DRAW_AVERAGE, window=None):
    """Per-GPU power statistics of sampler rows (see PowerSampler), keyed by the index as a string.

    Without ``window``: ``mean_w`` is the mean of the samples, ``energy_j`` the trapezoid between
    the first and the last sample, ``duration_s`` their span.

    With ``window`` = (t0, t1) (seconds since the epoch, the load's first request sent and its last
    stream end): only the samples inside it count. ``energy_j`` is the integral over the whole
    window of the line through those samples (trapezoids between them; before the first and after
    the last one their value is held to the window's edges), ``duration_s`` the window and
    ``mean_w`` = energy_j / duration_s (the time-weighted mean). A GPU with no sample inside the
    window gets ``samples`` 0 and null figures.
    """
    per_gpu = {}
    for row in samples:
        if row.get("index") is None:
            continue
        points = per_gpu.setdefault(str(row["index"]), [])
        value = row.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(row.get("t"), (int, float)):
            points.append((float(row["t"]), float(value)))
    result = {}
    for index in sorted(per_gpu, key=_gpu_key):
        points = sorted(per_gpu[index])
        if window is not None:
            start, end = float(window[0]), float(window[1])
            points = [p for p in points if start <= p[0] <= end]
        if not points:
            if window is not None:
                result[index] = {"mean_w": None, "max_w": None, "min_w": None, "samples": 0,
                                 "duration_s": round(max(0.0, end - start), 3), "energy_j": None}
            continue
        watts = [p[1] for p in points]
        energy = 0.0
        for (t0, p0), (t1, p1) in zip(points, points[1:]):
            energy += (t1 - t0) * (p0 + p1) / 2.0
        if window is None:
            duration = points[-1][0] - points[0][0]
            mean = sum(watts) / len(watts)
        else:
            energy += (points[0][0] - start) * points[0][1] + (end - points[-1][0]) * points[-1][1]
            duration = end - start
            mean = energy / duration if duration > 0 else watts[0]
        result[index] = {
            "mean_w": round(mean, 3),
            "max_w": max(watts),
            "min_w": min(watts),
            "samples": len(watts),
            "duration_s": round(duration, 3),
            "energy_j": round(energy, 3),
        }
    return result


# Fields sampled beside the power reading during a load level (LevelPower).
EXTRA_POWER_FIELDS = ["enforced.power.limit", "clocks.sm"]
FIRST_SAMPLE_WAIT_S = 3.0


class LevelPower:
    """Wraps a PowerSampler for one load level; never raises (failures go to ``error``).

    ``start()``/``stop()`` run around the load (vllm_http.run_streams calls them), then
    ``figures(level, window)`` adds the power figures of the load window to the level's dict.
    """

    def __init__(self, smi, interval_ms, field, gpus=None):
        self.smi = smi
        self.interval_ms = interval_ms
        self.field = field
        self.gpus = gpus or None
        self.sampler = None
        self.rows = []
        self.error = None

    def start(self):
        try:
            self.sampler = PowerSampler(self.smi, EXTRA_POWER_FIELDS, interval_ms=self.interval_ms,
                                        gpus=self.gpus, power_field=self.field)
            self.sampler.start()
        except NvidiaSmiError as exc:
            self.error = exc.msg
            self.sampler = None
            return
        # nvidia-smi takes a moment to print its first row: let the load start only then, so a
        # short level is covered from its start (wait at most FIRST_SAMPLE_WAIT_S)
        end = time.monotonic() + FIRST_SAMPLE_WAIT_S
        while not self.sampler.samples and time.monotonic() < end and self.sampler.error is None:
            proc = getattr(self.sampler, "_proc", None)
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.01)

    def stop(self):
        if self.sampler is None:
            return
        try:
            self.rows = self.sampler.stop()
        except NvidiaSmiError as exc:
            self.error = exc.msg
        if self.sampler.error and not self.error:
            self.error = self.sampler.error

    def figures(self, level, window):
        """Add power, power_w, energy_j, j_per_token, tps_per_w to the level dict.

        ``window``: (first request sent, last stream end) of the level in perf_counter seconds
        (vllm_stats.load_window), or None. Only the samples inside it count; energy_j is the
        integral over that window (see summarize).
        """
        if window is not None:
            # perf_counter -> seconds since the epoch (nvidia-smi's timestamps)
            offset = time.time() - time.perf_counter()
            window = (window[0] + offset, window[1] + offset)
            level["power_window_s"] = round(window[1] - window[0], 3)
        summary = self.sampler.summary(window) if self.sampler is not None and window is not None else {}
        if not summary:
            if self.error is None:
                self.error = "nvidia-smi gave no power samples"
            return level
        empty = sorted(index for index, item in summary.items() if not item["samples"])
        if empty:
            level["power"] = summary
            level["power_note"] = "no %s sample of GPU %s inside the %.3f s load window (raise the load or lower " \
                "sample_interval_ms)" % (self.field, ", ".join(empty), window[1] - window[0])
            return level
        for index, item in summary.items():
            rows = [r for r in self.rows if str(r.get("index")) == index]
            limits = [r.get("enforced.power.limit") for r in rows if isinstance(r.get("enforced.power.limit"), (int, float))]
            clocks = [r.get("clocks.sm") for r in rows if isinstance(r.get("clocks.sm"), (int, float))]
            item["enforced_limit_w"] = float(limits[-1]) if limits else None
            item["sm_clock_mhz"] = round(sum(clocks) / len(clocks), 1) if clocks else None
        power_w = round(sum(item["mean_w"] for item in summary.values()), 3)
        energy = sum(item["energy_j"] for item in summary.values())
        level["power"] = summary
        level["power_w"] = power_w
        level["energy_j"] = round(energy, 3)
        if energy > 0 and level["output_tokens"]:
            level["j_per_token"] = round(energy / level["output_tokens"], 6)
        if power_w > 0 and level["aggregate_tps"] is not None:
            level["tps_per_w"] = round(level["aggregate_tps"] / power_w, 6)
        return level


def power_draw_field(smi, gpus=None):
    """(field, note): which power reading to sample, asked of nvidia-smi once.

    ``power.draw.instant`` where the driver has it; ``power.draw`` (a 1 s average on Ampere and
    newer) when nvidia-smi says the field is not a valid one (an older driver: rc 2, ``Field
    "power.draw.instant" is not a valid field to query.``) or gives no value for any GPU
    (``[N/A]``, ``[Not Supported]``). ``note`` says why the fallback was taken (None otherwise).
    Any other failure raises NvidiaSmiError.
    """
    try:
        rows = smi.query(["index", POWER_DRAW_INSTANT], gpus)
    except NvidiaSmiError as exc:
        if NOT_A_FIELD in exc.output or NOT_A_FIELD in exc.msg:
            return POWER_DRAW_AVERAGE, "nvidia-smi does not know %s (%s)" % (POWER_DRAW_INSTANT, exc.output or exc.msg)
        raise
    if not any(isinstance(r.get(POWER_DRAW_INSTANT), (int, float)) for r in rows):
        return POWER_DRAW_AVERAGE, "nvidia-smi gives no %s value (not supported on these GPUs)" % POWER_DRAW_INSTANT
    return POWER_DRAW_INSTANT, None


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


# ---------------------------------------------------------------- topology (nvidia-smi topo -m)
# The link kinds of `nvidia-smi topo -m` between two GPUs, nearest first, with the meaning its
# legend gives. NV# (a bonded set of # NVLinks) is NV1, NV2, NV4, NV6, NV12, NV18 ...; SOC is the
# name older drivers print for SYS.
TOPOLOGY_LINKS = (
    ("NV#", "NVLink (a bonded set of # NVLinks)"),
    ("PIX", "PCIe through at most a single PCIe bridge (the same PCIe switch)"),
    ("PXB", "PCIe through multiple PCIe bridges, without the PCIe host bridge"),
    ("PHB", "PCIe through a PCIe host bridge (typically the CPU)"),
    ("NODE", "PCIe and the interconnect between PCIe host bridges within a NUMA node"),
    ("SYS", "PCIe and the SMP interconnect between NUMA nodes (e.g. QPI/UPI)"),
)
_LINK_ORDER = {label: rank for rank, (label, _what) in enumerate(TOPOLOGY_LINKS)}
_LINK_ALIASES = {"SOC": "SYS"}
_NVLINK = re.compile(r"^NV(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DEVICE = re.compile(r"^(GPU)(\d+)$")
# The columns after the device columns, in the order the driver prints them (older drivers
# print only CPU Affinity).
_TOPO_EXTRA = (("CPU Affinity", "cpu_affinity"), ("NUMA Affinity", "numa_affinity"), ("GPU NUMA ID", "gpu_numa_id"))


def link_kind(label):
    """A cell of the matrix -> its kind in TOPOLOGY_LINKS (``NV4`` -> ``NV#``), or None if unknown."""
    label = _LINK_ALIASES.get(label, label)
    if _NVLINK.match(label):
        return "NV#"
    return label if label in _LINK_ORDER else None


def link_description(label):
    """What a link label means, in words (``NV4`` -> ``NVLink (4 bonded NVLinks)``)."""
    kind = link_kind(label) if label else None
    if kind == "NV#":
        return "NVLink (%s bonded NVLinks)" % _NVLINK.match(label).group(1)
    if kind is None:
        return "unknown link %r" % (label,)
    return dict(TOPOLOGY_LINKS)[kind]


def link_rank(label):
    """Distance rank of a link (0 = NVLink ... 5 = SYS); unknown labels rank after SYS."""
    kind = link_kind(label)
    return _LINK_ORDER[kind] if kind is not None else len(TOPOLOGY_LINKS)


def _topo_value(text):
    return None if text in ("N/A", "") else text


def parse_topology(text):
    """The output of ``nvidia-smi topo -m`` -> {gpus, links, affinity}.

    ``gpus``: the GPU indexes of the matrix (sorted); ``links``: {"0": {"1": "PHB"}, "1": {"0": "PHB"}}
    for every pair of GPUs (the cell as printed, ``SOC`` read as ``SYS``; NIC rows and columns are
    left out); ``affinity``: {"0": {cpu_affinity, numa_affinity, gpu_numa_id}} as far as the driver
    prints them (``N/A`` -> None). Columns are split on any whitespace (the driver separates them
    with tabs, a copy from a terminal with spaces); lines before the header, indentation, colour
    escapes and everything from the first ``Legend:`` on (the legend, a second matrix) are ignored.
    Raises ValueError when there is no GPU matrix or a row does not fit the header.
    """
    header = None
    rows = []
    for raw in _ANSI.sub("", text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Legend"):
            break
        tokens = line.split()
        if header is None:
            # the header names GPU0; a matrix row has X or a link label in its second column
            if "GPU0" in tokens and not (len(tokens) > 1 and (tokens[1] == "X" or link_kind(tokens[1]))):
                extra_at = line.find("CPU Affinity")
                names = (line[:extra_at] if extra_at >= 0 else line).split()
                extras = [key for title, key in _TOPO_EXTRA if extra_at >= 0 and title in line[extra_at:]]
                header = (names, extras)
            continue
        rows.append(tokens)
    if header is None:
        raise ValueError("no GPU matrix (no header line naming GPU0)")
    names, extras = header
    gpus = [int(_DEVICE.match(n).group(2)) for n in names if _DEVICE.match(n)]
    links = {}
    affinity = {}
    for tokens in rows:
        match = _DEVICE.match(tokens[0])
        if not match:
            continue  # a NIC row (NIC0, mlx5_0): not a GPU
        index = int(match.group(2))
        cells = tokens[1:1 + len(names)]
        if len(cells) != len(names):
            raise ValueError("row %s has %d link cells for the %d devices of the header" % (tokens[0], len(cells), len(names)))
        row = {}
        for name, cell in zip(names, cells):
            peer = _DEVICE.match(name)
            if peer is None or int(peer.group(2)) == index:
                continue
            row[peer.group(2)] = _LINK_ALIASES.get(cell, cell)
        links[str(index)] = row
        values = dict(zip(extras, tokens[1 + len(names):]))
        affinity[str(index)] = {key: _topo_value(values.get(key, "")) for _t, key in _TOPO_EXTRA}
    missing = [g for g in gpus if str(g) not in links]
    if missing:
        raise ValueError("no matrix row for GPU %s" % ", ".join(str(g) for g in missing))
    return {"gpus": sorted(gpus), "links": links, "affinity": affinity}


def topology_facts(parsed):
    """parse_topology()'s result -> what nvidia_gpu_info returns as ``topology``.

    Adds ``available`` (true), ``pairs`` (each GPU pair once: gpus [a, b], link, kind, nvlink,
    description), ``nvlink`` (true when every pair of GPUs is linked by NVLink; false with one GPU)
    and a one-line ``summary``.
    """
    gpus = parsed["gpus"]
    pairs = []
    for pos, a in enumerate(gpus):
        for b in gpus[pos + 1:]:
            label = parsed["links"][str(a)].get(str(b))
            kind = link_kind(label) if label else None
            pairs.append({"gpus": [a, b], "link": label, "kind": kind, "nvlink": kind == "NV#",
                          "description": link_description(label)})
    if not pairs:
        summary = "%d GPU: no link between GPUs" % len(gpus)
    elif len(pairs) == 1:
        pair = pairs[0]
        summary = "GPU%d-GPU%d: %s, %s" % (pair["gpus"][0], pair["gpus"][1], pair["link"], pair["description"])
    else:
        counts = {}
        for pair in pairs:
            counts[pair["link"]] = counts.get(pair["link"], 0) + 1
        parts = ["%d %s" % (n, label) for label, n in sorted(counts.items(), key=lambda kv: (link_rank(kv[0]), kv[0]))]
        summary = "%d GPUs, %d pairs: %s" % (len(gpus), len(pairs), ", ".join(parts))
    nvlink = bool(pairs) and all(p["nvlink"] for p in pairs)
    if pairs and not any(p["nvlink"] for p in pairs):
        summary += "; no NVLink"
    result = dict(parsed)
    result.update(available=True, pairs=pairs, nvlink=nvlink, summary=summary, reason=None)
    return result


def no_topology(reason):
    """The ``topology`` of a host whose links are not known, saying why."""
    return {"available": False, "gpus": [], "links": {}, "affinity": {}, "pairs": [], "nvlink": False,
            "summary": "topology unknown: %s" % reason, "reason": reason}


def read_topology(smi, gpu_count):
    """``topology`` for nvidia_gpu_info: topology_facts() of ``nvidia-smi topo -m``; never raises.

    One GPU: not asked (nothing links to it). When the command fails (an old driver without
    ``topo``, a virtual GPU) or prints something else, the answer says so in ``reason``.
    """
    if gpu_count < 2:
        parsed = {"gpus": list(range(gpu_count)), "links": {str(i): {} for i in range(gpu_count)}, "affinity": {}}
        facts = topology_facts(parsed)
        facts["reason"] = "one GPU: nvidia-smi topo -m not run"
        return facts
    try:
        return topology_facts(smi.topology())
    except NvidiaSmiError as exc:
        return no_topology(exc.msg)
