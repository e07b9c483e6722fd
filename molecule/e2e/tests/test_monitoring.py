"""Monitoring on the real vLLM 0.28.0 CPU build (issue 31.6): lab-e2e is its own `monitoring` host, so the real
Prometheus 2.42 of fleet_prometheus scrapes the real vLLM, node exporter with the GPU collector's textfile (mocked
nvidia-smi, a test double), the verification's textfile and the watchdog's. Every target up; the verification's figures
queryable; every panel of every dashboard returns data (a few completions first, so the rates have something to
divide); then the engine frozen while a request waits: the hung alert (the watchdog's one definition of hung,
gpuhost_watchdog_hung) is firing in /api/v1/alerts before the watchdog's restart and resolves after it. Extra time:
about 30 s of traffic, one freeze and one restart (the unserved rule's 30 s, two canaries, the restart, vLLM's start)."""
from __future__ import annotations

import glob
import json
import os
import shlex
import time
import urllib.parse

PROM = "http://127.0.0.1:9090"
STATE = "/var/lib/vllm-watchdog/state.json"
DASHBOARDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "roles", "fleet_prometheus",
                          "files", "dashboards")
STARTUP_BUDGET_S = 300  # vLLM imports, loads the tiny model and warms up in 60-120 s on this CPU box

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
while time.time() < end:
    req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', json.dumps({'model': 'tiny-qwen3',
          'prompt': 'monitoring %d: def add(a, b):' % n, 'max_tokens': 16}).encode(), {'Content-Type': 'application/json'})
    urllib.request.urlopen(req, timeout=120).read()
    n += 1
print(n)
"""

# Runs in the box: SIGSTOP every VLLM::EngineCore process (read from /proc, not pkill -f) -> {pids, at}.
FREEZE = r"""
import json, os, signal, time
pids = []
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'VLLM::EngineCore'):
            os.kill(int(p), signal.SIGSTOP)
            pids.append(int(p))
    except OSError:
        pass
print(json.dumps({'pids': pids, 'at': time.time()}))
"""

# Runs in the box (a transient unit): a client that waits for one completion, retrying, until answered -> the time.
WAITER = r"""
import json, sys, time, urllib.request
end = time.time() + float(sys.argv[1])
while time.time() < end:
    req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', json.dumps({'model': 'tiny-qwen3',
          'prompt': 'def fib(n):', 'max_tokens': 4}).encode(), {'Content-Type': 'application/json'})
    try:
        if urllib.request.urlopen(req, timeout=60).status == 200:
            json.dump({'answered_at': time.time()}, open('/run/e2e-monitoring-waiter.json', 'w'))
            break
    except Exception:
        time.sleep(2)
"""


def _get(host, path):
    return json.loads(host.check_output("python3 -c %s %s" % (shlex.quote(GET), shlex.quote(PROM + path))))


def _query(host, expr):
    return _get(host, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]


def _wait(cond, timeout, step=2.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


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


def _state(host):
    out = host.run("cat %s" % STATE)
    return json.loads(out.stdout) if out.rc == 0 else {}


def test_every_target_is_up(host):
    def all_up():
        targets = _get(host, "/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {"vllm", "node", "prometheus"} and \
            all(t["health"] == "up" for t in targets)

    assert _wait(all_up, 90), json.dumps(_get(host, "/api/v1/targets")["data"]["activeTargets"], indent=1)[-3000:]
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
    sent = int(host.check_output("python3 -c %s 30" % shlex.quote(TRAFFIC)))
    time.sleep(20)  # two scrapes of the requests' counters after the last one
    spec = bool(_query(host, "vllm:spec_decode_num_drafts_total"))
    routers = bool(_query(host, 'up{job="vllm_router"}'))
    empty, checked = [], 0
    for board, panel, expr in _panels():
        desc = panel.get("description", "")
        if ("Speculative profiles only" in desc and not spec) or ("Routers only" in desc and not routers):
            # no data is the right answer here; asked anyway, it must not be an error
            _query(host, _concrete(expr, box))
            continue
        checked += 1
        if not _query(host, _concrete(expr, box)):
            empty.append("%s / %s: %s" % (board, panel["title"], expr))
    print("\n%d completions sent; %d panel queries return data (speculative profile: %s, routers: %s)"
          % (sent, checked - len(empty), spec, routers))
    assert sent > 0 and checked > 20
    assert empty == [], "panel queries without data:\n" + "\n".join(empty)


def test_the_hung_alert_fires_before_the_watchdogs_restart_and_resolves_after(host):
    assert _wait(lambda: _state(host).get("phase") == "watching", STARTUP_BUDGET_S), _state(host)
    assert not _hung(host)
    before = _state(host).get("restarts_total", 0)
    cfg = json.loads(host.check_output("cat /etc/vllm/watchdog.json"))
    budget = (cfg["unserved_seconds"] + 3 * cfg["period"] + cfg["canary_failures"] * (cfg["canary_timeout"] + 15)
              + STARTUP_BUDGET_S)
    frozen = json.loads(host.check_output("python3 -c %s" % shlex.quote(FREEZE)))
    assert frozen["pids"], frozen
    host.run("rm -f /run/e2e-monitoring-waiter.json")
    host.check_output("systemd-run --quiet --collect --unit=e2e-monitoring-waiter -- python3 -c %s %d"
                      % (shlex.quote(WAITER), budget))
    fired_at = restarted_at = None
    try:
        end = time.monotonic() + budget
        while time.monotonic() < end and restarted_at is None:
            if fired_at is None and _hung(host):
                fired_at = time.time()
            if _state(host).get("restarts_total", 0) > before:
                restarted_at = (_state(host).get("last_verdict") or {}).get("at") or time.time()
            time.sleep(1)
    finally:
        host.run("kill -CONT %s" % " ".join(map(str, frozen["pids"])))  # if nothing restarted it, do not leave it frozen
    resolved = _wait(lambda: not _hung(host), STARTUP_BUDGET_S, 3.0)
    answered = _wait(lambda: host.run("test -s /run/e2e-monitoring-waiter.json").rc == 0, STARTUP_BUDGET_S, 3.0)
    print("\nfreeze -> hung alert firing %.1f s, -> watchdog restart %.1f s; resolved after the restart: %s"
          % ((fired_at or 0) - frozen["at"], (restarted_at or 0) - frozen["at"], resolved))
    assert fired_at is not None, "VllmEngineHung never fired: %s" % _state(host)
    assert restarted_at is not None, "the watchdog did not restart the frozen engine: %s" % _state(host)
    assert fired_at < restarted_at, (fired_at, restarted_at)
    assert resolved and answered, _get(host, "/api/v1/alerts")
