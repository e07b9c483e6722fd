"""testinfra checks of the monitoring on the default scenario's lab-tp2 (mocked 2x RTX 3090, a test double), which is
its own `monitoring` host (fleet_prometheus_gpu_group: monitoring): node exporter and the GPU collector's timer run
hardened, the textfile holds the configured cap beside the enforced limits, Prometheus scrapes both targets, and a
card whose enforced limit differs from the configured cap (someone ran `nvidia-smi -pl 300` by hand) fires
GpuPowerCapNotApplied; the cap unit is run again afterwards. Issue 45: the vLLM double's forced tool calls put into
an engine error inside their streams (200 OK, then an error event: what the 5xx alert cannot see) fire VllmRequestErrors,
and Alertmanager (the distribution's, beside Prometheus) delivers it to a webhook receiver on the box
(tests/doubles/alert_webhook_double.py) with the box, the symptom and the first command. Extra time: about 1.5 minutes
(the cap alert's `for: 1m`; the error alert's minute runs during it)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import time

import yaml

from lab_checks import start_webhook_receiver, wait

testinfra_hosts = ["lab-tp2"]

PROM = "http://127.0.0.1:9090"
TEXTFILE = "/var/lib/prometheus/node-exporter/gpuhost_gpu.prom"
GET = r"""
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())
"""


GRAFANA_DIR = "/etc/grafana/provisioning/gpuhost"  # fleet_prometheus_grafana_dir of lab-tp2
DASHBOARDS = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "fleet_prometheus", "files", "dashboards")
AM = "http://127.0.0.1:9093"
WEBHOOK_UNIT = "lab-alert-webhook"
WEBHOOK_RECORD = "/run/lab-alert-webhook.jsonl"
# Runs in the box: switch the double's forced_tool_call_error fault on, send N streamed forced tool calls and N plain
# completions, switch it off -> {"forced": [error event seen, ...], "plain": [HTTP status, ...]}.
FORCED_ERRORS = r"""
import json, sys, urllib.request
base, n = 'http://127.0.0.1:8000', int(sys.argv[1])
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read().decode()
model = json.load(urllib.request.urlopen(base + '/v1/models', timeout=30))['data'][0]['id']
tool = {'type': 'function', 'function': {'name': 'read_file', 'parameters': {'type': 'object',
        'properties': {'path': {'type': 'string'}}, 'required': ['path']}}}
out = {'forced': [], 'plain': []}
post('/_double/faults', {'forced_tool_call_error': True})
try:
    for i in range(n):
        status, body = post('/v1/chat/completions', {'model': model, 'stream': True, 'max_tokens': 16, 'tools': [tool],
                            'tool_choice': 'required', 'messages': [{'role': 'user', 'content': 'read a.py %d' % i}]})
        out['forced'].append(status == 200 and '"InternalServerError"' in body)
        out['plain'].append(post('/v1/completions', {'model': model, 'prompt': 'def f%d():' % i, 'max_tokens': 8})[0])
finally:
    post('/_double/faults', {'forced_tool_call_error': False})
