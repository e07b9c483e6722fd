# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU metrics for node exporter's textfile collector (installed by gpuhost.inference.node_metrics).

One run: one ``nvidia-smi --query-gpu`` through the collection's reader (nvidia_smi.py, shipped
beside this file), one ``systemctl show`` of the power-cap unit, one textfile written atomically.

    gpuhost_gpu_metrics.py collect --config /etc/gpuhost/node_metrics.json           # write the textfile
    gpuhost_gpu_metrics.py collect --config /etc/gpuhost/node_metrics.json --stdout  # print it

The per-GPU series are named as nvidia_gpu_exporter names them (``nvidia_smi_*``, label ``uuid``: the
GPU's UUID in lower case without its ``GPU-`` prefix), plus an ``index`` label (the nvidia-smi index,
which alerts name). The collection's own facts are ``gpuhost_power_*``. A failed nvidia-smi still
writes a file: ``nvidia_smi_last_collect_success 0`` and its exit code, so an alert can see it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nvidia_smi import NOT_A_FIELD, NvidiaSmi, NvidiaSmiError  # noqa: E402  pylint: disable=wrong-import-position
from gpuhost_textfile import Family, render, write_atomic  # noqa: E402  pylint: disable=wrong-import-position

TEXTFILE_NAME = "gpuhost_gpu.prom"

# --query-gpu field -> (metric, help, scale); names as nvidia_gpu_exporter derives them from the field and its unit.
GAUGES = (
    ("power.draw", "nvidia_smi_power_draw_watts", "power.draw [W]", 1.0),
    ("power.limit", "nvidia_smi_power_limit_watts", "power.limit [W]", 1.0),
    ("enforced.power.limit", "nvidia_smi_enforced_power_limit_watts", "enforced.power.limit [W]", 1.0),
    ("power.default_limit", "nvidia_smi_power_default_limit_watts", "power.default_limit [W]", 1.0),
    ("power.min_limit", "nvidia_smi_power_min_limit_watts", "power.min_limit [W]", 1.0),
    ("power.max_limit", "nvidia_smi_power_max_limit_watts", "power.max_limit [W]", 1.0),
    ("temperature.gpu", "nvidia_smi_temperature_gpu", "temperature.gpu (degrees C)", 1.0),
    ("utilization.gpu", "nvidia_smi_utilization_gpu_ratio", "utilization.gpu [%] as a ratio", 0.01),
    ("memory.used", "nvidia_smi_memory_used_bytes", "memory.used [MiB] in bytes", 1048576.0),
    ("memory.total", "nvidia_smi_memory_total_bytes", "memory.total [MiB] in bytes", 1048576.0),
)
IDENTITY = ("index", "uuid", "name", "pci.bus_id", "driver_version", "persistence_mode")
# Clock event reasons (1 active, 0 not). Drivers before 535 only know the older clocks_throttle_reasons.* names;
# both are written under the newer name, so one dashboard fits every driver.
REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")
REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
ACTIVE = {"active": 1, "not active": 0, "enabled": 1, "disabled": 0, "yes": 1, "no": 0}


def load_config(path):
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    if not isinstance(config, dict):
        raise ValueError("%s: a JSON object expected" % path)
    return config


def query_gpus(smi):
    """Rows of the GPUs, each with 'reasons' {name: 0/1}; the first field set the driver knows."""
    base = list(IDENTITY) + [field for field, _m, _h, _s in GAUGES]
    for prefix in REASON_PREFIXES + (None,):
        fields = base + ([prefix + r for r in REASONS] if prefix else [])
        try:
            rows = smi.query(fields)
        except NvidiaSmiError as exc:
            if prefix is not None and NOT_A_FIELD in exc.output:
                continue
            raise
        for row in rows:
            row["reasons"] = {}
            if prefix:
                for reason in REASONS:
                    value = row.get(prefix + reason)
                    row["reasons"][reason] = ACTIVE.get(str(value).strip().lower()) if value is not None else None
        return rows, prefix
    return [], None  # not reached: the last try has no optional field


def unit_state(unit, runner=None):
    """{LoadState, ActiveState, Result} of a systemd unit ({} when systemctl cannot be asked)."""
    args = ["systemctl", "show", unit, "--property=LoadState,ActiveState,Result"]
    try:
        if runner is not None:
            _rc, out, _err = runner(args)
        else:
            out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    state = {}
    for line in (out or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key.strip()] = value.strip()
    return state


