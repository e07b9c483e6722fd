# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the lab's checks share: waiting for a condition, and the webhook receiver started on a monitoring host.

The testinfra modules of tests/integration import it from beside them (pytest puts their folder on sys.path),
molecule/e2e/tests through its conftest.py, and benchmarks/watchdog_recovery.py copies it into the box beside
itself (benchmarks/watchdog_recovery.sh): standard library only, no testinfra import.

    from lab_checks import start_webhook_receiver, wait
    assert wait(lambda: host.run("test -s /run/x").rc == 0, 30), "no /run/x after 30 s"
"""
from __future__ import annotations

import os
import shlex
import time

# The stand-in for a chat or paging webhook that the box's Alertmanager sends to (issue 45.5; the inventories'
# alertmanager receiver: 127.0.0.1:19093).
WEBHOOK_DOUBLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "doubles", "alert_webhook_double.py")
WEBHOOK_PORT = 19093


def wait(cond, timeout, step=2.0):
    """Call ``cond`` every ``step`` seconds until it is true (-> True) or ``timeout`` seconds have passed (-> False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def start_webhook_receiver(host, unit, record):
    """(Re)start tests/doubles/alert_webhook_double.py on ``host`` as the transient unit ``unit``, on loopback port
    WEBHOOK_PORT, appending what it receives to ``record`` (emptied first); asserts that it listens within 30 s."""
    host.run("systemctl stop %s" % unit)
    host.run("rm -f %s" % record)
    with open(WEBHOOK_DOUBLE, encoding="utf-8") as handle:
        source = handle.read()
    host.check_output("systemd-run --quiet --collect --unit=%s -- python3 -c %s 127.0.0.1 %d %s"
                      % (unit, shlex.quote(source), WEBHOOK_PORT, record))
    listening = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", %d), 2)'" % WEBHOOK_PORT
    assert wait(lambda: host.run(listening).rc == 0, 30), host.run("journalctl -u %s -n 20" % unit).stdout
