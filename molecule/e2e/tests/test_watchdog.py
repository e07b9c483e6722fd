"""The watchdog on the real vLLM 0.28.0 CPU build (issue 23), with the e2e inventory's short settings (period 5 s,
stall_seconds 30): installed and on, no restart under a sustained heavy load (concurrency 8, ~1,000-token prompts,
65 s > 2 x stall_seconds), then one freeze of the engine core with work pending: the watchdog's stalled verdict names
the rule and the stalled counters, the unit is restarted, and a sampled completion is answered afterwards, within
stall_seconds + one period + RestartSec + the startup. Extra time: about 65 s of load plus one restart."""
from __future__ import annotations

import json
import shlex
import time

STATE = "/var/lib/vllm-watchdog/state.json"
CONFIG = "/etc/vllm/watchdog.json"
STARTUP_BUDGET_S = 300  # this CPU box: vLLM imports, loads the tiny model and warms up in 60-120 s

# Runs in the box: N streams of long-prompt completions for S seconds -> {ok, errors}.
LOAD = r"""
import json, sys, threading, time, urllib.request
seconds, streams, tokens = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = 'http://127.0.0.1:8000'
model = json.load(urllib.request.urlopen(base + '/v1/models'))['data'][0]['id']
prompt = ' '.join('word%d' % i for i in range(450))
end = time.time() + seconds
n = {'ok': 0, 'errors': 0}
def one():
    while time.time() < end:
        body = json.dumps({'model': model, 'prompt': '%f ' % time.time() + prompt, 'max_tokens': tokens,
                           'ignore_eos': True}).encode()
        req = urllib.request.Request(base + '/v1/completions', body, {'Content-Type': 'application/json'})
        try:
            urllib.request.urlopen(req, timeout=900).read()
            n['ok'] += 1
        except Exception:
            n['errors'] += 1
            time.sleep(1)
threads = [threading.Thread(target=one) for _ in range(streams)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(n))
"""

# Runs in the box: wait (polling /metrics, up to 60 s) until work is pending, then SIGSTOP every VLLM::EngineCore
# process in the same breath -> {pids, pending} (in one script: no round trip between seeing the work and the
# freeze; not pkill -f, which would match this shell).
FREEZE = r"""
import json, os, signal, sys, time, urllib.request
sys.path.insert(0, '/usr/local/lib/gpuhost-inference')  # the collection's Prometheus text reader, installed there
import prometheus_text
def pending():
    text = urllib.request.urlopen('http://127.0.0.1:8000/metrics', timeout=5).read().decode()
    return int(sum(prometheus_text.total(text, name) or 0
                   for name in ('vllm:num_requests_running', 'vllm:num_requests_waiting')))
end = time.time() + 60
n = 0
while time.time() < end:
    n = pending()
    if n > 0:
        break
    time.sleep(0.1)
pids = []
for p in os.listdir('/proc'):
    try:
        if n > 0 and p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'VLLM::EngineCore'):
            os.kill(int(p), signal.SIGSTOP)
            pids.append(int(p))
    except OSError:
        pass
print(json.dumps({'pids': pids, 'pending': n, 'at': time.time()}))
"""

# Runs in the box: one sampled completion -> HTTP status (0: no answer).
SAMPLE = r"""
import json, urllib.request
req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', json.dumps({'model': 'tiny-qwen3',
      'prompt': 'def fib(n):', 'max_tokens': 8, 'temperature': 0.7, 'top_p': 0.95}).encode(),
      {'Content-Type': 'application/json'})
try:
    print(urllib.request.urlopen(req, timeout=5).status)
except Exception:
    print(0)
"""


def _py(host, code, *args):
    return host.check_output("python3 -c %s %s" % (shlex.quote(code), " ".join(shlex.quote(str(a)) for a in args)))


def _state(host):
    out = host.run("cat %s" % STATE)
    return json.loads(out.stdout) if out.rc == 0 else {}


