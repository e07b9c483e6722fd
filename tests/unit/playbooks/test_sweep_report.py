"""playbooks/files/sweep_report.py and its modules: the comparison of a profile x power-cap sweep.

sweep_data.py (reports -> rows), sweep_render.py (sweep.md, sweep_summary.json), sweep_plot.py (the
PNG plots), report_common.py (formatting, the matplotlib setup) and the command line, sweep_report.py.
Data-driven cases (bandwidth table lookups, roofline arithmetic) are in
tests/unit/data/sweep_report.yaml; the run reports are fixtures shaped like vllm_verify's JSON
report (tests/unit/data/sweep_reports/*.json). Plots are checked with a recording test double of
pyplot (report_helpers.FakePyplot) and, where matplotlib is installed, for real.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuhost.inference.tests.unit.paths import DATA, ROOT, load_cases
from ansible_collections.gpuhost.inference.tests.unit.playbooks.report_helpers import (
    FILES, FakePyplot, ax_title, files_module, no_matplotlib)

SCRIPT = os.path.join(FILES, "sweep_report.py")
TABLE = os.path.join(ROOT, "playbooks", "vars", "gpu_bandwidth.yml")
REPORTS = os.path.join(DATA, "sweep_reports")

CASES = load_cases("sweep_report.yaml")
with open(TABLE, encoding="utf-8") as _handle:
    BUILTIN = yaml.safe_load(_handle)["sweep_gpu_bandwidth_builtin"]

sr = files_module("sweep_report")                # the command line (main)
sweep_data = files_module("sweep_data")          # reports -> rows
sweep_render = files_module("sweep_render")      # rows -> sweep.md, sweep_summary.json
sweep_plot = files_module("sweep_plot")          # rows -> PNG plots
report_common = files_module("report_common")    # formatting shared with tune_report.py

EXPECTED_HEADER = [
    "profile", "cap W", "KV pool tokens", "full-context concurrency", "decode tok/s (1 stream)",
    "aggregate tok/s c=1", "aggregate tok/s c=2", "aggregate tok/s c=4", "aggregate tok/s c=8",
    "TTFT p50 s (c=1)", "mean W @c8", "J/token @c8", "tok/s/W @c8", "power source", "roofline %", "status",
]


def read_report(name):
    with open(os.path.join(REPORTS, name), encoding="utf-8") as handle:
        return json.load(handle)


def base_manifest():
    with open(os.path.join(REPORTS, "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    # absolute paths: the manifests of the tests live in tmp_path
    for run in manifest["runs"]:
        run["report"] = os.path.join(REPORTS, run["report"])
    return manifest


def write_manifest(tmp_path, manifest):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return str(path)


def table_rows(markdown, first_header="profile"):
    """The rows of the first Markdown table whose header starts with first_header, as cell lists."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| " + first_header + " |"):
            header = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                rows.append([c.strip() for c in body.strip("|").split("|")])
            return header, rows
    raise AssertionError("no table starting with " + first_header)


# ------------------------------------------------------------------ data-driven
@pytest.mark.parametrize("case", CASES["bandwidth"], ids=[c["id"] for c in CASES["bandwidth"]])
def test_bandwidth_lookup(case):
    gb_s, source = sweep_data.lookup_bandwidth(case["names"], BUILTIN, case.get("override"))
    assert gb_s == case["gb_s"]
    if case.get("source"):
        assert case["source"] in source


def test_bandwidth_table_cites_a_source_for_every_entry():
    assert len(BUILTIN) >= 10
    for entry in BUILTIN:
        assert entry["match"]
        assert entry["source"].startswith("NVIDIA "), entry
        assert entry["bandwidth_gb_s"] is None or entry["bandwidth_gb_s"] > 0


def test_bandwidth_table_has_no_entry_hidden_by_an_earlier_one():
    """First match wins: an entry whose match contains an earlier entry's match never matches."""
    for i, entry in enumerate(BUILTIN):
        for earlier in BUILTIN[:i]:
            assert earlier["match"].lower() not in entry["match"].lower(), (earlier["match"], entry["match"])


