"""roles/node_metrics/files/gpuhost_gpu_metrics.py, the GPU textfile collector, as the role installs it: beside the
collection's nvidia-smi reader and textfile writer, run with the system python -I against the mocked nvidia-smi
(cases: tests/unit/data/node_metrics_collector_cases.yaml), and its series checked against a real H200's capture."""
from __future__ import annotations

import glob
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import samples
from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import smi_mock
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, ROOT, SMI_MOCK, case_ids, load_cases

FILES = (os.path.join(ROOT, "roles", "node_metrics", "files", "gpuhost_gpu_metrics.py"),
         os.path.join(ROOT, "plugins", "module_utils", "nvidia_smi.py"),
         os.path.join(ROOT, "plugins", "module_utils", "gpuhost_textfile.py"))
CASES = load_cases("node_metrics_collector_cases.yaml")


@pytest.fixture(name="installed")
def fixture_installed(tmp_path):
    """The collector's directory as the role lays it out."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for path in FILES:
        shutil.copy(path, lib)
    return lib


def _labels(text):
    return dict(part.split("=", 1) for part in text.split(",")) if text else {}


def _run(installed, tmp_path, config):
    (tmp_path / "out").mkdir(exist_ok=True)
    conf = dict(config, nvidia_smi_path=SMI_MOCK, textfile_dir=str(tmp_path / "out"), power_unit="")
    (tmp_path / "config.json").write_text(json.dumps(conf), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", str(installed / "gpuhost_gpu_metrics.py"), "collect", "--config",
                           str(tmp_path / "config.json")], capture_output=True, text=True, check=False, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "out" / "gpuhost_gpu.prom").read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES["collect"], ids=case_ids(CASES["collect"]))
def test_collect(case, installed, tmp_path):
    with smi_mock(case["profile"]) as box:
        for setting in case["set"]:
            box.set(setting)
        text = _run(installed, tmp_path, case["config"])
    got = samples(text)
    names = {s.name for s in got}
    for name, wanted in case["expect"].items():
        for labels, value in wanted.items():
            want = _labels(labels)
            found = [s for s in got if s.name == name and all(s.labels.get(k) == v for k, v in want.items())]
            assert found, "%s{%s} missing in:\n%s" % (name, labels, text)
            if value is not None:
                assert found[0].value == value, (name, labels, found)
    for name in case.get("absent", []):
        assert name not in names, text
    for name, labels in case.get("absent_labels", {}).items():
        want = _labels(labels)
        assert not [s for s in got if s.name == name and all(s.labels.get(k) == v for k, v in want.items())], text
    # Every GPU series carries the uuid as nvidia_gpu_exporter writes it (lower case, no GPU- prefix) and the index.
    for s in got:
        if s.name.startswith("nvidia_smi_") and "uuid" in s.labels:
            assert not s.labels["uuid"].lower().startswith("gpu-") and s.labels["index"].isdigit(), s


@pytest.mark.parametrize("case", CASES["unit_state"], ids=case_ids(CASES["unit_state"]))
def test_the_power_cap_units_state(case, installed, monkeypatch):
    monkeypatch.syspath_prepend(str(installed))
    collector = importlib.import_module("gpuhost_gpu_metrics")
    try:
        def runner(args):
            if args[0] == "systemctl":
                return 0, case["show"], ""
            return 0, "0, GPU-AA, Card, 00000000:01:00.0, 580.1, Enabled, 100, 250, 250, 350, 100, 350, 40, 5, 10, 24576\n", ""

        families = collector.collect({"nvidia_smi_path": "nvidia-smi", "power_unit": "gpu-power-limit.service"},
                                     runner=runner)
        unit = next(f for f in families if f.name == "gpuhost_power_cap_unit_ok")
        values = [float(text) for _labels_, text in unit.samples]
        assert values == ([] if case["expect"] is None else [case["expect"]])
    finally:
        sys.modules.pop("gpuhost_gpu_metrics", None)
        sys.modules.pop("nvidia_smi", None)
        sys.modules.pop("gpuhost_textfile", None)


def test_the_real_h200_capture_has_every_series_the_collector_names():
    """The collector run unchanged against the real nvidia-smi of an H200 (tests/fixtures/node-metrics/README.md)."""
    captures = glob.glob(os.path.join(FIXTURES, "node-metrics", "h200-*-gpuhost_gpu.prom"))
    assert captures
    with open(captures[0], encoding="utf-8") as handle:
        names = {s.name for s in samples(handle.read())}
    wanted = {"nvidia_smi_gpu_info", "nvidia_smi_power_draw_watts", "nvidia_smi_power_limit_watts",
              "nvidia_smi_enforced_power_limit_watts", "nvidia_smi_power_default_limit_watts",
              "nvidia_smi_power_min_limit_watts", "nvidia_smi_power_max_limit_watts", "nvidia_smi_temperature_gpu",
              "nvidia_smi_utilization_gpu_ratio", "nvidia_smi_memory_used_bytes", "nvidia_smi_memory_total_bytes",
              "nvidia_smi_persistence_mode", "nvidia_smi_last_collect_success"}
    wanted |= {"nvidia_smi_clocks_event_reasons_" + r
               for r in ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")}
    assert wanted - names == set()
