# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No orphans at start: the vLLM unit's ExecStartPre, run as the service user.

`VLLM::` workers of the service user left outside the unit's cgroup (by an earlier run; they hold GPU memory) are
logged with their PIDs and, with ``--mode end`` (vllm_service_orphans, the default), ended: SIGTERM (and SIGCONT, for a
stopped one), SIGKILL after ``--grace`` seconds; ``refuse`` fails the start naming them, ``report`` only logs them.
As the service user, not root: it can signal nothing but that user's processes. Python standard library only, free of
any import from the collection: vllm_service copies this file to the box
(/usr/local/lib/gpuhost-inference/vllm_orphans.py, beside the watchdog, which it used to be part of):

    python3 vllm_orphans.py --unit vllm.service --mode end
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

__all__ = ["cgroup_of", "find_orphans", "main"]

# syslog priorities as journald reads them from a line's "<N>" prefix
ERR, WARNING, NOTICE = 3, 4, 5


def log(priority, message):
    """One journal line (journald reads the <N> prefix of a unit's stdout as the priority)."""
    print("<%d>vllm-orphans: %s" % (priority, message), flush=True)


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def cgroup_of(text):
    """The systemd cgroup path of a /proc/PID/cgroup text (v1 name=systemd line, else the v2 0:: line)."""
    if not text:
        return None
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[1] == "name=systemd":
            return parts[2]
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v2


def find_orphans(uid, own_cgroup, proc="/proc", prefix="VLLM::", self_pid=None):
    """Processes of ``uid`` whose name or argv[0] starts with ``prefix`` and whose cgroup is outside
    ``own_cgroup`` (the unit's) -> [{pid, name, cmdline, cgroup}], by pid."""
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or (self_pid is not None and int(entry) == self_pid):
            continue
        base = os.path.join(proc, entry)
        status_text = _read(os.path.join(base, "status"))
        if status_text is None:
            continue
        fields = dict(line.split(":", 1) for line in status_text.splitlines() if ":" in line)
        try:
            puid = int(fields.get("Uid", "").split()[0])
        except (IndexError, ValueError):
            continue
        if puid != uid:
            continue
        name = fields.get("Name", "").strip()
        cmdline = (_read(os.path.join(base, "cmdline")) or "").replace("\0", " ").strip()
        if not (name.startswith(prefix) or cmdline.startswith(prefix)):
            continue
        cgroup = cgroup_of(_read(os.path.join(base, "cgroup")))
        if own_cgroup and cgroup is not None and (cgroup == own_cgroup or cgroup.startswith(own_cgroup + "/")):
            continue
        found.append({"pid": int(entry), "name": name, "cmdline": cmdline[:200], "cgroup": cgroup})
    return sorted(found, key=lambda p: p["pid"])


def _alive(pid):
    text = _read("/proc/%d/status" % pid)
    if text is None:
        return False
    return "\nState:\tZ" not in text


def orphans(args):
    """ExecStartPre of the vLLM unit: report (and end) the service user's VLLM:: workers outside this unit."""
    uid = os.getuid()
    own = cgroup_of(_read("/proc/self/cgroup"))
    found = find_orphans(uid, own, self_pid=os.getpid())
    if not found:
        return 0
    pids = [p["pid"] for p in found]
    for p in found:
        log(WARNING, "orphaned vLLM worker of uid %d outside %s: pid %d %s (cgroup %s)" % (
            uid, args.unit, p["pid"], p["cmdline"] or p["name"], p["cgroup"]))
    if args.mode == "refuse":
        log(ERR, "refusing to start %s: orphaned vLLM workers still hold their memory: pids %s (end them: kill -9 %s)"
            % (args.unit, pids, " ".join(map(str, pids))))
        return 1
    if args.mode == "report":
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
                if sig == signal.SIGTERM:
                    os.kill(pid, signal.SIGCONT)  # a stopped (frozen) process takes SIGTERM only when it runs
            except OSError:
                pass
        end = time.monotonic() + args.grace
        while time.monotonic() < end and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            break
    if pids:
        log(ERR, "refusing to start %s: orphaned vLLM workers survived SIGKILL: pids %s" % (args.unit, pids))
        return 1
    log(NOTICE, "ended %d orphaned vLLM worker(s) before starting %s: pids %s" % (
        len(found), args.unit, [p["pid"] for p in found]))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="vllm_orphans.py", description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--unit", default="vllm.service")
    ap.add_argument("--mode", choices=("end", "refuse", "report"), default="end")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds to wait after SIGTERM, then after SIGKILL")
    return orphans(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