def test_user_table_entries_win_over_the_builtin_ones():
    table = [{"match": "RTX 3090", "bandwidth_gb_s": 900, "source": "measured"}] + BUILTIN
    assert sweep_data.lookup_bandwidth(["NVIDIA GeForce RTX 3090"], table) == (
        900, "table entry 'RTX 3090' for NVIDIA GeForce RTX 3090 (measured)")


@pytest.mark.parametrize("case", CASES["roofline"], ids=[c["id"] for c in CASES["roofline"]])
def test_roofline_arithmetic(case):
    bound = sweep_data.roofline_bound_tps(case["gb_s"], case["weight_bytes"], case["tp"])
    if case["bound"] is None:
        assert bound is None
    else:
        assert bound == pytest.approx(case["bound"])
    pct = sweep_data.roofline_pct(case["decode"], bound)
    if case["pct"] is None:
        assert pct is None
    else:
        assert pct == pytest.approx(case["pct"], rel=1e-6)


# ------------------------------------------------------------------ one report
def test_run_row_reads_the_verify_report():
    meta = {"bandwidth_gb_s": 936, "weight_bytes": 15e9, "tensor_parallel_size": 1}
    run = {"profile": "default", "cap_w": 250, "enforced_w": [250.0, 250.0], "status": "ok", "report": "x.json"}
    row = sweep_data.run_row(run, read_report("default-250W.json"), meta)
    assert row["status"] == "ok" and row["error"] == "" and row["warnings"] == []
    assert row["kv_cache_tokens"] == 280000
    assert row["full_context_concurrency"] == 2.14
    assert row["decode_tps_single"] == 95.0
    assert row["ttft_p50_s_single"] == 0.08
    assert row["aggregate_tps"] == {1: 93.0, 2: 176.0, 4: 322.0, 8: 544.0}
    assert row["top_concurrency"] == 8
    assert row["mean_w_top"] == 490.0
    # the profile's own TP (tensor-parallel-size: 2 in the rendered YAML) wins over the manifest's 1
    assert row["tensor_parallel_size"] == 2
    assert row["roofline_bound_tps"] == pytest.approx(124.8)
    assert row["roofline_pct"] == pytest.approx(95.0 / 124.8 * 100)


def test_the_agent_level_of_a_run_is_a_row_of_its_own():
    report = read_report("default-250W.json")
    assert sweep_data.run_row({"profile": "default", "status": "ok"}, report, {})["agent"] is None
    report["agent"] = {"enabled": True, "ran": True, "requests": 16, "errors_total": 0, "forced": 4, "forced_ok": 4,
                       "ttft_first_ms": {"p95": 220.0}, "ttft_later_ms": {"p95": 95.5}, "prefix_cache_hit_rate": 0.81,
                       "error_messages": []}
    row = sweep_data.run_row({"profile": "default", "cap_w": 250, "status": "ok"}, report, {})
    assert row["agent"] == {"requests": 16, "errors": 0, "ttft_later_p95_ms": 95.5, "ttft_first_p95_ms": 220.0,
                            "hit_rate": 0.81, "forced": "4/4", "error": None}
    meta, _rows, notes = sweep_data.build(base_manifest(), REPORTS)
    text = sweep_render.render_markdown(meta, [row], notes, {})
    assert "## Agent level" in text
    assert "| default | 250 | 16 | 0 | 220 | 96 | 4/4 | 0.81 | - |" in text


def test_ratios_match_the_level_figures():
    report = read_report("default-350W.json")
    row = sweep_data.run_row({"profile": "default", "cap_w": 350, "status": "ok"}, report, {})
    top = report["levels"][-1]
    assert row["tps_per_w_top"] == pytest.approx(top["aggregate_tps"] / top["power_w"], rel=1e-5)
    assert row["j_per_token_top"] == pytest.approx(top["energy_j"] / top["output_tokens"], rel=1e-5)
    assert row["mean_w_top"] == pytest.approx(sum(g["mean_w"] for g in top["power"].values()))


