"""The fleet's alert rules and dashboards are code (issue 31.3/31.4): every rule file `promtool check rules` clean,
every rules file tested by `promtool test rules` (tests/prometheus/*.test.yml) with a case firing and one not firing
per alert, and no rule or dashboard panel naming a metric that no capture of the real exporters emits (the captures
under tests/fixtures/: vLLM 0.28.0, vllm-router 0.1.17, node exporter 1.5 with the collection's textfiles)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text import samples
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, ROOT, TESTS, case_ids, load_cases

ROLE = os.path.join(ROOT, "roles", "fleet_prometheus")
RULES = sorted(glob.glob(os.path.join(ROLE, "files", "rules", "*.rules.yml")))
RULE_TESTS = sorted(glob.glob(os.path.join(TESTS, "prometheus", "*.test.yml")))
DASHBOARDS = sorted(glob.glob(os.path.join(ROLE, "files", "dashboards", "*.json")))
# What the real exporters emit, as captured (tests/fixtures/*/README.md say how each was taken).
CAPTURES = sorted(set(glob.glob(os.path.join(FIXTURES, "**", "*.prom"), recursive=True)
                      + glob.glob(os.path.join(FIXTURES, "**", "metrics*.txt"), recursive=True)))
# Series Prometheus itself makes for every target or rule, not any exporter's.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added", "ALERTS",
                  "ALERTS_FOR_STATE"}
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                "offset", "inf", "nan", "atan2", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
                "bottomk", "quantile", "count_values", "group"}
CASES = load_cases("prometheus_rules_cases.yaml")


def promtool():
    """promtool: $PROMTOOL, the checkout's .cache (scripts/bootstrap.sh unpacks Debian's prometheus there; from
    ansible-test's copy of the collection the same cache is four levels up), else PATH."""
    for path in (os.environ.get("PROMTOOL"), os.path.join(ROOT, ".cache", "prometheus", "usr", "bin", "promtool"),
                 os.path.join(ROOT, "..", "..", "..", "..", "prometheus", "usr", "bin", "promtool"), shutil.which("promtool")):
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail("promtool not found: `make bootstrap` (scripts/bootstrap.sh) unpacks it into .cache/prometheus")
    return None


def metric_names(expr):
    """The metric names a PromQL expression selects (Grafana's $variables allowed): strings, label matchers,
    range and offset brackets and grouping clauses removed, then every identifier that is no function call and
    no keyword."""
    text = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*(?::[a-z]+)?\}?", "x", expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', text)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def captured_names():
    names = set()
    for path in CAPTURES:
        with open(path, encoding="utf-8") as handle:
            names.update(s.name for s in samples(handle.read()))
    return names


def rule_exprs():
    out = []
    for path in RULES:
        with open(path, encoding="utf-8") as handle:
            for group in yaml.safe_load(handle)["groups"]:
                for rule in group["rules"]:
                    out.append((os.path.basename(path), rule.get("alert") or rule.get("record"), str(rule["expr"])))
    return out


def panel_exprs():
    out = []
    for path in DASHBOARDS:
        with open(path, encoding="utf-8") as handle:
            board = json.load(handle)
        panels = list(board.get("panels", []))
        while panels:
            panel = panels.pop(0)
            panels.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((os.path.basename(path), panel.get("title"), target["expr"]))
    return out


@pytest.mark.parametrize("case", CASES["names"], ids=case_ids(CASES["names"]))
def test_metric_names_of_an_expression(case):
    assert metric_names(case["expr"]) == set(case["names"])


def test_rule_files_pass_promtool_check():
    assert RULES, "no rule files under roles/fleet_prometheus/files/rules/"
    proc = subprocess.run([promtool(), "check", "rules"] + RULES, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rule_unit_tests_pass():
    assert RULE_TESTS, "no promtool tests under tests/prometheus/"
    proc = subprocess.run([promtool(), "test", "rules"] + RULE_TESTS, capture_output=True, text=True, check=False,
                          cwd=os.path.join(TESTS, "prometheus"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_rule_file_is_tested_and_every_alert_has_a_firing_and_a_quiet_case():
    tested_files, firing, quiet = set(), set(), set()
    for path in RULE_TESTS:
        with open(path, encoding="utf-8") as handle:
            spec = yaml.safe_load(handle)
        tested_files.update(os.path.basename(f) for f in spec.get("rule_files", []))
        for test in spec.get("tests", []):
            for check in test.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {name for _f, name, _e in rule_exprs()}
    assert {os.path.basename(p) for p in RULES} - tested_files == set()
    assert sorted(alerts - firing) == [], "alerts without a firing case"
    assert sorted(alerts - quiet) == [], "alerts without a case where they do not fire"


def test_rules_and_panels_name_only_metrics_the_real_exporters_emit():
    known = captured_names() | PROMETHEUS_OWN
    assert "vllm:num_preemptions_total" in known and "vllm_router_cb_state" in known
    unknown = []
    for where, name, expr in rule_exprs() + panel_exprs():
        unknown += ["%s: %s: %s" % (where, name, metric) for metric in sorted(metric_names(expr) - known)]
    assert unknown == [], "names no capture under tests/fixtures/ holds:\n" + "\n".join(unknown)


def test_the_lab_apt_pool_holds_the_monitoring_packages():
    with open(os.path.join(ROOT, "scripts", "apt-pool.sh"), encoding="utf-8") as handle:
        line = next(ln for ln in handle if ln.startswith("PACKAGES=${APT_POOL_PACKAGES:-"))
    pool = line.split(":-", 1)[1].rstrip("}\n").split()
    wanted = []
    for role in ("node_metrics", "fleet_prometheus"):
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
            defaults = yaml.safe_load(handle)
        wanted += defaults["%s_packages" % role] + defaults.get("%s_alertmanager_packages" % role, [])
    assert "prometheus-alertmanager" in wanted and set(wanted) - set(pool) == set()
