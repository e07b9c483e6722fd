# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only proof of nvidia_gpu_info and the power sampler on a real NVIDIA GPU.

Run it through benchmarks/gpu_readonly.sh (which makes ``ansible_collections.gpuhost.inference``
importable). On a host with an NVIDIA GPU, PyTorch and no vLLM it:

1. runs the ``nvidia_gpu_info`` module through its own entry point and records the facts, plus the
   raw ``--query-gpu`` output they were parsed from;
2. samples power with module_utils' PowerSampler (``-lms``, 200 ms) for ``--idle-s`` seconds idle;
3. starts a load in a subprocess (``torch``: bf16 8192x8192 matrix products in a loop on cuda:0;
   ``sleep``: a test double that does no GPU work, for runs against the mocked nvidia-smi) and
   samples for ``--load-s`` seconds while it runs;
4. reads ``nvidia-smi -q -d POWER`` at the end of the load window (load still running) and again
   right after the load has ended, and compares the driver's own "Power Samples" average with the
   sampler's means (within ``--tolerance``, 10 %).

It only reads the card: every nvidia-smi command line goes through ``check_read_only``, which
refuses the options that change a setting (-pl, -pm, -r, -ac, -lgc, -c, ...).

Prints a report and, with ``--out DIR`` (default: $OUT when set), writes it to
DIR/gpu_readonly.txt and the figures to DIR/gpu_readonly.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_power_sampler import PowerSampler, summarize
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import GPU_INFO_FIELDS, NvidiaSmi, parse_value

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.path.join(REPO, "plugins", "modules", "nvidia_gpu_info.py")
SCHEMA = 1
TOLERANCE = 0.10
# Facts that are settings: read again at the end to show that nothing changed them.
SETTING_KEYS = ("persistence_mode", "power_limit_w", "enforced_power_limit_w", "default_power_limit_w")
SAMPLER_EXTRA_FIELDS = ("power.draw.instant", "utilization.gpu", "clocks.sm")

# nvidia-smi options that change the card; never passed by this script.
FORBIDDEN_OPTIONS = frozenset((
    "-pl", "--power-limit", "-pm", "--persistence-mode", "-r", "--gpu-reset", "-ac",
    "--applications-clocks", "-rac", "--reset-applications-clocks", "-lgc", "--lock-gpu-clocks",
    "-rgc", "--reset-gpu-clocks", "-lmc", "--lock-memory-clocks", "-rmc", "--reset-memory-clocks",
    "-c", "--compute-mode", "-e", "--ecc-config", "-p", "--reset-ecc-errors", "-mig", "--multi-instance-gpu",
    "-dm", "--driver-model", "-fdm", "--force-driver-model", "-am", "--accounting-mode", "-caa",
    "--clear-accounted-apps", "--auto-boost-default", "--auto-boost-permission", "-cc", "--cuda-clocks",
))

# The load run in a subprocess: prints one JSON line when the GPU is busy, one when it ends
# (after max_s seconds or on SIGTERM).
TORCH_LOAD = r"""
import json, signal, sys, time
import torch
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
max_s, n = float(sys.argv[1]), int(sys.argv[2])
a = torch.randn(n, n, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda:0", dtype=torch.bfloat16)
c = torch.empty_like(a)
for _ in range(10):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
print(json.dumps({"ready": True, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "cuda": torch.version.cuda}), flush=True)
t0, count = time.perf_counter(), 0
while not stop and time.perf_counter() - t0 < max_s:
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    count += 20
el = time.perf_counter() - t0
print(json.dumps({"done": True, "matmuls": count, "seconds": round(el, 3),
                  "tflops": round(2.0 * n ** 3 * count / el / 1e12, 1) if el else None,
                  "stopped_by": "SIGTERM" if stop else "max_s"}), flush=True)
"""

# Test double of the load: no GPU work at all (for the mocked nvidia-smi).
SLEEP_LOAD = r"""
import json, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
max_s = float(sys.argv[1])
print(json.dumps({"ready": True, "device": None, "fake": True}), flush=True)
t0 = time.monotonic()
while not stop and time.monotonic() - t0 < max_s:
    time.sleep(0.05)
print(json.dumps({"done": True, "matmuls": 0, "seconds": round(time.monotonic() - t0, 3), "tflops": None,
                  "stopped_by": "SIGTERM" if stop else "max_s"}), flush=True)
"""
LOADS = {"torch": TORCH_LOAD, "sleep": SLEEP_LOAD}


