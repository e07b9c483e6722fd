"""The hung alert on the real vLLM 0.28.0 CPU build (issue 31.6, issue 32.3: one definition of hung): while
tests/test_watchdog.py froze the engine and its watchdog restarted it, the recorder that tests/test_monitoring.py
started read Prometheus's /api/v1/alerts every 2 s. Here, after test_watchdog.py (file order): VllmEngineHung was
firing before the watchdog's restart (its verdict's time) and no longer after the restarted engine served; and the page
reached someone (issue 45.5): Alertmanager sent it to the webhook receiver that tests/test_monitoring.py started, with
the box, the symptom and the first command in its annotations. No freeze of its own: it costs the records' reading
only."""
from __future__ import annotations

import json
import time

RECORDER_UNIT = "e2e-monitoring-alerts"
RECORD = "/run/e2e-monitoring-alerts.jsonl"
WEBHOOK_UNIT = "e2e-alert-webhook"
WEBHOOK_RECORD = "/run/e2e-alert-webhook.jsonl"
RESOLVE_WAIT_S = 60


def _records(host) -> list:
    return [json.loads(line) for line in host.run("cat %s" % RECORD).stdout.splitlines() if line.strip()]


def test_the_hung_alert_fired_before_the_watchdogs_restart_and_resolved_after(host):
    # The recorder runs on until the alert is seen resolved after the restart, or RESOLVE_WAIT_S more (test_watchdog.py
    # ends when its client is answered again, which on a loaded machine can come before Prometheus's next evaluation).
    deadline = time.monotonic() + RESOLVE_WAIT_S
    while True:
        records = _records(host)
        assert records, "no record: tests/test_monitoring.py starts the recorder (%s)" % RECORDER_UNIT
        first = records[0]["restarts"] or 0
        restarted = next((r for r in records if (r["restarts"] or 0) > first), None)
        restart_at = (restarted["verdict_at"] or restarted["t"]) if restarted else None
        after = [r for r in records if restart_at is not None and r["t"] > restart_at]
        resolved = next((r for r in after if r["hung"] == []), None)
        if resolved or time.monotonic() > deadline:
            break
        time.sleep(2)
    host.run("systemctl stop %s" % RECORDER_UNIT)
    assert restarted, ("no watchdog restart while the recorder ran (%d records, restarts %s): tests/test_watchdog.py's "
                       "freeze is the one this proof reads" % (len(records), first))
    fired = [r for r in records if r["hung"] and r["t"] < restart_at]
    print("\nhung alert firing from %s s before the restart; resolved %s s after it" % (
        round(restart_at - fired[0]["t"], 1) if fired else None,
        round(resolved["t"] - restart_at, 1) if resolved else None))
    assert fired, "VllmEngineHung was not firing before the restart at %s: %s" % (
        restart_at, [r for r in records if r["t"] > restart_at - 120][:60])
    assert fired[0]["hung"][0].get("box") and fired[0]["hung"][0].get("unit") == "vllm.service", fired[0]
    assert resolved, "VllmEngineHung still firing after the restart: %s" % after[-5:]


def test_the_hung_alert_reached_the_webhook_with_the_box_the_symptom_and_the_first_command(host):
    box = host.backend.get_hostname()
    lines = host.run("cat %s" % WEBHOOK_RECORD).stdout.splitlines()
    host.run("systemctl stop %s" % WEBHOOK_UNIT)
    notes = [json.loads(line) for line in lines if line.strip()]
    hung = [(n["t"], a) for n in notes for a in n["body"].get("alerts", [])
            if a["labels"].get("alertname") == "VllmEngineHung"]
    assert hung, "no VllmEngineHung notification at the webhook (%s): %s" % (WEBHOOK_RECORD, notes[-5:])
    fired = [a for _t, a in hung if a["status"] == "firing"]
    assert fired and fired[0]["labels"]["box"] == box and fired[0]["labels"]["severity"] == "critical", hung
    summary, description = fired[0]["annotations"]["summary"], fired[0]["annotations"]["description"]
    assert box in summary and "get no answer" in description and "First: `journalctl -u vllm-watchdog" in description, \
        fired[0]["annotations"]
    resolved = [t for t, a in hung if a["status"] == "resolved"]
    print("\nVllmEngineHung at the webhook: firing, then %s" % ("resolved" if resolved else "not resolved yet"))
