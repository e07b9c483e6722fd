# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One systemd unit as the modules read it: the systemctl and journalctl command lines, once, and the
reading of their output. Python standard library only; the module runs the commands (run_command).

    argv = show_argv("systemctl", "vllm.service")          # systemctl show -p ActiveState,... -- vllm.service
    state = parse_show(stdout)                             # {ActiveState: active, NRestarts: 0, ...}
    argv = journal_argv("journalctl", "vllm.service", invocation_id, 40)   # the tail of that start
    parse_version("systemd 252 (252.38-1~deb12u1)\\n...")  # 252
"""
from __future__ import annotations

__all__ = [
    "UNIT_PROPS",
    "journal_argv",
    "parse_show",
    "parse_version",
    "show_argv",
    "version_argv",
]

# What the readiness wait and the verification read of a unit.
UNIT_PROPS = ("ActiveState", "SubState", "NRestarts", "InvocationID", "Result", "ExecMainStatus", "LoadState",
              "ActiveEnterTimestampMonotonic")


def show_argv(systemctl, unit, props=UNIT_PROPS):
    """``systemctl show`` of some properties of one unit (after ``--``: a name is never read as an option)."""
    return [systemctl, "show", "-p", ",".join(props), "--", unit]


def parse_show(text):
    """``systemctl show`` output (KEY=value lines) -> dict; NRestarts as an int (0 when absent or not a number)."""
    state = dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)
    try:
        state["NRestarts"] = int(state.get("NRestarts") or 0)
    except ValueError:
        state["NRestarts"] = 0
    return state


def journal_argv(journalctl, unit, invocation="", lines=40):
    """The last ``lines`` journal lines of the unit (of one start when ``invocation``: systemd's InvocationID)."""
    argv = [journalctl, "--no-pager", "-o", "cat", "-n", str(int(lines)), "-u", unit]
    if invocation:
        argv.append("_SYSTEMD_INVOCATION_ID=%s" % invocation)
    return argv


def version_argv(systemctl):
    return [systemctl, "--version"]


def parse_version(text):
    """The version number of ``systemctl --version`` ("systemd 252 (252.38-1~deb12u1)"); None when not there."""
    words = (text or "").split()
    try:
        return int(words[1]) if words and words[0] == "systemd" else None
    except (IndexError, ValueError):
        return None