def test_ratios_are_recomputed_when_the_level_lacks_them():
    level = {"concurrency": 4, "aggregate_tps": 300.0, "output_tokens": 1024,
             "power": {"0": {"mean_w": 200.0, "energy_j": 1000.0}, "1": {"mean_w": 100.0, "energy_j": 500.0}}}
    figures = sweep_data.level_figures(level)
    assert figures["mean_w"] == 300.0
    assert figures["tps_per_w"] == pytest.approx(1.0)
    assert figures["j_per_token"] == pytest.approx(1500.0 / 1024)


def test_level_without_power_has_no_power_figures():
    row = sweep_data.run_row({"profile": "default", "cap_w": 250, "status": "ok"}, read_report("default-nopower.json"), {})
    assert row["status"] == "ok"
    assert row["decode_tps_single"] == 95.0
    assert (row["mean_w_top"], row["j_per_token_top"], row["tps_per_w_top"]) == (None, None, None)


def test_failed_gates_and_a_cap_that_did_not_apply_are_shown():
    report = read_report("long-250W-gates-failed.json")
    report["power"]["cap_applied"] = False
    report["power"]["reason"] = "GPU 1 enforces 300.0 W, not the 250 W cap"
    failed = sweep_data.run_row({"profile": "long", "cap_w": 250, "status": "failed",
                                 "error": "Restart and measure: profile 'long' failed its gates"}, report, {})
    assert failed["status"] == "failed"
    assert "failed its gates" in failed["error"]
    assert "gates failed: min_full_context_concurrency" in failed["error"]
    assert "cap: GPU 1 enforces 300.0 W" in failed["error"]
    assert failed["full_context_concurrency"] == 1.07  # still measured, still shown
    assert sweep_render.status_text(failed).startswith("FAILED: ")
    # the same report from a run the play counted as ok keeps the data and warns
    passed = sweep_data.run_row({"profile": "long", "cap_w": 250, "status": "ok"}, report, {})
    assert passed["status"] == "ok"
    assert sweep_render.status_text(passed) == ("ok; gates failed: min_full_context_concurrency; "
                                                "cap: GPU 1 enforces 300.0 W, not the 250 W cap")


def test_a_run_without_report_is_a_failed_row():
    row = sweep_data.run_row({"profile": "mtp", "cap_w": 300, "status": "ok", "report": None}, None, {})
    assert row["status"] == "failed"
    assert row["error"] == "no report"
    assert row["aggregate_tps"] == {} and row["roofline_pct"] is None


@pytest.mark.parametrize("value, expected", [
    (76.12, "76.1"), (100.0, "100.0"), (150.04, "150.0"), (9.876, "9.88"), (0.03771, "0.0377"), (0.0, "0.0"), (None, report_common.DASH),
])
def test_roofline_percent_format_keeps_small_values_visible(value, expected):
    assert report_common.fmt_pct(value) == expected


@pytest.mark.parametrize("run, expected", [
    ({"cap_w": 250, "enforced_w": [250.0, 250.0]}, "250"),
    ({"cap_w": 250, "enforced_w": [300.0, 250.0]}, "250 (enforced 300/250)"),
    ({"cap_w": None, "enforced_w": [275.0, 275.0]}, "275 (current)"),
    ({"cap_w": None, "enforced_w": []}, "current"),
], ids=["applied", "not-applied", "current-cap", "current-unknown"])
def test_cap_label(run, expected):
    row = sweep_data.run_row(dict(run, profile="p", status="ok"), None, {})
    assert sweep_render.cap_label(row) == expected


def test_enforced_limits_fall_back_to_the_report():
    row = sweep_data.run_row({"profile": "default", "cap_w": None, "status": "ok"}, read_report("default-350W.json"), {})
    assert row["enforced_w"] == [350.0, 350.0]
    assert sweep_render.cap_label(row) == "350 (current)"
    assert sweep_plot.cap_value(row) == 350.0


