"""Monitoring on the real vLLM 0.28.0 CPU build (issue 31.6): lab-e2e is its own `monitoring` host, so the real
Prometheus 2.42 of fleet_prometheus scrapes the real vLLM, node exporter with the GPU collector's textfile (mocked
nvidia-smi, a test double), the verification's textfile and the watchdog's. Every target up; the verification's figures
queryable; every panel of every dashboard returns data (a few completions first, so the rates have something to
divide); and a recorder of /api/v1/alerts started for tests/test_watchdog_alert.py, which proves on test_watchdog.py's
freeze that the hung alert (the watchdog's one definition of hung, gpuhost_watchdog_hung) is firing before the
watchdog's restart and resolves after it; Alertmanager (the distribution's) beside Prometheus and a webhook receiver
(tests/doubles/alert_webhook_double.py) for the hung alert's page. Extra time: about 30 s of traffic and 20 s for two
scrapes."""
from __future__ import annotations

import glob
import json
import os
import shlex
import time
import urllib.parse

from lab_checks import start_webhook_receiver, wait

PROM = "http://127.0.0.1:9090"
STATE = "/var/lib/vllm-watchdog/state.json"
DASHBOARDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles", "fleet_prometheus",
                          "files", "dashboards")

# Runs in the box: GET a Prometheus API path -> its JSON (the box has no curl of its own to rely on).
GET = r"""
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())
"""

# Runs in the box: N short completions one after the other for S seconds (the dashboards' rates get data).
TRAFFIC = r"""
import json, sys, time, urllib.request
end = time.time() + float(sys.argv[1])
n = 0
model = json.load(urllib.request.urlopen('http://127.0.0.1:8000/v1/models', timeout=30))['data'][0]['id']
while time.time() < end:
    req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', json.dumps({'model': model,
          'prompt': 'monitoring %d: def add(a, b):' % n, 'max_tokens': 16}).encode(), {'Content-Type': 'application/json'})
    urllib.request.urlopen(req, timeout=120).read()
    n += 1
print(n)
"""

# Runs in the box (a transient unit, until stopped; at most 30 minutes): every 2 s one JSON line - the time, the firing
# VllmEngineHung alerts' labels and the watchdog's restart count and last verdict.
RECORDER = r"""
import json, sys, time, urllib.request
prom, state_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
end = time.time() + 1800
while time.time() < end:
    rec = {'t': time.time(), 'hung': None, 'restarts': None, 'verdict_at': None}
    try:
        alerts = json.loads(urllib.request.urlopen(prom + '/api/v1/alerts', timeout=5).read())['data']['alerts']
        rec['hung'] = [a['labels'] for a in alerts if a['labels'].get('alertname') == 'VllmEngineHung' and a['state'] == 'firing']
    except Exception as exc:
        rec['error'] = str(exc)
    try:
        st = json.load(open(state_file))
        rec['restarts'] = st.get('restarts_total', 0)
        rec['verdict_at'] = (st.get('last_verdict') or {}).get('at')
    except Exception:
        pass
    with open(out, 'a') as fh:
        fh.write(json.dumps(rec) + '\n')
    time.sleep(2)
"""
RECORDER_UNIT = "e2e-monitoring-alerts"
RECORD = "/run/e2e-monitoring-alerts.jsonl"
# The stand-in for a chat or paging webhook (issue 45.5) that the box's Alertmanager sends to (host_vars: 127.0.0.1:19093).
WEBHOOK_UNIT = "e2e-alert-webhook"
WEBHOOK_RECORD = "/run/e2e-alert-webhook.jsonl"


def _get(host, path):
    return json.loads(host.check_output("python3 -c %s %s" % (shlex.quote(GET), shlex.quote(PROM + path))))


def _query(host, expr):
    return _get(host, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]


def _queries(host, exprs):
    """Each expression's result, asked in one round trip into the box: {expr: result or {"error": ...}}."""
    code = ("import json, sys, urllib.parse, urllib.request\n"
            "out = {}\n"
            "for e in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        url = sys.argv[2] + '/api/v1/query?' + urllib.parse.urlencode({'query': e})\n"
            "        out[e] = json.loads(urllib.request.urlopen(url, timeout=30).read())['data']['result']\n"
            "    except Exception as exc:\n"
            "        out[e] = {'error': str(exc)}\n"
            "print(json.dumps(out))\n")
    command = "python3 -c %s %s %s" % (shlex.quote(code), shlex.quote(json.dumps(exprs)), shlex.quote(PROM))
    return json.loads(host.check_output(command))


