"""playbooks/files/tune_report.py: tune.json -> tune.md and tune-pareto.png.

The fixture tests/unit/data/tune_report/tune.json is shaped like what playbooks/tune.yml's "Write tune.json"
task writes, its trials and choice made by the tune filters (plugins/filter/tune.py); the first test keeps the
fixture in step with both. expected_tune.md beside it is the tune.md written from it. Variations of the
fixture are the cases of tests/unit/data/tune_report.yaml. The plot is checked with a recording test double
of pyplot (report_helpers.FakePyplot) and, where matplotlib is installed, for real.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuhost.inference.plugins.filter import tune
from ansible_collections.gpuhost.inference.tests.unit.paths import DATA, ROOT, case_ids, load_cases, tasks_of
from ansible_collections.gpuhost.inference.tests.unit.playbooks.report_helpers import (
    FILES, FakePyplot, ax_title, files_module, no_matplotlib)

SCRIPT = os.path.join(FILES, "tune_report.py")
FIXTURE = os.path.join(DATA, "tune_report", "tune.json")
EXPECTED_MD = os.path.join(DATA, "tune_report", "expected_tune.md")
CASES = load_cases("tune_report.yaml")
CONSTRAINT_COLUMNS = ["min_full_context_concurrency", "ttft_p95_s", "zero_errors"]

tr = files_module("tune_report")


def fixture():
    with open(FIXTURE, encoding="utf-8") as handle:
        return json.load(handle)


def expected_md():
    with open(EXPECTED_MD, encoding="utf-8") as handle:
        return handle.read()


def changed(changes):
    """The fixture with {dotted path: value} set (a number in a path indexes a list)."""
    manifest = fixture()
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = manifest
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return manifest


def write(tmp_path, manifest):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(manifest, indent=4, sort_keys=True) + "\n", encoding="utf-8")
    return str(path)


def trials_table(markdown):
    """(header, {trial index: {column: cell}}) of tune.md's table of trials."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| # |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    assert lines[start + 1] == "|" + "---|" * len(header)
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows[int(cells[0])] = dict(zip(header, cells))
    return header, rows


def filter_trial(report, started):
    """A trial as playbooks/tasks/tune_trial.yml records it, on the fixture's constraints."""
    manifest = fixture()
    trial = tune.tune_trial(report, {"max_num_seqs": 16}, started=started, target_concurrency=manifest["target_concurrency"],
                            constraints=manifest["constraints"], objective=manifest["objective"])
    trial["same_as_baseline"] = False
    manifest["trials"].append(trial)
    return manifest


# ------------------------------------------------------------------ the fixture
def test_the_fixture_is_shaped_like_what_tune_yml_writes():
    with open(os.path.join(ROOT, "playbooks", "tune.yml"), encoding="utf-8") as handle:
        play = yaml.safe_load(handle)
    task = next(t for t in tasks_of(play) if str(t.get("name", "")).startswith("Write tune.json"))
    manifest = fixture()
    assert set(manifest) == set(task["vars"]["__tune_manifest"])
    made = tune.tune_trial({}, {}, started=False, constraints=manifest["constraints"])
    for trial in manifest["trials"]:
        assert set(trial) - {"baseline"} == set(made) | {"same_as_baseline"}
        assert set(trial["metrics"]) == set(made["metrics"])
        assert trial["feasible"] == (trial["started"] and all(c["ok"] for c in trial["checks"].values()))
    assert manifest["trials"][0]["baseline"] is True
    assert not any("baseline" in trial for trial in manifest["trials"][1:])
    assert set(manifest["baseline"]) == set(made) | {"same_as_baseline", "profile"}
    # the choice is the filter's, among the trials that are not the baseline
    assert manifest["choice"] == tune.tune_choice(manifest["trials"][1:])
    assert manifest["profile"]["settings"]["max_num_seqs"] == manifest["choice"]["chosen"]["config"]["max_num_seqs"]