# ------------------------------------------------------------------------------- pure helpers
def check_read_only(args):
    """Raise ValueError when an nvidia-smi command line would change a setting."""
    bad = [a for a in args[1:] if a.split("=", 1)[0] in FORBIDDEN_OPTIONS]
    if bad:
        raise ValueError("refused (this script only reads the card): %s" % " ".join(args))
    return args


def read_only_runner(timeout=60):
    """A NvidiaSmi runner (args -> rc, stdout, stderr) that refuses write options."""
    def run(args):
        check_read_only(args)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        return proc.returncode, proc.stdout, proc.stderr
    return run


def read_only_popen(args, **kwargs):
    """subprocess.Popen for PowerSampler, through the same guard."""
    return subprocess.Popen(check_read_only(list(args)), **kwargs)  # pylint: disable=consider-using-with


_Q_LINE = re.compile(r"^(\s*)(\S.*?)\s*:\s*(.*?)\s*$")


def parse_q_power(text):
    """``nvidia-smi -q -d POWER`` -> {"timestamp", "driver_version", "gpus": {bus_id: sections}}.

    ``sections`` maps a section name ("GPU Power Readings", "Power Samples", ...) to its
    key -> value dict; values go through module_utils' parse_value (units dropped, N/A -> None).
    """
    result = {"timestamp": None, "driver_version": None, "gpus": {}}
    gpu = section = None
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        if raw.startswith("GPU "):
            gpu = result["gpus"].setdefault(raw[4:].strip(), {})
            section = None
            continue
        match = _Q_LINE.match(raw)
        if not match:  # a section heading, indented, no colon
            if gpu is not None:
                section = gpu.setdefault(raw.strip(), {})
            continue
        _indent, key, value = match.groups()
        if gpu is None:
            if key == "Timestamp":
                result["timestamp"] = value
            elif key == "Driver Version":
                result["driver_version"] = value
            continue
        target = section if section is not None else gpu
        target[key] = parse_value(value)
    return result


def power_samples(parsed, bus_id):
    """The "Power Samples" section of one GPU of a parse_q_power() result, or None."""
    return ((parsed or {}).get("gpus", {}).get(bus_id) or {}).get("Power Samples")


def window_mean(samples, index, start, end):
    """Mean of power.draw of GPU ``index`` over samples with start <= t <= end."""
    watts = [float(s["power.draw"]) for s in samples
             if str(s.get("index")) == str(index) and isinstance(s.get("power.draw"), (int, float))
             and start <= s["t"] <= end]
    if not watts:
        return None, 0
    return round(sum(watts) / len(watts), 3), len(watts)


def compare(sampler_w, smi_w, tolerance=TOLERANCE):
    """{"sampler_w", "nvidia_smi_w", "ratio" (sampler / nvidia-smi), "agree" (|ratio - 1| <= tolerance)}."""
    if sampler_w is None or not smi_w:
        return {"sampler_w": sampler_w, "nvidia_smi_w": smi_w, "ratio": None, "agree": None}
    ratio = round(sampler_w / smi_w, 4)
    # rounded, so that a ratio of exactly 1.1 counts as within 10 % despite binary floats
    return {"sampler_w": sampler_w, "nvidia_smi_w": smi_w, "ratio": ratio,
            "agree": round(abs(ratio - 1.0), 4) <= tolerance}


def phase_record(samples, wall_s):
    """Summary of one sampling phase: module_utils' summarize() plus sample rates."""
    summary = summarize(samples)
    per_gpu = {}
    for index, stats in summary.items():
        rate_stamps = (stats["samples"] - 1) / stats["duration_s"] if stats["duration_s"] else None
        per_gpu[index] = dict(stats, samples_per_s_wall=round(stats["samples"] / wall_s, 3) if wall_s else None,
                              samples_per_s_stamps=round(rate_stamps, 3) if rate_stamps else None)
    return {"wall_s": round(wall_s, 3), "rows": len(samples), "per_gpu": per_gpu,
            "samples": [dict(s.items()) for s in samples]}


# ------------------------------------------------------------------------------- the run
class Report:
    def __init__(self):
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    def text(self):
        return "\n".join(self.lines) + "\n"