def _wait(cond, timeout, step=2.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def _journal(host, unit="vllm-watchdog"):
    return host.run("journalctl -u %s --no-pager -o cat -n 60" % unit).stdout


def test_watchdog_installed_on_with_the_inventory_settings(host):
    timer = host.check_output("systemctl show -p UnitFileState -p ActiveState vllm-watchdog.timer")
    assert "UnitFileState=enabled" in timer and "ActiveState=active" in timer, timer
    config = json.loads(host.check_output("cat %s" % CONFIG))
    assert config["enabled"] is True and config["period"] == 5 and config["stall_seconds"] == 30, config
    unit = host.check_output("systemctl show -p User -p Type -p CapabilityBoundingSet -p NoNewPrivileges "
                             "-p ProtectSystem vllm-watchdog.service")
    assert "Type=oneshot" in unit and "NoNewPrivileges=yes" in unit and "ProtectSystem=strict" in unit, unit
    pre = host.check_output("systemctl show -p ExecStartPre vllm.service")
    assert "vllm_watchdog.py" in pre and "orphans" in pre, pre


def test_the_report_has_the_watchdog_section(host):
    report = json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))
    wd = report["watchdog"]
    assert wd["installed"] and wd["enabled"], wd
    assert wd["settings"]["period"] == 5 and wd["settings"]["stall_seconds"] == 30, wd


def test_no_restart_under_sustained_heavy_load(host):
    assert _wait(lambda: _state(host).get("phase") == "watching", STARTUP_BUDGET_S), _state(host)
    before = _state(host).get("restarts_total", 0)
    inv = host.check_output("systemctl show -p InvocationID --value vllm.service").strip()
    done = json.loads(_py(host, LOAD, 65, 8, 300))
    after = _state(host)
    print("\nheavy load 65 s at concurrency 8: %s; watchdog restarts %s -> %s, last note %r" % (
        done, before, after.get("restarts_total"), after.get("note")))
    assert done["ok"] > 0 and done["errors"] == 0, done
    assert after.get("restarts_total", 0) == before, (after.get("last_verdict"), _journal(host)[-4000:])
    assert host.check_output("systemctl show -p InvocationID --value vllm.service").strip() == inv


def test_a_frozen_engine_is_restarted_and_serves_again(host):
    cfg = json.loads(host.check_output("cat %s" % CONFIG))
    assert _wait(lambda: _state(host).get("phase") == "watching", STARTUP_BUDGET_S), _state(host)
    before = _state(host).get("restarts_total", 0)
    inv = host.check_output("systemctl show -p InvocationID --value vllm.service").strip()
    # work in flight, then the engine core frozen: what a hung engine looks like from outside
    # 120 s of two streams (a transient unit: a process left in the background of `podman exec` does not outlive
    # it); its requests hang on the frozen engine until the restart drops them
    host.check_output("systemd-run --quiet --collect --unit=e2e-watchdog-load -- python3 -c %s 120 2 500"
                      % shlex.quote(LOAD))
    frozen = json.loads(_py(host, FREEZE))
    pids, t_freeze = frozen["pids"], frozen["at"]
    assert frozen["pending"] > 0 and pids, frozen
    restart_sec = int(host.check_output("systemctl show -p RestartUSec --value vllm.service").strip().rstrip("s") or 0)
    budget = cfg["stall_seconds"] + cfg["period"] + restart_sec + STARTUP_BUDGET_S
    try:
        served = _wait(lambda: host.check_output("systemctl show -p InvocationID --value vllm.service").strip() != inv
                       and _py(host, SAMPLE).strip() == "200", budget, 2.0)
        took = float(_py(host, "import time; print(time.time())")) - t_freeze
    finally:
        host.run("kill -CONT %s" % " ".join(map(str, pids)))  # if nothing restarted it, do not leave it frozen
    st = _state(host)
    verdict = st.get("last_verdict") or {}
    print("\nfreeze -> serving again: %.1f s (budget %d s); verdict after %.1f s: %s" % (
        took, budget, (verdict.get("at") or 0) - t_freeze, json.dumps(verdict)))
    assert served, _journal(host)[-3000:] + _journal(host, "vllm.service")[-3000:]
    assert verdict.get("rule") == "stalled" and verdict.get("action") == "restart", verdict
    assert verdict["pending"] > 0 and "vllm:generation_tokens_total" in verdict["counters"], verdict
    # the API server's own count (GET /load, --enable-server-load-tracking, on with the watchdog): the frozen
    # engine's requests are still held there, which is how a freeze while idle is found too (docs/watchdog.md)
    assert verdict["api_in_flight"] >= 1, verdict
    assert verdict["invocation"] == inv and verdict["stalled_s"] >= cfg["stall_seconds"], verdict
    assert st["restarts_total"] == before + 1, st
    assert "VERDICT stalled: restarting vllm.service" in _journal(host)
