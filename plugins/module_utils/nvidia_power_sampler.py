# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU power read while a load runs: ``nvidia-smi --query-gpu=... -lms N`` in a thread, and its figures.

The command line comes from NvidiaSmi.query_cmd() and each row is parsed by parse_csv() (both in
nvidia_smi.py); this file only runs it in the background and turns the rows into watts and joules.
Beside nvidia_smi.py it needs only the Python standard library; it never imports AnsibleModule.

    smi = NvidiaSmi("/usr/bin/nvidia-smi")
    field, note = power_draw_field(smi, gpus=[0])   # power.draw.instant, or power.draw and why
    with PowerSampler(smi, interval_ms=200, power_field=field) as sampler:
        ...                                         # load
    sampler.summary()                               # {"0": {"mean_w", "max_w", "samples", "energy_j", ...}}
    summarize(rows, field, window)                  # the same figures of given rows, inside a time window
    LevelPower(smi, 200, field)                     # one load level of vllm_probe; never raises
"""
from __future__ import annotations

import subprocess
import threading
import time

from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import (
    NOT_A_FIELD,
    NvidiaSmiError,
    describe_failure,
    parse_csv,
    parse_timestamp,
)

__all__ = [
    "EXTRA_POWER_FIELDS",
    "LevelPower",
    "POWER_DRAW_AVERAGE",
    "POWER_DRAW_INSTANT",
    "PowerSampler",
    "power_draw_field",
    "summarize",
]

# The power fields, best first: the instant reading where the driver has it, else the 1 s average.
POWER_DRAW_INSTANT = "power.draw.instant"
POWER_DRAW_AVERAGE = "power.draw"


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
            self.error = describe_failure(self.command, rc, self._stderr, err)
        if self._thread is not None:
            self._thread.join(timeout)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        with self._lock:
            return list(self.samples)

    @property
    def running(self):
        """Whether nvidia-smi was started and has not ended."""
        return self._proc is not None and self._proc.poll() is None

    def wait_for_reading(self, after, seconds):
        """Wait until a reading taken at or after ``after`` (seconds since the epoch) is in, nvidia-smi has ended,
        or ``seconds`` have passed -> whether such a reading is in."""
        deadline = time.monotonic() + seconds
        while True:
            with self._lock:
                if any(row["t"] >= after for row in self.samples):
                    return True
            if time.monotonic() >= deadline or self.error is not None or not self.running:
                return False
            time.sleep(0.01)

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


def _between(points, start, end):
    """The figures of a window with no reading inside: the line between the readings around it."""
    before = [p for p in points if p[0] < start][-1:]
    after = [p for p in points if p[0] > end][:1]
    duration = max(0.0, end - start)
    if not before and not after:
        return {"mean_w": None, "max_w": None, "min_w": None, "samples": 0, "duration_s": round(duration, 3),
                "energy_j": None}
    (t0, p0), (t1, p1) = (before or after)[0], (after or before)[0]

    def value(t):
        return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
    first, last = value(start), value(end)
    energy = duration * (first + last) / 2.0
    return {"mean_w": round((first + last) / 2.0, 3), "max_w": round(max(first, last), 3),
            "min_w": round(min(first, last), 3), "samples": 0, "duration_s": round(duration, 3),
            "energy_j": round(energy, 3), "between": [round(t0, 3), round(t1, 3)]}


def summarize(samples, field=POWER_DRAW_AVERAGE, window=None):
    """Per-GPU power statistics of sampler rows (see PowerSampler), keyed by the index as a string.

    Without ``window``: ``mean_w`` is the mean of the samples, ``energy_j`` the trapezoid between
    the first and the last sample, ``duration_s`` their span.

    With ``window`` = (t0, t1) (seconds since the epoch, the load's first request sent and its last
    stream end): only the samples inside it count. ``energy_j`` is the integral over the whole
    window of the line through those samples (trapezoids between them; before the first and after
    the last one their value is held to the window's edges), ``duration_s`` the window and
    ``mean_w`` = energy_j / duration_s (the time-weighted mean).
    A window shorter than the sampling interval may hold no sample: its figures are then those of
    the line between the last reading before it and the first after it (held where only one side
    has one), with ``samples`` 0 and ``between`` the two readings' times; a GPU with no reading at
    all gets ``samples`` 0 and null figures.
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
            inside = [p for p in points if start <= p[0] <= end]
            if not inside:
                result[index] = _between(points, start, end)
                continue
            points = inside
        if not points:
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
# A level's load starts once nvidia-smi has printed a reading (the one before the load); none within this many
# seconds is a failure of nvidia-smi. After the load, the sampler runs until a reading later than the load's end
# (the one after it), for at most this many seconds or three sampling intervals.
FIRST_SAMPLE_WAIT_S = 15.0
LAST_SAMPLE_WAIT_S = 5.0


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
        # nvidia-smi takes a moment to print its first row (longer on a loaded host): the load starts only then,
        # so that a reading precedes even the shortest level.
        if not self.sampler.wait_for_reading(0.0, FIRST_SAMPLE_WAIT_S) and self.sampler.error is None \
                and self.sampler.running:
            self.error = "nvidia-smi printed no %s reading within %g s of its start: %s" % (
                self.field, FIRST_SAMPLE_WAIT_S, " ".join(self.sampler.command))
            try:
                self.sampler.stop()
            except NvidiaSmiError:
                pass
            self.sampler = None

    def stop(self):
        if self.sampler is None:
            return
        if not self.rows and self.error is None:
            # The reading after the load: the window's end lies between two readings, however short the level.
            self.sampler.wait_for_reading(time.time(), max(LAST_SAMPLE_WAIT_S, 3 * self.interval_ms / 1000.0))
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
        empty = sorted(index for index, item in summary.items() if item["mean_w"] is None)
        if empty:
            level["power"] = summary
            level["power_note"] = "no %s reading of GPU %s (raise the load or lower sample_interval_ms)" % (
                self.field, ", ".join(empty))
            return level
        between = sorted(index for index, item in summary.items() if not item["samples"])
        if between:
            level["power_note"] = "no %s reading of GPU %s inside the %.3f s load window: the line between the " \
                "readings around it (raise the load or lower sample_interval_ms)" % (
                    self.field, ", ".join(between), window[1] - window[0])
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