def run_module(nvidia_smi, gpus=None):
    """The nvidia_gpu_info module, run as ``python nvidia_gpu_info.py args.json``."""
    args = {"nvidia_smi_path": nvidia_smi}
    if gpus:
        args["gpus"] = gpus
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
        path = handle.name
    try:
        proc = subprocess.run([sys.executable, MODULE, path], capture_output=True, text=True, timeout=120, check=False)
    finally:
        os.unlink(path)
    try:
        result = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        result = {"failed": True, "msg": "module printed no JSON", "stdout": proc.stdout}
    result.pop("invocation", None)
    return {"rc": proc.returncode, "stderr": proc.stderr.strip(), "result": result}


def read_q_power(smi):
    started = time.time()
    rc, out, err = smi.run([smi.path, "-q", "-d", "POWER"], check=False)
    return {"command": "nvidia-smi -q -d POWER", "rc": rc, "stdout": out, "stderr": err.strip(),
            "t_start": round(started, 3), "t_end": round(time.time(), 3), "parsed": parse_q_power(out)}


def start_load(kind, max_s, size, timeout=180):
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-u", "-c", LOADS[kind], str(max_s), str(size)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + timeout
    ready = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        try:
            ready = json.loads(line)
            break
        except ValueError:
            continue
    return proc, ready


def end_load(proc, timeout=30):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    done = None
    for line in out.splitlines():
        try:
            done = json.loads(line)
        except ValueError:
            continue
    return {"rc": proc.returncode, "done": done, "stderr_tail": err.strip()[-2000:]}


def sample(smi, seconds, interval_ms):
    sampler = PowerSampler(smi, fields=SAMPLER_EXTRA_FIELDS, interval_ms=interval_ms, popen=read_only_popen)
    started = time.monotonic()
    sampler.start()
    time.sleep(seconds)
    return sampler, started


def finish(sampler, started):
    samples = sampler.stop()
    wall = time.monotonic() - started
    record = phase_record(samples, wall)
    record["error"] = sampler.error
    return record


def collect(opts, say):
    smi = NvidiaSmi(opts.nvidia_smi, runner=read_only_runner())
    data = {
        "schema": SCHEMA,
        "captured_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "settings": {"idle_s": opts.idle_s, "load_s": opts.load_s, "interval_ms": opts.interval_ms,
                     "load": opts.load, "matrix_size": opts.size, "tolerance": opts.tolerance,
                     "sampler_fields": list(PowerSampler.REQUIRED) + list(SAMPLER_EXTRA_FIELDS)},
        "environment": {"python": platform.python_version(), "machine": platform.machine()},
    }
    _rc, version, _err = smi.run([smi.path, "--version"], check=False)
    data["environment"]["nvidia_smi_version"] = version.strip()
    _rc, listing, _err = smi.run(smi.list_cmd(), check=False)
    data["environment"]["nvidia_smi_list"] = listing.strip()

    # 1. facts: the module, and the raw query it parses
    fields = [f for f, _k in GPU_INFO_FIELDS]
    cmd = smi.query_cmd(fields)
    rc, out, err = smi.run(cmd, check=False)
    data["raw_query"] = {"argv_tail": cmd[1:], "rc": rc, "stdout": out, "stderr": err.strip()}
    data["module"] = run_module(opts.nvidia_smi)
    facts = data["module"]["result"]
    say("== nvidia_gpu_info facts (module run through its own entry point) ==")
    say(json.dumps(facts, indent=2, sort_keys=True))
    if facts.get("failed") or not facts.get("gpus"):
        say("FAILED: the module returned no GPUs; nothing else is measured")
        return data
    gpus = facts["gpus"]
    bus_ids = {str(g["index"]): g["pci_bus_id"] for g in gpus}

    # 2. idle
    say()
    say("== idle: PowerSampler (-lms %d) for %.1f s, no load ==" % (opts.interval_ms, opts.idle_s))
    sampler, started = sample(smi, opts.idle_s, opts.interval_ms)
    data["idle"] = finish(sampler, started)

    # 3. load
    say("== load: %s (%s), PowerSampler for %.1f s once it is busy ==" % (
        opts.load, "bf16 %dx%d matmuls in a loop on cuda:0" % (opts.size, opts.size) if opts.load == "torch"
        else "test double: sleeps, no GPU work", opts.load_s))
    proc, ready = start_load(opts.load, opts.load_s + 30, opts.size)
    data["load_process"] = {"kind": opts.load, "ready": ready}
    if not ready:
        data["load_process"].update(end_load(proc))
        say("FAILED: the load did not start: %s" % data["load_process"]["stderr_tail"][-500:])
        return data
    sampler, started = sample(smi, opts.load_s, opts.interval_ms)
    q_end = read_q_power(smi)            # 4a. at the end of the load window, load still running
    data["load"] = finish(sampler, started)
    data["load_process"].update(end_load(proc))
    q_after = read_q_power(smi)          # 4b. right after the load has ended
    data["q_power"] = {"at_load_end": q_end, "after_load": q_after}
    after = smi.gpu_info()
    data["settings_after"] = {
        "gpus": after,
        "unchanged": all(
            {k: g.get(k) for k in SETTING_KEYS} == {k: a.get(k) for k in SETTING_KEYS}
            for g, a in zip(gpus, after)
        ) and len(after) == len(gpus),
    }

    # 5. comparisons, per GPU
    data["comparison"] = {}
    load_samples = data["load"]["samples"]
    for index, bus in bus_ids.items():
        stats = data["load"]["per_gpu"].get(index)
        ps_end = power_samples(q_end["parsed"], bus) or {}
        ps_after = power_samples(q_after["parsed"], bus) or {}
        gpu_samples = [s for s in load_samples if str(s["index"]) == index]
        entry = {"nvidia_smi_power_samples_at_load_end": ps_end,
                 "nvidia_smi_power_samples_after_load": ps_after}
        load_mean = stats["mean_w"] if stats else None
        entry["load_window"] = compare(load_mean, ps_end.get("Avg"), opts.tolerance)
        duration = ps_end.get("Duration")
        if gpu_samples and isinstance(duration, (int, float)):
            end = max(s["t"] for s in gpu_samples)
            mean, count = window_mean(gpu_samples, index, end - duration, end)
            entry["matched_window"] = dict(compare(mean, ps_end.get("Avg"), opts.tolerance),
                                           window_s=duration, window_end_t=end, samples=count)
        else:
            entry["matched_window"] = compare(None, ps_end.get("Avg"), opts.tolerance)
        entry["after_load"] = compare(load_mean, ps_after.get("Avg"), opts.tolerance)
        data["comparison"][index] = entry
    return data