# ------------------------------------------------------------------ the whole script
def test_main_writes_the_table_with_the_columns_and_figures(tmp_path, monkeypatch, capsys):
    no_matplotlib(monkeypatch)
    out = tmp_path / "out"
    rc = sr.main(["--manifest", write_manifest(tmp_path, base_manifest()), "--out-dir", str(out)])
    assert rc == 0
    markdown = (out / "sweep.md").read_text(encoding="utf-8")
    assert capsys.readouterr().out.startswith(markdown)
    assert "- power source: nvidia-smi, sampled during each level's load window." in markdown
    assert "simulated" not in markdown and "roofline column empty" not in markdown
    header, rows = table_rows(markdown)
    assert header == EXPECTED_HEADER
    assert [r[:2] for r in rows] == [["seqs2", "250"], ["seqs2", "350"], ["default", "250"], ["default", "350"]]
    by_key = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    d250 = by_key[("default", "250")]
    assert d250["KV pool tokens"] == "280,000"
    assert d250["full-context concurrency"] == "2.14"
    assert d250["decode tok/s (1 stream)"] == "95.0"
    assert d250["aggregate tok/s c=8"] == "544.0"
    assert d250["TTFT p50 s (c=1)"] == "0.080"
    assert d250["mean W @c8"] == "490.0"
    assert d250["J/token @c8"] == "0.901"
    assert d250["tok/s/W @c8"] == "1.110"
    assert d250["roofline %"] == "76.1"
    assert d250["power source"] == "nvidia-smi"
    assert d250["status"] == "ok"
    # max-num-seqs 2 saturates at two streams: the sweep must show it
    assert by_key[("seqs2", "250")]["aggregate tok/s c=8"] == "212.0"
    # one power row per (run, level)
    _header, power_rows = table_rows(markdown.split("## Power per concurrency level", 1)[1])
    assert len(power_rows) == 16

    summary = json.loads((out / "sweep_summary.json").read_text(encoding="utf-8"))
    assert [r["profile"] for r in summary["rows"]] == ["seqs2", "seqs2", "default", "default"]
    assert summary["rows"][2]["aggregate_tps"] == {"1": 93.0, "2": 176.0, "4": 322.0, "8": 544.0}
    assert summary["meta"]["bandwidth_gb_s"] == 936
    assert summary["plots"] == []


