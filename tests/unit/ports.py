"""A loopback port for a server that a unit test starts as another process (nginx, the vLLM double, the hub double).

    from ansible_collections.gpuhost.inference.tests.unit.ports import free_port

Port 0 cannot be handed to another process, so a port is picked and released before that process binds it. Asking
the kernel for it races with the other xdist worker: both can be given the same port, and then one worker's nginx
answers the other's readiness check and stops under it (rehearsal ci-e: `ConnectionRefusedError` in the front door's
matrix). Each worker picks from a range of its own, below the kernel's ephemeral ports, skips a port something holds,
and never hands out the same port twice in one process.
"""
from __future__ import annotations

import os
import random
import socket

BASE = 20000
SPAN = 2000
WORKERS = 5
_handed: set = set()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing held a moment ago, from this xdist worker's range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = BASE + (index % WORKERS) * SPAN
    for _attempt in range(500):
        port = random.randint(low, low + SPAN - 1)
        if port in _handed:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError("no free port in %d-%d" % (low, low + SPAN - 1))