def _panels():
    for path in sorted(glob.glob(os.path.join(DASHBOARDS, "*.json"))):
        with open(path, encoding="utf-8") as handle:
            board = json.load(handle)
        stack = list(board["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                yield os.path.basename(path), panel, target["expr"]


def _box(host):
    """The box's inventory name (molecule's instance, the target label `box`)."""
    return host.backend.get_hostname()


def _concrete(expr, box):
    """A panel's query as Grafana sends it for the box over a 2-minute rate window."""
    return expr.replace("$__rate_interval", "2m").replace("${box}", box).replace("$box", box)


def _hung(host):
    return [a for a in _get(host, "/api/v1/alerts")["data"]["alerts"]
            if a["labels"].get("alertname") == "VllmEngineHung" and a["state"] == "firing"]


def test_every_target_is_up(host):
    def all_up():
        targets = _get(host, "/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {"vllm", "node", "prometheus"} and \
            all(t["health"] == "up" for t in targets)

    assert wait(all_up, 90), json.dumps(_get(host, "/api/v1/targets")["data"]["activeTargets"], indent=1)[-3000:]
    vllm = _query(host, 'up{job="vllm"}')
    assert [r["metric"].get("box") for r in vllm] == [_box(host)] and vllm[0]["metric"].get("profile") == "lab", vllm


def test_the_verification_is_queryable(host):
    box = _box(host)
    report = json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))
    passed = _query(host, 'gpuhost_verify_passed{box="%s"}' % box)
    assert [float(r["value"][1]) for r in passed] == [1.0 if report["passed"] else 0.0], passed
    kv = _query(host, 'gpuhost_verify_kv_cache_tokens{box="%s"}' % box)
    assert [float(r["value"][1]) for r in kv] == [float(report["startup_report"]["kv_cache_tokens"])], kv
    levels = _query(host, 'gpuhost_verify_aggregate_tokens_per_second{box="%s", sampling="greedy"}' % box)
    assert sorted(int(r["metric"]["concurrency"]) for r in levels) == sorted(lv["concurrency"] for lv in report["levels"])
    assert _query(host, 'gpuhost_verify_ttft_p95_seconds{box="%s"} > 0' % box), "no TTFT baseline for the latency alert"
    info = _query(host, 'gpuhost_verify_info{box="%s"}' % box)
    assert info and info[0]["metric"]["verified_profile"] == report["profile"], info


def test_every_dashboard_query_returns_data(host):
    box = _box(host)
    # 15 s of requests: three scrapes of the counters during them (the 5 s interval of lab-e2e's host_vars).
    sent = int(host.check_output("python3 -c %s 15" % shlex.quote(TRAFFIC)))
    spec = bool(_query(host, "vllm:spec_decode_num_drafts_total"))
    routers = bool(_query(host, 'up{job="vllm_router"}'))
    # The verification panels show the last verification: without an agent level (the side effect's last one measures
    # one load level) its agent figures are rightly absent.
    report = json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))
    agent = report["agent"].get("enabled", True)
    panels = list(_panels())
    results = _queries(host, sorted({_concrete(expr, box) for _b, _p, expr in panels}))
    errors = ["%s: %s" % (e, r["error"]) for e, r in results.items() if isinstance(r, dict)]
    assert errors == [], "panel queries Prometheus refused:\n" + "\n".join(errors)
    empty, checked = [], 0
    for board, panel, expr in panels:
        desc = panel.get("description", "")
        if ("Speculative profiles only" in desc and not spec) or ("Routers only" in desc and not routers) \
                or ("gpuhost_verify_agent_" in expr and not agent):
            continue  # no data is the right answer here (asked anyway above: not an error)
        checked += 1
        if not results[_concrete(expr, box)]:
            empty.append((board, panel["title"], expr))
    # A panel over a rate needs two scrapes of a counter the requests created, a recording rule an evaluation after
    # them, later still on the loaded machine: the empty ones asked again every 3 s for up to 45 s (two scrapes and an
    # evaluation at lab-e2e's 5 s intervals, and room for a late one).
    deadline = time.monotonic() + 45
    while empty and time.monotonic() < deadline:
        time.sleep(3)
        again = _queries(host, sorted({_concrete(expr, box) for _b, _t, expr in empty}))
        empty = [e for e in empty if not again[_concrete(e[2], box)] or isinstance(again[_concrete(e[2], box)], dict)]
    print("\n%d completions sent; %d panel queries return data (speculative profile: %s, routers: %s)"
          % (sent, checked - len(empty), spec, routers))
    assert sent > 0 and checked > 20
    # The energy panels read the last verification's power figures: what it says of them, if they are missing.
    power = {key: value for key, value in report.items() if "power" in key}
    power["levels"] = [
        {k: level.get(k) for k in ("concurrency", "power_window_s", "power_w", "power_note")} for level in report.get("levels") or []]
    assert empty == [], "panel queries without data:\n" + "\n".join("%s / %s: %s" % e for e in empty) \
        + "\nthe last verification's power: %s" % json.dumps(power)


def test_the_alert_recorder_runs(host):
    """The hung alert's proof rides on tests/test_watchdog.py's freeze (one freeze and one restart in CI, not two):
    from here on a transient unit records every 2 s the firing VllmEngineHung alerts and the watchdog's restart count;
    tests/test_watchdog_alert.py (after test_watchdog.py) judges the record and stops the recorder."""
    assert not _hung(host), _get(host, "/api/v1/alerts")
    host.run("systemctl stop %s" % RECORDER_UNIT)
    host.run("rm -f %s" % RECORD)
    host.check_output("systemd-run --quiet --collect --unit=%s -- python3 -c %s %s %s %s"
                      % (RECORDER_UNIT, shlex.quote(RECORDER), PROM, STATE, RECORD))
    assert wait(lambda: host.run("test -s %s" % RECORD).rc == 0, 30), host.run("journalctl -u %s -n 20" % RECORDER_UNIT).stdout


def test_alertmanager_and_the_webhook_receiver_run(host):
    """The distribution's Alertmanager beside Prometheus (loopback, no cluster port), and the webhook receiver on the
    box that stands in for a chat or paging webhook: tests/test_watchdog_alert.py reads what reached it during
    tests/test_watchdog.py's freeze (the hung alert's page)."""
    assert host.service("prometheus-alertmanager").is_running
    args = host.check_output("cat /etc/default/prometheus-alertmanager")
    assert "--web.listen-address=127.0.0.1:9093" in args and "--cluster.listen-address=" in args, args
    assert wait(lambda: _get(host, "/api/v1/alertmanagers")["data"]["activeAlertmanagers"], 60)
    start_webhook_receiver(host, WEBHOOK_UNIT, WEBHOOK_RECORD)