def configured_limits(rows, config):
    """GPU index -> the configured cap in W for the GPUs the power role manages (its nvidia_power_* rule)."""
    managed = [int(i) for i in config.get("gpus") or []]
    per_gpu = {int(k): v for k, v in (config.get("gpu_limits_w") or {}).items()}
    fleet = config.get("limit_w")
    out = {}
    for row in rows:
        index = row.get("index")
        if not isinstance(index, int):
            continue
        if index in per_gpu and per_gpu[index] is not None:
            out[index] = float(per_gpu[index])
        elif fleet not in (None, "", 0) and (not managed or index in managed):
            out[index] = float(fleet)
    return out


def collect(config, smi=None, runner=None, now=None):
    """The textfile's families for one run."""
    started = time.monotonic()
    smi = smi or NvidiaSmi(config.get("nvidia_smi_path") or "nvidia-smi", runner=runner,
                           timeout=int(config.get("timeout", 20)))
    gauges = {metric: Family(metric, "gauge", help_text) for _f, metric, help_text, _s in GAUGES}
    reasons = {r: Family("nvidia_smi_clocks_event_reasons_" + r, "gauge", "clocks_event_reasons.%s (1 active)" % r)
               for r in REASONS}
    persistence = Family("nvidia_smi_persistence_mode", "gauge", "persistence_mode (1 enabled)")
    info = Family("nvidia_smi_gpu_info", "gauge", "A constant 1 labelled by the GPU's uuid, index, name, pci_bus_id, driver_version")
    success = Family("nvidia_smi_last_collect_success", "gauge", "Whether the last nvidia-smi query succeeded (1) or not (0)")
    exit_code = Family("nvidia_smi_command_exit_code", "gauge", "Exit code of the last nvidia-smi run (-1: it could not be run)")
    duration = Family("nvidia_smi_last_collect_duration_seconds", "gauge", "Duration of the last collection")
    reason_field = Family("gpuhost_gpu_event_reasons_supported", "gauge",
                          "Whether the driver answered the clock event reason fields (1) or not (0)")
    configured = Family("gpuhost_power_limit_configured_watts", "gauge",
                        "The power cap gpuhost.inference.nvidia_power was configured to apply, per managed GPU")
    unit_ok = Family("gpuhost_power_cap_unit_ok", "gauge",
                     "Whether the power-cap unit ran and succeeded (1: active and Result=success)")
    stamp = Family("gpuhost_gpu_collector_timestamp_seconds", "gauge", "When this file was written")
    rows = []
    try:
        rows, prefix = query_gpus(smi)
        success.add(1)
        exit_code.add(0)
        reason_field.add(prefix is not None)
    except NvidiaSmiError as exc:
        success.add(0)
        exit_code.add(exc.rc if exc.rc is not None else -1)
        sys.stderr.write("gpuhost_gpu_metrics: %s\n" % exc.msg)
    for row in rows:
        index = row.get("index")
        uuid = str(row.get("uuid") or "").lower()
        uuid = uuid[4:] if uuid.startswith("gpu-") else uuid
        labels = {"uuid": uuid, "index": str(index)}
        info.add(1, name=row.get("name") or "", pci_bus_id=row.get("pci.bus_id") or "",
                 driver_version=row.get("driver_version") or "", **labels)
        for field, metric, _h, scale in GAUGES:
            value = row.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauges[metric].add(value * scale if scale != 1.0 else value, **labels)
        persistence.add(ACTIVE.get(str(row.get("persistence_mode") or "").lower()), **labels)
        for reason, value in row["reasons"].items():
            reasons[reason].add(value, **labels)
    for index, watts in sorted(configured_limits(rows, config).items()):
        row = next(r for r in rows if r.get("index") == index)
        uuid = str(row.get("uuid") or "").lower()
        configured.add(watts, uuid=uuid[4:] if uuid.startswith("gpu-") else uuid, index=str(index))
    unit = config.get("power_unit")
    if unit:
        state = unit_state(unit, runner=runner)
        if state.get("LoadState") == "loaded":
            unit_ok.add(state.get("ActiveState") == "active" and state.get("Result") == "success", unit=unit)
    duration.add(round(time.monotonic() - started, 6))
    stamp.add(round(now if now is not None else time.time(), 3))
    return [info] + list(gauges.values()) + list(reasons.values()) + [
        persistence, configured, unit_ok, success, exit_code, duration, reason_field, stamp]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("collect", help="query the GPUs and write (or print) the textfile")
    run.add_argument("--config", required=True)
    run.add_argument("--stdout", action="store_true", help="print the text instead of writing the file")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    text = render(collect(config))
    if args.stdout:
        sys.stdout.write(text)
        return 0
    directory = config.get("textfile_dir") or "/var/lib/prometheus/node-exporter"
    write_atomic(os.path.join(directory, config.get("textfile_name") or TEXTFILE_NAME), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
