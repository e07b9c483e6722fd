"""testinfra checks of the monitoring on the default scenario's lab-tp2 (mocked 2x RTX 3090, a test double), which is
its own `monitoring` host (fleet_prometheus_gpu_group: monitoring): node exporter and the GPU collector's timer run
hardened, the textfile holds the configured cap beside the enforced limits, Prometheus scrapes both targets, and a
card whose enforced limit differs from the configured cap (someone ran `nvidia-smi -pl 300` by hand) fires
GpuPowerCapNotApplied; the cap unit is run again afterwards. Extra time: about 1.5 minutes (the alert's `for: 1m`)."""
from __future__ import annotations

import json
import shlex
import time

testinfra_hosts = ["lab-tp2"]

PROM = "http://127.0.0.1:9090"
TEXTFILE = "/var/lib/prometheus/node-exporter/gpuhost_gpu.prom"
GET = r"""
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())
"""


def _get(host, url):
    return host.check_output("python3 -c %s %s" % (shlex.quote(GET), shlex.quote(url)))


def _alerts(host, name):
    alerts = json.loads(_get(host, PROM + "/api/v1/alerts"))["data"]["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == name]


def _wait(cond, timeout, step=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


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