# ------------------------------------------------------------------ tune.md
def test_main_writes_tune_md_and_the_plot_beside_tune_json(tmp_path, monkeypatch, capsys):
    plt = FakePyplot()
    monkeypatch.setattr(tr, "import_pyplot", lambda: (plt, None))
    assert tr.main([write(tmp_path, fixture())]) == 0
    markdown = (tmp_path / "tune.md").read_text(encoding="utf-8")
    assert markdown == expected_md()
    assert capsys.readouterr().out == markdown  # no NOTE: the plot was drawn
    fig, _ax = plt.figures[0]
    assert fig.saved == [str(tmp_path / "tune-pareto.png")]
    assert plt.closed == [fig]


def test_tune_md_names_the_choice_the_constraints_and_the_ratio():
    markdown = tr.markdown(fixture())
    lines = markdown.splitlines()
    assert lines[0] == "# Tune report: rig-3090x2"
    assert "- objective: tps at concurrency 4" in lines
    assert ('- constraints: {"agent_ttft_p95_s": null, "min_full_context_concurrency": 1.5, "ttft_p95_s": 0.5, '
            '"zero_errors": true}') in lines
    assert "- original profile (baseline): default" in lines
    assert "- result: chose max_num_seqs=4 (objective 341.5) among 2 feasible of 3 trials" in lines
    header, rows = trials_table(markdown)
    # one column per constraint checked (agent_ttft_p95_s is null: not checked, no column)
    assert header[9:-2] == CONSTRAINT_COLUMNS
    assert [rows[i]["configuration"] for i in sorted(rows)] == ["baseline", "max_num_seqs=2", "max_num_seqs=4", "max_num_seqs=8"]
    assert [i for i in rows if rows[i]["chosen"]] == [2]
    assert rows[2]["chosen"] == "**yes**"
    assert (rows[2]["tok/s"], rows[2]["TTFT p95 s"], rows[2]["agent later-turn TTFT p95 s"]) == ("342", "0.21", "0.78")
    # the fastest trial fails the TTFT limit: shown, marked, not chosen
    assert rows[3]["tok/s"] == "352" and rows[3]["TTFT p95 s"] == "0.62"
    assert [rows[3][c] for c in CONSTRAINT_COLUMNS] == ["pass", "FAIL", "pass"]
    assert [rows[0][c] for c in CONSTRAINT_COLUMNS] == ["pass", "pass", "pass"]
    assert lines[-1] == "Tuned vs baseline (tps): 342 / 300 = 1.14x"


@pytest.mark.parametrize("case", CASES["markdown"], ids=case_ids(CASES["markdown"]))
def test_tune_md_cases(case):
    markdown = tr.markdown(changed(case["set"]))
    lines = markdown.splitlines()
    _header, rows = trials_table(markdown)
    for index, cells in (case.get("rows") or {}).items():
        assert {column: rows[index][column] for column in cells} == cells, index
    for line in case.get("lines") or []:
        assert line in lines
    for text in case.get("absent") or []:
        assert text not in markdown


def test_a_constraint_only_some_trials_were_checked_against_is_a_dash_for_the_others():
    # tune_trial adds target_level to a trial that started without the target level in its report
    report = {"levels": [{"concurrency": 1, "aggregate_tps": 95.0, "ttft_s": {"p95": 0.08}, "errors": {}}],
              "startup_report": {"full_context_concurrency": 2.14}}
    manifest = filter_trial(report, started=True)
    assert "target_level" in manifest["trials"][4]["checks"]
    header, rows = trials_table(tr.markdown(manifest))
    assert header[9:-2] == ["min_full_context_concurrency", "target_level", "ttft_p95_s", "zero_errors"]
    assert [rows[i]["target_level"] for i in range(4)] == ["-"] * 4
    assert [rows[4][c] for c in header[9:-2]] == ["pass", "FAIL", "FAIL", "pass"]
    assert (rows[4]["started"], rows[4]["tok/s"], rows[4]["objective"]) == ("yes", "-", "-")