def fmt(value, spec="%.1f"):
    return "n/a" if value is None else spec % value


def describe(data, say):
    """The human part of the report (everything after the facts)."""
    if "load" not in data:
        return
    say()
    say("== power: idle vs load (PowerSampler, power.draw; on Ampere and newer power.draw is a 1 s average) ==")
    for index, load in sorted(data["load"]["per_gpu"].items()):
        idle = data["idle"]["per_gpu"].get(index, {})
        say("GPU %s idle: mean %s W, max %s W, min %s W, %d samples in %.2f s wall = %s samples/s "
            "(%s/s by nvidia-smi's timestamps)" % (
                index, fmt(idle.get("mean_w")), fmt(idle.get("max_w")), fmt(idle.get("min_w")), idle.get("samples", 0),
                data["idle"]["wall_s"], fmt(idle.get("samples_per_s_wall"), "%.2f"),
                fmt(idle.get("samples_per_s_stamps"), "%.2f")))
        say("GPU %s load: mean %s W, max %s W, min %s W, %d samples in %.2f s wall = %s samples/s "
            "(%s/s by nvidia-smi's timestamps), energy %s J" % (
                index, fmt(load["mean_w"]), fmt(load["max_w"]), fmt(load["min_w"]), load["samples"],
                data["load"]["wall_s"], fmt(load["samples_per_s_wall"], "%.2f"),
                fmt(load["samples_per_s_stamps"], "%.2f"), fmt(load["energy_j"], "%.0f")))
        if idle.get("mean_w"):
            say("GPU %s load/idle mean: %.2fx" % (index, load["mean_w"] / idle["mean_w"]))
    proc = data.get("load_process", {})
    done = proc.get("done") or {}
    say("load process: %s, rc %s, %s matmuls in %s s = %s TFLOP/s, stopped by %s" % (
        proc.get("kind"), proc.get("rc"), done.get("matmuls"), done.get("seconds"), done.get("tflops"),
        done.get("stopped_by")))
    say()
    say("== sampler vs nvidia-smi -q -d POWER (\"Power Samples\": the driver's own buffer of readings) ==")
    say("Windows compared (they are not the same, read the ratios with that in mind):")
    say("  A load_window: the sampler's mean over the whole %.0f s load window vs the Power Samples Avg of a"
        % data["settings"]["load_s"])
    say("    -q read at the end of that window, load still running (its own window: the last Duration s).")
    say("  B matched_window: the sampler's mean over only its last Duration s of the load window (the same")
    say("    span as the driver's buffer, to within one sampling interval) vs that same Avg.")
    say("  C after_load: the sampler's load-window mean vs the Avg of a -q read right after the load ended;")
    say("    that buffer spans the end of the load and the fall towards idle, so C reads low when the load")
    say("    ended inside it; it is shown, not hidden.")
    tol = data["settings"]["tolerance"]
    for index, entry in sorted(data.get("comparison", {}).items()):
        for label, key in (("A load_window", "load_window"), ("B matched_window", "matched_window"),
                           ("C after_load", "after_load")):
            cmp_ = entry[key]
            extra = ""
            if key == "matched_window" and "window_s" in cmp_:
                extra = " (%d sampler readings over %.2f s)" % (cmp_["samples"], cmp_["window_s"])
            say("GPU %s %s: sampler %s W, nvidia-smi Avg %s W, ratio %s -> %s%s" % (
                index, label, fmt(cmp_["sampler_w"], "%.2f"), fmt(cmp_["nvidia_smi_w"], "%.2f"),
                fmt(cmp_["ratio"], "%.3f"),
                "n/a" if cmp_["agree"] is None else ("agree within %d%%" % round(tol * 100) if cmp_["agree"]
                                                     else "DISAGREE (more than %d%% apart)" % round(tol * 100)),
                extra))
        for label, key in (("at load end", "nvidia_smi_power_samples_at_load_end"),
                           ("after load", "nvidia_smi_power_samples_after_load")):
            ps = entry[key]
            say("GPU %s nvidia-smi Power Samples %s: Duration %s s, %s samples, Avg %s W, Max %s W, Min %s W" % (
                index, label, ps.get("Duration"), ps.get("Number of Samples"), ps.get("Avg"), ps.get("Max"),
                ps.get("Min")))
    verdict = data.get("verdict", {})
    say()
    say("settings (persistence mode, power limits) read again at the end, unchanged: %s" % (
        data.get("settings_after", {}).get("unchanged")))
    say("verdict: sampler load-window mean agrees with nvidia-smi's own average within %d%%: %s" % (
        round(tol * 100), verdict.get("agree_load_window")))
    say("verdict: over the matched window: %s" % verdict.get("agree_matched_window"))


