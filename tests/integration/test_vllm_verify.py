"""testinfra checks of roles/vllm_verify on the lab boxes (run by molecule's verifier).

In the default scenario lab-tp2 and lab-single run the vLLM API test double (tests/doubles/vllm_double/)
through the real launcher and unit; the converge ran vllm_verify, which must have passed, so:
the profile is recorded as the last good one, a JSON and a Markdown report are on the host
with a positive aggregate throughput for every level and the startup-report figures, and the
server still serves. Failure messages carry the unit's journal.
"""
from __future__ import annotations

import json

import pytest

# The default scenario's converged boxes these checks read (its verifier also runs the fault checks,
# whose modules name lab-faults): testinfra_hosts, since a --hosts option would override every module's own.
testinfra_hosts = ["lab-tp2", "lab-single"]

STATE = "/var/lib/vllm/verify"
REPORTS = STATE + "/reports"
ENV_FILE = "/etc/default/vllm"
UNIT = "vllm.service"


def journal(host, lines=40):
    return host.run("journalctl -u %s -n %d --no-pager -o cat" % (UNIT, lines)).stdout


def active_profile(host):
    for line in host.file(ENV_FILE).content_string.splitlines():
        if line.startswith("VLLM_PROFILE="):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise AssertionError("%s has no VLLM_PROFILE line" % ENV_FILE)


@pytest.fixture(scope="module")
def report(host):
    with host.sudo():
        latest = host.file(REPORTS + "/latest.json")
        assert latest.exists, "no %s/latest.json\n%s" % (REPORTS, journal(host))
        return json.loads(host.check_output("cat %s/latest.json" % REPORTS))


def test_last_good_profile_is_the_active_one(host):
    with host.sudo():
        good = host.file(STATE + "/last_good_profile")
        assert good.exists and good.is_file, journal(host)
        assert good.mode == 0o644
        assert good.content_string.strip() == active_profile(host)


def test_report_files_on_the_host(host, report):
    with host.sudo():
        stem = "%s/%s" % (REPORTS, host.file(REPORTS + "/latest.json").linked_to.rsplit("/", 1)[1][: -len(".json")])
        assert host.file(stem + ".md").exists
        markdown = host.file(stem + ".md").content_string
    assert "# vLLM verification:" in markdown and "## Decode levels" in markdown
    assert report["passed"] is True, report["gates"]
    assert report["profile"] == active_profile(host)
    assert report["vllm"]["version"] == "0.28.0"


def test_every_level_has_positive_throughput(host, report):
    levels = report["levels"]
    assert [lv["concurrency"] for lv in levels] == sorted(lv["concurrency"] for lv in levels)
    assert levels, "no decode levels in the report"
    for level in levels:
        assert level["aggregate_tps"] > 0, level
        assert level["ok"] == level["requests"] and not level["errors"], level
        assert level["output_tokens"] == level["requests"] * report["probe"]["max_tokens"], level
        assert level["ttft_s"]["p50"] > 0, level


def test_startup_report_figures(host, report):
    kv = report["startup_report"]
    assert kv["kv_cache_tokens"] > 0
    assert kv["journal"]["kv_cache_tokens"] == kv["kv_cache_tokens"]
    assert kv["cross_check"]["match"] is True, kv["cross_check"]
    assert int(kv["metrics_cache_config_info"]["kv_cache_size_tokens"]) == kv["kv_cache_tokens"]
    assert kv["full_context_concurrency"] >= 1.0
    assert abs(kv["full_context_concurrency"] - kv["kv_cache_tokens"] / kv["max_model_len"]) < 0.01
    assert kv["journal"]["init_seconds"] is not None


def test_sampled_levels_ran_as_clients_send(report):
    wanted = report["probe"]["sampled_concurrency"]
    assert [lv["concurrency"] for lv in report["sampled"]] == wanted
    for level in report["sampled"]:
        assert level["temperature"] == report["probe"]["temperature"] > 0, level
        assert 0 < level["top_p"] == report["probe"]["top_p"] <= 1, level
        assert level["ok"] == level["requests"] > 0 and not level["errors"], level
        assert level["output_tokens"] == level["requests"] * report["probe"]["max_tokens"], level
    if wanted:
        assert [g["ok"] for g in report["gates"] if g["name"] == "sampled"] == [True], report["gates"]


def test_power_source_is_named(report):
    # the lab boxes run the Python nvidia-smi mock: its watts must be reported as a test double's
    assert report["power_source"] == "test double", report["power"]
    assert report["power"]["power_source"] == "test double"
    assert report["power"]["gpu_serves_model"] is False


def test_context_probe_and_gates(report):
    context = report["context"]
    assert context["fit"]["status"] == 200 and context["over"]["status"] == 400, context
    assert context["ok"] is True and context["fit"]["complete"] is True, context
    assert context["fit"]["output_tokens"] == context["max_tokens"], context
    assert context["over"]["limit"] == context["limit"], context
    assert "maximum context length is %d tokens" % context["limit"] in context["over"]["message"]
    assert {g["name"] for g in report["gates"]} >= {"min_full_context_concurrency", "max_errors", "context", "stability"}
    assert all(g["ok"] for g in report["gates"]), report["gates"]


def test_power_section(host, report):
    power = report["power"]
    assert power["unit"] == "gpu-power-limit.service"
    assert power["cap_applied"] is True, power
    assert len(power["limits"]) == report["gpus"]["count"] > 0


def test_server_still_serves(host, report):
    assert host.service(UNIT).is_running, journal(host)
    url = report["vllm"]["base_url"].rstrip("/") + "/health"
    out = host.run("python3 -c \"import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).status)\" %s" % url)
    assert out.rc == 0 and out.stdout.strip() == "200", out.stderr + journal(host)