def test_a_trial_that_did_not_start_fails_every_constraint_and_is_not_drawn():
    manifest = filter_trial({}, started=False)
    header, rows = trials_table(tr.markdown(manifest))
    assert (rows[4]["configuration"], rows[4]["started"], rows[4]["tok/s"], rows[4]["errors"]) == (
        "max_num_seqs=16", "no", "-", "-")
    assert [rows[4][c] for c in header[9:-2]] == ["FAIL"] * 3
    plt = FakePyplot()
    tr.pareto_png(plt, manifest, "/x/p.png")
    assert len(plt.figures[0][1].calls["scatter"]) == 4


# ------------------------------------------------------------------ exit codes
@pytest.mark.parametrize("content, message", [
    (None, "cannot read "),
    ("{not json", "cannot read "),
    ("[]", "is not a JSON object"),
    ('{"trials": []}', "has no host, objective, constraints, target_concurrency, original_profile"),
    (json.dumps(dict(fixture(), trials={})), "'trials' is not a list"),
], ids=["missing", "not-json", "not-an-object", "keys-missing", "trials-not-a-list"])
def test_an_unusable_tune_json_exits_2(tmp_path, capsys, content, message):
    path = tmp_path / "tune.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert tr.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune_report: ") and message in err
    assert not (tmp_path / "tune.md").exists()


def test_no_argument_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        tr.main([])
    assert exc.value.code == 2


def test_without_matplotlib_tune_md_is_written_and_the_reason_printed(tmp_path, monkeypatch, capsys):
    no_matplotlib(monkeypatch)
    assert tr.main([write(tmp_path, fixture())]) == 0
    assert (tmp_path / "tune.md").read_text(encoding="utf-8") == expected_md()
    assert not (tmp_path / "tune-pareto.png").exists()
    printed = capsys.readouterr().out
    assert printed.startswith(expected_md())
    notes = [line for line in printed.splitlines() if line.startswith("NOTE: ")]
    assert len(notes) == 1
    assert notes[0].startswith("NOTE: no Pareto plot: matplotlib is not usable with ")
    assert "pip install matplotlib" in notes[0]


def test_the_script_runs_from_any_directory(tmp_path):
    """As tune.yml runs it, by path; here from tune.json's directory with a relative path, and -I (no script
    directory on sys.path: the script puts its own there for report_common)."""
    write(tmp_path, fixture())
    proc = subprocess.run([sys.executable, "-I", SCRIPT, "tune.json"], cwd=str(tmp_path), capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "tune.md").read_text(encoding="utf-8") == expected_md()
    assert proc.stdout.startswith(expected_md())


# ------------------------------------------------------------------ the plot
@pytest.mark.parametrize("case", CASES["pareto"], ids=case_ids(CASES["pareto"]))
def test_pareto_plot(case):
    plt = FakePyplot()
    tr.pareto_png(plt, changed(case["set"]), "/x/tune-pareto.png")
    fig, ax = plt.figures[0]
    assert fig.saved == ["/x/tune-pareto.png"] and plt.closed == [fig]
    scatters = [(args[0], args[1], kwargs["color"]) for args, kwargs in ax.calls["scatter"]]
    labels = [(args[1], args[0]) for args, _kwargs in ax.calls["annotate"]]
    assert scatters == [(x, y, colour) for x, y, colour, _label in case["points"]]
    assert labels == [((x, y), label) for x, y, _colour, label in case["points"]]
    assert ax.calls["set_xlabel"][0][0] == ("TTFT p95 (s)",)
    assert ax.calls["set_ylabel"][0][0] == ("aggregate tok/s",)
    assert ax_title(plt) == "tune: rig-3090x2"
    if case["limit"] is None:
        assert "axvline" not in ax.calls and "legend" not in ax.calls
    else:
        assert ax.calls["axvline"] == [((case["limit"],), {"color": "black", "linestyle": "--",
                                                           "label": "TTFT p95 limit %s s" % case["limit"]})]
        assert "legend" in ax.calls


def test_real_matplotlib_writes_the_png(tmp_path):
    pytest.importorskip("matplotlib")
    assert tr.main([write(tmp_path, fixture())]) == 0
    data = (tmp_path / "tune-pareto.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10000