print(json.dumps(out))
"""

# Runs in the box: vLLM's requests finished with "error", read with the collection's Prometheus text reader (installed
# beside the watchdog).
ERRORS_COUNTED = r"""
import sys, urllib.request
sys.path.insert(0, '/usr/local/lib/gpuhost-inference')
import prometheus_text
text = urllib.request.urlopen('http://127.0.0.1:8000/metrics', timeout=30).read().decode()
print(prometheus_text.total(text, 'vllm:request_success_total', {'finished_reason': 'error'}) or 0)
"""


def _get(host, url):
    return host.check_output("python3 -c %s %s" % (shlex.quote(GET), shlex.quote(url)))


def _alerts(host, name):
    alerts = json.loads(_get(host, PROM + "/api/v1/alerts"))["data"]["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == name]


# Prometheus asked every 3 s (each ask is a python3 in the box).
_wait = functools.partial(wait, step=3.0)


def test_node_exporter_and_the_collector_run_hardened(host):
    assert host.service("prometheus-node-exporter").is_running
    timer = host.check_output("systemctl show -p UnitFileState -p ActiveState gpuhost-gpu-metrics.timer")
    assert "UnitFileState=enabled" in timer and "ActiveState=active" in timer, timer
    unit = host.check_output("systemctl show -p Type -p User -p CapabilityBoundingSet -p NoNewPrivileges "
                             "-p ProtectSystem -p ReadWritePaths -p RestrictAddressFamilies gpuhost-gpu-metrics.service")
    assert "Type=oneshot" in unit and "NoNewPrivileges=yes" in unit and "ProtectSystem=strict" in unit, unit
    assert "ReadWritePaths=/var/lib/prometheus/node-exporter" in unit and "RestrictAddressFamilies=AF_UNIX" in unit, unit
    listen = host.check_output("cat /etc/default/prometheus-node-exporter")
    assert "--web.listen-address=127.0.0.1:9100" in listen, listen
    result = host.run("systemctl show -p Result --value gpuhost-gpu-metrics.service")
    assert result.stdout.strip() == "success", host.run("journalctl -u gpuhost-gpu-metrics -n 20 --no-pager").stdout


def test_the_textfile_holds_the_configured_cap_beside_the_enforced_limits(host):
    text = host.check_output("cat %s" % TEXTFILE)
    for index in (0, 1):
        assert 'gpuhost_power_limit_configured_watts{index="%d"' % index in text, text
        assert 'nvidia_smi_enforced_power_limit_watts{index="%d"' % index in text, text
    assert 'gpuhost_power_cap_unit_ok{unit="gpu-power-limit.service"} 1' in text, text
    assert "nvidia_smi_last_collect_success 1" in text, text
    metrics = _get(host, "http://127.0.0.1:9100/metrics")
    assert "gpuhost_power_limit_configured_watts" in metrics and "gpuhost_verify_passed" in metrics


def test_prometheus_scrapes_the_box_and_holds_the_rules(host):
    config = host.check_output("cat /etc/default/prometheus")
    assert "--web.listen-address=127.0.0.1:9090" in config, config

    def up():
        targets = json.loads(_get(host, PROM + "/api/v1/targets"))["data"]["activeTargets"]
        return {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {"vllm", "node"}

    assert _wait(up, 90), _get(host, PROM + "/api/v1/targets")[-3000:]
    groups = json.loads(_get(host, PROM + "/api/v1/rules"))["data"]["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert {"GpuPowerCapNotApplied", "VllmEngineDown", "VllmEngineHung"} <= names, names


def _webhook(host):
    out = host.run("cat %s" % WEBHOOK_RECORD).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_alertmanager_runs_beside_prometheus_with_a_webhook_receiver(host):
    """The distribution's Alertmanager on loopback, no cluster port, Prometheus sending to it; the webhook receiver
    (the stand-in for a chat or paging webhook) started on the box for the alerts below."""
    assert host.service("prometheus-alertmanager").is_running
    args = host.check_output("cat /etc/default/prometheus-alertmanager")
    assert "--web.listen-address=127.0.0.1:9093" in args and "--cluster.listen-address=" in args, args
    assert host.run("amtool check-config /etc/prometheus/alertmanager.yml").rc == 0
    assert _wait(lambda: json.loads(_get(host, PROM + "/api/v1/alertmanagers"))["data"]["activeAlertmanagers"], 60)
    start_webhook_receiver(host, WEBHOOK_UNIT, WEBHOOK_RECORD)


def test_forced_tool_calls_ending_in_an_engine_error_are_counted_as_errors(host):
    """The double's fault: every forced tool call an engine error inside its 200 stream; plain completions answered.
    VllmRequestErrors is judged after the cap test below (its `for: 1m` runs meanwhile)."""
    sent = json.loads(host.check_output("python3 -c %s 6" % shlex.quote(FORCED_ERRORS)))
    assert sent["forced"] == [True] * 6 and sent["plain"] == [200] * 6, sent
    errors = float(host.check_output("python3 -c %s" % shlex.quote(ERRORS_COUNTED)))
    assert errors >= 6, errors
    host.run("date +%s > /run/lab-forced-errors-at")


def test_a_card_off_its_configured_cap_fires_the_cap_alert(host):
    assert not [a for a in _alerts(host, "GpuPowerCapNotApplied") if a["state"] == "firing"]
    host.check_output("nvidia-smi -i 1 -pl 300")  # by hand, beside the cap unit (root: the mock lets it)
    t0 = time.monotonic()
    try:
        fired = _wait(lambda: any(a["state"] == "firing" and a["labels"].get("index") == "1"
                                  for a in _alerts(host, "GpuPowerCapNotApplied")), 240)
        alerts = _alerts(host, "GpuPowerCapNotApplied")
    finally:
        host.check_output("systemctl restart gpu-power-limit.service")  # the cap again, for the checks after
    assert fired, alerts
    # The rule's `for: 1m` plus a collector period, a scrape and an evaluation at most.
    print("\ncard 1 set to 300 W beside its 250 W cap: GpuPowerCapNotApplied firing after %.1f s" % (time.monotonic() - t0))
    assert [a["labels"]["index"] for a in alerts] == ["1"], alerts
    enforced = host.check_output("nvidia-smi -i 1 --query-gpu=enforced.power.limit --format=csv,noheader,nounits")
    assert float(enforced) == 250.0, enforced


def test_the_engine_error_alert_fires_and_reaches_the_webhook(host):
    """VllmRequestErrors, then Alertmanager's notification at the webhook with the box, the symptom and the first
    command (the cap alert's notification too: every alert goes the same way)."""
    box = host.backend.get_hostname()
    t_errors = float(host.check_output("cat /run/lab-forced-errors-at"))
    assert _wait(lambda: any(a["state"] == "firing" for a in _alerts(host, "VllmRequestErrors")), 180), \
        _alerts(host, "VllmRequestErrors")
    t_fired = time.time()

    def delivered(name):
        return [(r["t"], a) for r in _webhook(host) for a in r["body"].get("alerts", [])
                if a["labels"].get("alertname") == name and a["status"] == "firing"]

    assert _wait(lambda: delivered("VllmRequestErrors"), 60), _webhook(host)[-5:]
    t_sent, alert = delivered("VllmRequestErrors")[0]
    print("\nforced tool calls failing from %.0f: VllmRequestErrors firing after at most %.0f s, at the webhook %.0f s "
          "after the errors" % (t_errors, t_fired - t_errors, t_sent - t_errors))
    assert alert["labels"]["box"] == box and alert["labels"]["severity"] == "critical", alert
    note = alert["annotations"]["summary"] + " " + alert["annotations"]["description"]
    assert box in alert["annotations"]["summary"] and "engine error" in note and "First: `journalctl -u vllm" in note, alert
    assert delivered("GpuPowerCapNotApplied"), [r["body"]["groupLabels"] for r in _webhook(host)]
    host.run("systemctl stop %s" % WEBHOOK_UNIT)


def test_the_grafana_directory_holds_the_dashboards_and_their_provisioning(host):
    """fleet_prometheus_grafana_dir: the role's own directory (root, 0755) with the role's dashboards, byte for byte, a
    data source on this Prometheus and a dashboards provider that reads them from there."""
    directory = host.file(GRAFANA_DIR)
    assert directory.is_directory and directory.user == "root" and directory.mode == 0o755
    wanted = {}
    for name in sorted(os.listdir(DASHBOARDS)):
        with open(os.path.join(DASHBOARDS, name), "rb") as fh:
            wanted[name] = hashlib.sha256(fh.read()).hexdigest()
    assert wanted
    listed = host.check_output("cd %s/dashboards && sha256sum -- *" % GRAFANA_DIR).splitlines()
    assert {line.split()[1]: line.split()[0] for line in listed} == wanted
    source = yaml.safe_load(host.file(GRAFANA_DIR + "/gpuhost-datasource.yml").content_string)["datasources"][0]
    assert source["type"] == "prometheus" and source["url"] == PROM and source["jsonData"]["timeInterval"] == "5s", source
    provider = yaml.safe_load(host.file(GRAFANA_DIR + "/gpuhost-dashboards.yml").content_string)["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == GRAFANA_DIR + "/dashboards", provider
