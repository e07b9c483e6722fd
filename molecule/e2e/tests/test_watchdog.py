"""The watchdog on the real vLLM 0.28.0 CPU build (issues 23, 32), with the e2e inventory's short settings (period 5 s,
stall_seconds 30): installed and on; no restart under a sustained heavy load (concurrency 8, ~1,000-token prompts)
while other clients drop their streams after 1 s, over and over (unserved_seconds + 2 canary timeouts + 9 s: 45 s with
the e2e inventory's 12 and 2 x 12); then
issue 32's pattern a: the engine core frozen while idle and a client retrying a short completion with a 10 s timeout,
2 s apart: the hung signal is raised before the canaries, the unserved verdict counts the requests the API server saw
end since the engine last moved, the unit is restarted and the retrying client itself is answered again. Extra time:
about 45 s of load plus one restart."""
from __future__ import annotations

import json
import shlex

from lab_checks import wait

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

# Runs in the box (a transient unit): N clients that open a stream, read for 1 s and drop it, for S seconds.
DROP = r"""
import http.client, json, sys, threading, time
seconds, clients = float(sys.argv[1]), int(sys.argv[2])
end = time.time() + seconds
def one():
    while time.time() < end:
        try:
            conn = http.client.HTTPConnection('127.0.0.1', 8000, timeout=30)
            conn.request('POST', '/v1/completions', json.dumps({'model': 'tiny-qwen3', 'prompt': 'count: 1 2 3',
                         'max_tokens': 400, 'ignore_eos': True, 'stream': True}), {'Content-Type': 'application/json'})
            resp = conn.getresponse()
            stop = time.time() + 1.0
            while time.time() < stop and resp.read1(64):
                pass
            conn.close()
        except Exception:
            time.sleep(1)
threads = [threading.Thread(target=one) for _ in range(clients)]
[t.start() for t in threads]
[t.join() for t in threads]
"""

# Runs in the box (a transient unit): an agent with a request timeout - a short completion with a 10 s timeout,
# 2 s apart, until one is answered (at most S seconds) -> /run/e2e-retry.json {answered_at, tries}.
RETRY = r"""
import json, sys, time, urllib.request
end = time.time() + float(sys.argv[1])
tries, answered = 0, None
while time.time() < end and answered is None:
    tries += 1
    req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', json.dumps({'model': 'tiny-qwen3',
          'prompt': 'def fib(n):', 'max_tokens': 4}).encode(), {'Content-Type': 'application/json'})
    try:
        if urllib.request.urlopen(req, timeout=10).status == 200:
            answered = time.time()
    except Exception:
        time.sleep(2)
json.dump({'answered_at': answered, 'tries': tries}, open('/run/e2e-retry.json', 'w'))
"""

# Runs in the box: wait (polling /metrics, up to 60 s) until work is pending (argv[1] "pending") or nothing is
# ("idle"), then SIGSTOP every VLLM::EngineCore process in the same breath -> {pids, pending} (in one script: no round
# trip between seeing the state and the freeze; not pkill -f, which would match this shell).
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
want_pending = sys.argv[1] == 'pending'
ready = False
while time.time() < end:
    n = pending()
    ready = (n > 0) == want_pending
    if ready:
        break
    time.sleep(0.1)
pids = []
for p in os.listdir('/proc'):
    try:
        if ready and p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'VLLM::EngineCore'):
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
    assert "vllm_orphans.py" in pre and "--mode end" in pre, pre


def test_the_report_has_the_watchdog_section(host):
    report = json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))
    wd = report["watchdog"]
    assert wd["installed"] and wd["enabled"], wd
    assert wd["settings"]["period"] == 5 and wd["settings"]["stall_seconds"] == 30, wd