def verdict(data):
    comps = list(data.get("comparison", {}).values())

    def all_of(key):
        flags = [c[key]["agree"] for c in comps]
        return None if not flags or None in flags else all(flags)
    load_gt_idle = None
    if "load" in data:
        load_gt_idle = all(stats["mean_w"] > data["idle"]["per_gpu"].get(i, {}).get("mean_w", float("inf"))
                           for i, stats in data["load"]["per_gpu"].items())
    return {"agree_load_window": all_of("load_window"), "agree_matched_window": all_of("matched_window"),
            "agree_after_load": all_of("after_load"), "load_mean_above_idle_mean": load_gt_idle}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nvidia-smi", default=os.environ.get("GPU_READONLY_NVIDIA_SMI", "nvidia-smi"),
                        help="nvidia-smi to read (default: $GPU_READONLY_NVIDIA_SMI or nvidia-smi on PATH)")
    parser.add_argument("--load", choices=sorted(LOADS), default=os.environ.get("GPU_READONLY_LOAD", "torch"),
                        help="torch: real matmul load; sleep: a fake load that does no GPU work (for the mock)")
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--size", type=int, default=8192, help="matrix size of the torch load")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--out", default=os.environ.get("OUT") or None,
                        help="write gpu_readonly.txt and gpu_readonly.json here (default: $OUT when set)")
    opts = parser.parse_args(argv)
    resolved = shutil.which(opts.nvidia_smi)
    if not resolved:
        parser.error("nvidia-smi %r not found" % opts.nvidia_smi)
    opts.nvidia_smi = os.path.abspath(resolved)

    say = Report()
    say("gpu_readonly: read-only check of nvidia_gpu_info and PowerSampler (%s)" % opts.nvidia_smi)
    data = collect(opts, say)
    data["verdict"] = verdict(data)
    describe(data, say)
    if opts.out:
        os.makedirs(opts.out, exist_ok=True)
        with open(os.path.join(opts.out, "gpu_readonly.json"), "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        with open(os.path.join(opts.out, "gpu_readonly.txt"), "w", encoding="utf-8") as handle:
            handle.write(say.text())
    ok = "load" in data and data["module"]["rc"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