def test_without_matplotlib_the_table_appears_and_the_reason_is_printed(tmp_path, monkeypatch, capsys):
    no_matplotlib(monkeypatch)
    out = tmp_path / "out"
    rc = sr.main(["--manifest", write_manifest(tmp_path, base_manifest()), "--out-dir", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    notes = [line for line in printed.splitlines() if line.startswith("NOTE: ")]
    assert len(notes) == 1
    assert notes[0].startswith("NOTE: no PNG plots: matplotlib is not usable with ")
    assert "pip install matplotlib" in notes[0]
    markdown = (out / "sweep.md").read_text(encoding="utf-8")
    assert "| default | 250 |" in markdown
    assert "## Plots" not in markdown
    assert "no PNG plots: matplotlib is not usable" in markdown.split("## Notes", 1)[1]
    assert not (out / sweep_plot.PLOT_AGGREGATE).exists()
    assert not (out / sweep_plot.PLOT_EFFICIENCY).exists()


def test_mocked_power_is_named_in_the_report(tmp_path, monkeypatch):
    no_matplotlib(monkeypatch)
    manifest = base_manifest()
    manifest["power_source"] = "mocked nvidia-smi (test double): simulated draw, not a measurement"
    manifest["power_source_note"] = "CPU lab box"
    sr.main(["--manifest", write_manifest(tmp_path, manifest), "--out-dir", str(tmp_path)])
    markdown = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    assert ("- power source: **mocked nvidia-smi (test double): simulated draw, not a measurement**: CPU lab box"
            in markdown)
    # the reports predate power_source: the manifest's text stands for every run
    header, rows = table_rows(markdown)
    assert {dict(zip(header, r))["power source"] for r in rows} == {"test double"}
    assert {dict(zip(header, r))["roofline %"] for r in rows} == {report_common.DASH}
    assert "simulated, not measured" in markdown


def _with_report_fields(tmp_path, name, **fields):
    report = read_report(name)
    for path, value in fields.items():
        node = report
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    target = tmp_path / name
    target.write_text(json.dumps(report), encoding="utf-8")
    return str(target)


@pytest.mark.parametrize("fields,source,reason", [
    ({"power_source": "test double"}, "test double", "power source test double"),
    ({"power_source": "none"}, "none", "power source none"),
    ({"power_source": "nvidia-smi", "vllm.platform": "cpu"}, "nvidia-smi", "vLLM platform cpu"),
])
def test_no_roofline_where_no_real_gpu_serves_the_model(tmp_path, monkeypatch, fields, source, reason):
    no_matplotlib(monkeypatch)
    manifest = base_manifest()
    for run in manifest["runs"]:
        if run["profile"] == "default" and run["cap_w"] == 250:
            run["report"] = _with_report_fields(tmp_path, os.path.basename(run["report"]), **fields)
    sr.main(["--manifest", write_manifest(tmp_path, manifest), "--out-dir", str(tmp_path)])
    markdown = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    header, rows = table_rows(markdown)
    by_key = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    assert by_key[("default", "250")]["roofline %"] == report_common.DASH
    assert by_key[("default", "250")]["power source"] == source
    # the other runs' reports say nothing: a real GPU, their roofline stays
    assert by_key[("default", "350")]["roofline %"] not in (report_common.DASH, "")
    assert "roofline column empty where no real GPU serves the model (%s)" % reason in markdown.split("## Notes", 1)[1]
    summary = json.loads((tmp_path / "sweep_summary.json").read_text(encoding="utf-8"))
    row = [r for r in summary["rows"] if r["profile"] == "default" and r["cap_w"] == 250][0]
    assert row["roofline_pct"] is None and row["power_source"] == source


def test_failed_and_missing_runs_are_rows_not_crashes(tmp_path, monkeypatch):
    no_matplotlib(monkeypatch)
    manifest = base_manifest()
    manifest["runs"].append({"profile": "mtp", "cap_w": 250, "status": "failed", "report": None,
                             "error": "Restart and measure: vLLM did not come up"})
    manifest["runs"].append({"profile": "long", "cap_w": 250, "status": "ok",
                             "report": os.path.join(REPORTS, "does-not-exist.json")})
    rc = sr.main(["--manifest", write_manifest(tmp_path, manifest), "--out-dir", str(tmp_path)])
    assert rc == 0
    markdown = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    header, rows = table_rows(markdown)
    mtp = dict(zip(header, rows[4]))
    assert mtp["profile"] == "mtp"
    assert mtp["status"] == "FAILED: Restart and measure: vLLM did not come up; no report"
    assert mtp["aggregate tok/s c=8"] == report_common.DASH
    long_row = dict(zip(header, rows[5]))
    assert long_row["status"] == "FAILED: no report"
    assert "cannot read the report" in markdown.split("## Notes", 1)[1]


def test_roofline_empty_with_the_reason_when_figures_are_missing(tmp_path, monkeypatch):
    no_matplotlib(monkeypatch)
    manifest = base_manifest()
    manifest["weight_bytes"] = None
    manifest["weight_source"] = "vllm_service_model Qwen/Qwen3-8B is not a local directory; set sweep_model_weight_bytes"
    manifest["gpu_names"] = ["Tesla T4"]
    sr.main(["--manifest", write_manifest(tmp_path, manifest), "--out-dir", str(tmp_path)])
    markdown = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    header, rows = table_rows(markdown)
    assert {dict(zip(header, r))["roofline %"] for r in rows} == {report_common.DASH}
    notes = markdown.split("## Notes", 1)[1]
    assert "'Tesla T4' is not in the bandwidth table (set sweep_gpu_bandwidth_gb_s)" in notes
    assert "set sweep_model_weight_bytes" in notes


def test_gpu_names_fall_back_to_the_reports(tmp_path, monkeypatch):
    no_matplotlib(monkeypatch)
    manifest = base_manifest()
    manifest["gpu_names"] = []
    sr.main(["--manifest", write_manifest(tmp_path, manifest), "--out-dir", str(tmp_path)])
    summary = json.loads((tmp_path / "sweep_summary.json").read_text(encoding="utf-8"))
    assert summary["meta"]["gpu_names"] == ["NVIDIA GeForce RTX 3090"] * 2
    assert summary["meta"]["bandwidth_gb_s"] == 936


@pytest.mark.parametrize("content, message", [
    (None, "cannot read the sweep manifest"),
    ("{not json", "cannot read the sweep manifest"),
    ('{"host": "x"}', "has no 'runs' list"),
], ids=["missing", "not-json", "no-runs"])
def test_a_bad_manifest_exits_2(tmp_path, capsys, content, message):
    path = tmp_path / "sweep.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert sr.main(["--manifest", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_the_script_runs_from_any_directory_with_the_output_of_main(tmp_path, capsys):
    """As sweep.yml runs it: by path, from another directory; -I: no script directory on sys.path,
    the entry script puts its own there, so its sibling modules are found."""
    manifest = write_manifest(tmp_path, base_manifest())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-I", SCRIPT, "--manifest", manifest, "--out-dir", "by-script", "--no-plots"],
                          cwd=str(elsewhere), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.endswith("\nNOTE: plots not drawn (--no-plots)\n")
    by_script = elsewhere / "by-script"
    assert sorted(os.listdir(by_script)) == ["sweep.md", "sweep_summary.json"]
    assert sr.main(["--manifest", manifest, "--out-dir", str(tmp_path / "in-process"), "--no-plots"]) == 0
    assert capsys.readouterr().out == proc.stdout
    for name in ("sweep.md", "sweep_summary.json"):
        assert (by_script / name).read_bytes() == (tmp_path / "in-process" / name).read_bytes()


# ------------------------------------------------------------------ plots
def built_rows():
    _meta, rows, _notes = sweep_data.build(base_manifest(), REPORTS)
    return rows


def test_aggregate_plot_has_a_line_per_profile_and_cap_and_labelled_axes():
    plt = FakePyplot()
    assert sweep_plot.plot_aggregate(plt, {"host": "rig"}, built_rows(), "/x/agg.png") is True
    fig, ax = plt.figures[0]
    assert fig.saved == ["/x/agg.png"] and plt.closed == [fig]
    assert [line[2]["label"] for line in ax.lines] == [
        "seqs2 @ 250 W", "seqs2 @ 350 W", "default @ 250 W", "default @ 350 W"]
    assert ax.lines[2][0] == [1, 2, 4, 8] and ax.lines[2][1] == [93.0, 176.0, 322.0, 544.0]
    # one colour per profile, one line style per cap
    assert ax.lines[0][2]["color"] == ax.lines[1][2]["color"] != ax.lines[2][2]["color"]
    assert ax.lines[0][2]["linestyle"] == ax.lines[2][2]["linestyle"] != ax.lines[1][2]["linestyle"]
    assert ax.calls["set_xlabel"][0][0] == ("concurrent requests",)
    assert ax.calls["set_ylabel"][0][0] == ("aggregate output throughput (tokens/s)",)
    assert "vs concurrency" in ax.calls["set_title"][0][0][0]
    assert "legend" in ax.calls


def test_efficiency_plot_is_tps_per_w_against_the_cap_per_profile():
    plt = FakePyplot()
    assert sweep_plot.plot_efficiency(plt, {"host": "rig", "power_source": "nvidia-smi"}, built_rows(), "/x/eff.png") is True
    fig, ax = plt.figures[0]
    assert fig.saved == ["/x/eff.png"]
    lines = {line[2]["label"]: (line[0], line[1]) for line in ax.lines}
    assert set(lines) == {"seqs2", "default"}
    assert lines["default"][0] == [250, 350]
    assert lines["default"][1] == pytest.approx([544.0 / 490.0, 575.0 / 656.0], rel=1e-5)
    assert ax.calls["set_xlabel"][0][0] == ("power cap per GPU (W)",)
    assert ax.calls["set_ylabel"][0][0] == ("throughput per watt (tokens/s/W)",)
    assert ax.calls["set_title"][0][0][0] == "Energy efficiency vs power cap at 8 concurrent requests"
    assert "legend" in ax.calls


def test_efficiency_plot_names_a_mocked_power_source():
    plt = FakePyplot()
    sweep_plot.plot_efficiency(plt, {"host": "rig", "power_source": "mocked nvidia-smi (test double)"}, built_rows(), "/x/e.png")
    assert ax_title(plt).endswith("\n(power: mocked nvidia-smi (test double))")


def test_no_plot_without_data():
    rows = [sweep_data.run_row({"profile": "p", "cap_w": 250, "status": "failed"}, None, {})]
    plt = FakePyplot()
    assert sweep_plot.plot_aggregate(plt, {"host": "h"}, rows, "/x/a.png") is False
    assert sweep_plot.plot_efficiency(plt, {"host": "h", "power_source": "nvidia-smi"}, rows, "/x/b.png") is False
    assert plt.figures == []


def test_real_matplotlib_writes_png_files(tmp_path):
    pytest.importorskip("matplotlib")
    rc = sr.main(["--manifest", write_manifest(tmp_path, base_manifest()), "--out-dir", str(tmp_path)])
    assert rc == 0
    for name in (sweep_plot.PLOT_AGGREGATE, sweep_plot.PLOT_EFFICIENCY):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(data) > 10000
    markdown = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    assert "![aggregate tok/s vs concurrency](aggregate_tps_vs_concurrency.png)" in markdown


def test_aggregate_plot_names_a_power_source_that_is_not_nvidia_smi():
    plt = FakePyplot()
    sweep_plot.plot_aggregate(plt, {"host": "rig", "power_source": "test double"}, built_rows(), "/x/a.png")
    assert ax_title(plt).endswith("\n(power: test double)")
    plt = FakePyplot()
    sweep_plot.plot_aggregate(plt, {"host": "rig", "power_source": "nvidia-smi"}, built_rows(), "/x/a.png")
    assert "power:" not in ax_title(plt)


def test_draw_writes_both_plots_into_the_out_dir(monkeypatch):
    plt = FakePyplot()
    monkeypatch.setattr(sweep_plot, "import_pyplot", lambda: (plt, None))
    notes = []
    meta = {"host": "rig", "power_source": "nvidia-smi"}
    plots = sweep_plot.draw(meta, built_rows(), "/out", notes)
    assert plots == [("aggregate tok/s vs concurrency", "aggregate_tps_vs_concurrency.png"),
                     ("tok/s per W vs power cap", "tps_per_w_vs_cap.png")]
    assert [fig.saved for fig, _ax in plt.figures] == [["/out/aggregate_tps_vs_concurrency.png"], ["/out/tps_per_w_vs_cap.png"]]
    assert notes == []


def test_draw_says_why_a_plot_is_missing(monkeypatch):
    plt = FakePyplot()
    monkeypatch.setattr(sweep_plot, "import_pyplot", lambda: (plt, None))
    notes = []
    rows = [sweep_data.run_row({"profile": "p", "cap_w": 250, "status": "failed"}, None, {})]
    assert sweep_plot.draw({"host": "h", "power_source": "nvidia-smi"}, rows, "/out", notes) == []
    assert notes == ["no aggregate throughput plot: no run has probe levels",
                     "no efficiency plot: no run has both a known cap and tok/s per W"]
    assert plt.figures == []