def test_no_restart_under_sustained_heavy_load(host):
    assert wait(lambda: _state(host).get("phase") == "watching", STARTUP_BUDGET_S), _state(host)
    before = _state(host).get("restarts_total", 0)
    inv = host.check_output("systemctl show -p InvocationID --value vllm.service").strip()
    # longer than the hung rule's window and the canaries it would send: a verdict had time to come
    cfg = json.loads(host.check_output("cat %s" % CONFIG))
    seconds = cfg["unserved_seconds"] + cfg["canary_failures"] * cfg["canary_timeout"] + 9
    # beside the load, clients that disconnect mid-stream (a transient unit: a process left in the background of
    # `podman exec` does not outlive it)
    host.check_output("systemd-run --quiet --collect --unit=e2e-watchdog-drop -- python3 -c %s %d 2"
                      % (shlex.quote(DROP), seconds - 5))
    done = json.loads(_py(host, LOAD, seconds, 8, 300))
    after = _state(host)
    print("\nheavy load %d s at concurrency 8, 2 clients dropping streams: %s; watchdog restarts %s -> %s, "
          "last note %r" % (seconds, done, before, after.get("restarts_total"), after.get("note")))
    assert done["ok"] > 0 and done["errors"] == 0, done
    assert after.get("restarts_total", 0) == before, (after.get("last_verdict"), _journal(host)[-4000:])
    assert host.check_output("systemctl show -p InvocationID --value vllm.service").strip() == inv


def test_a_frozen_engine_is_restarted_and_serves_a_retrying_client_again(host):
    cfg = json.loads(host.check_output("cat %s" % CONFIG))
    assert wait(lambda: _state(host).get("phase") == "watching", STARTUP_BUDGET_S), _state(host)
    before = _state(host).get("restarts_total", 0)
    inv = host.check_output("systemctl show -p InvocationID --value vllm.service").strip()
    # issue 32's pattern a: frozen while idle, then a client that retries with a timeout shorter than
    # unserved_seconds, so the API server never holds a request for long
    frozen = json.loads(_py(host, FREEZE, "idle"))
    pids, t_freeze = frozen["pids"], frozen["at"]
    assert frozen["pending"] == 0 and pids, frozen
    restart_sec = int(host.check_output("systemctl show -p RestartUSec --value vllm.service").strip().rstrip("s") or 0)
    budget = (cfg["unserved_seconds"] + 3 * cfg["period"] + cfg["canary_failures"] * (cfg["canary_timeout"] + 3 * 5)
              + restart_sec + STARTUP_BUDGET_S)
    host.run("rm -f /run/e2e-retry.json")
    host.check_output("systemd-run --quiet --collect --unit=e2e-watchdog-retry -- python3 -c %s %d"
                      % (shlex.quote(RETRY), budget))
    try:
        wait(lambda: host.run("test -s /run/e2e-retry.json").rc == 0, budget + 15, 2.0)
    finally:
        host.run("kill -CONT %s" % " ".join(map(str, pids)))  # if nothing restarted it, do not leave it frozen
    retry = json.loads(host.run("cat /run/e2e-retry.json").stdout or "{}")
    st = _state(host)
    verdict = st.get("last_verdict") or {}
    took = (retry.get("answered_at") or 0) - t_freeze
    print("\nfreeze -> the retrying client answered again: %.1f s (%s tries; budget %d s); verdict after %.1f s: %s" % (
        took, retry.get("tries"), budget, (verdict.get("at") or 0) - t_freeze, json.dumps(verdict)))
    journal = _journal(host)
    assert retry.get("answered_at"), journal[-3000:] + _journal(host, "vllm.service")[-3000:]
    assert host.check_output("systemctl show -p InvocationID --value vllm.service").strip() != inv
    assert verdict.get("rule") == "unserved" and verdict.get("action") == "restart", verdict
    assert verdict["invocation"] == inv and verdict["pending"] == 0, verdict
    # what the API server saw arrive (and end) since the engine last moved: the retrying client's requests
    assert verdict["api_arrived"] >= 1 and verdict["canary_failures"] == cfg["canary_failures"], verdict
    assert verdict["unmoved_s"] >= cfg["unserved_seconds"], verdict
    assert st["restarts_total"] == before + 1, st
    # the hung signal (the alert's) was raised a check before the canaries, hence before the restart
    raised = journal.find("the canary goes at the next check (the alert first)")
    assert 0 <= raised < journal.find("VERDICT unserved: restarting vllm.service"), journal[-3000:]
