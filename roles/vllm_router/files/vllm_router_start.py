# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start vllm-router from its flags file, with its API key from the environment, never from a command line.

    <router venv>/bin/python -I vllm_router_start.py /etc/vllm-router/router.args
    <router venv>/bin/python -I vllm_router_start.py --check /etc/vllm-router/router.args

The flags file holds the router's flags, one flag and its values a line (shell words; blank lines and `#`
comments are skipped). vllm-router 0.1.17 takes its key (the one it sends to the workers) only as `--api-key`,
which would show it in the process list: this launcher reads it from VLLM_ROUTER_API_KEY (the unit's root-only
EnvironmentFile) and hands it to the router's own argument parser result instead. `--check` parses the file with
the router's parser and exits (0: good, 2: refused), so a bad flag never reaches the running unit.

vllm-router 0.1.17 always colours its log with ANSI escapes, which journalctl shows as "[blob data]": a child
process copies the router's output to the journal without them (it ignores SIGTERM and ends when the router's
output closes, so the last lines of a stop still reach the journal).

No privileged work happens here; stdlib only, apart from the router's own modules. Exit status 2 is final for the
unit (RestartPreventExitStatus=2): a missing or unreadable flags file, a flag the router refuses, a key on the
command line.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import sys

KEY_ENV = "VLLM_ROUTER_API_KEY"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
USAGE = "usage: vllm_router_start.py [--check] FLAGS_FILE"


def read_flags(path):
    """The argv words of the flags file."""
    words = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                words.extend(shlex.split(line, comments=True))
            except ValueError as exc:
                raise ValueError("%s line %d: %s" % (path, number, exc)) from exc
    return words


def key_on_command_line(words):
    """True when the flags carry the key (it belongs in the environment)."""
    return any(w == "--api-key" or w.startswith("--api-key=") for w in words)


def strip_ansi(data):
    """The bytes without ANSI escape sequences (colours, cursor moves)."""
    return ANSI.sub(b"", data)


def copy_without_colours(read_fd, write_fd, chunk=65536):
    """Copy read_fd to write_fd line by line without ANSI escapes, until read_fd's end (the last partial line too)."""
    pending = b""
    while True:
        data = os.read(read_fd, chunk)
        if not data:
            break
        pending += data
        lines, sep, pending = pending.rpartition(b"\n")
        if sep:
            _write_all(write_fd, strip_ansi(lines + sep))
    if pending:
        _write_all(write_fd, strip_ansi(pending))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return
        view = view[written:]


def _uncoloured_output():
    """Route this process's stdout and stderr through a child that drops the ANSI escapes."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: copy until the router's output closes
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.close(write_fd)
            copy_without_colours(read_fd, 1)
        finally:
            os._exit(0)  # pylint: disable=protected-access  # a forked child leaves without running the parent's cleanup
    os.close(read_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    check = bool(argv) and argv[0] == "--check"
    if check:
        argv = argv[1:]
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        words = read_flags(argv[0])
    except (OSError, ValueError) as exc:
        print("vllm_router_start: cannot read the flags file: %s" % exc, file=sys.stderr)
        return 2
    if key_on_command_line(words):
        print("vllm_router_start: %s sets --api-key: the key belongs in %s (the unit's root-only EnvironmentFile), "
              "not in a world-readable file or on a command line" % (argv[0], KEY_ENV), file=sys.stderr)
        return 2

    # The router's own parser and launcher (argparse exits 2 on a flag it refuses).
    from vllm_router.launch_router import launch_router, parse_router_args  # pylint: disable=import-outside-toplevel

    args = parse_router_args(words)
    if check:
        try:
            args._validate_router_args()  # pylint: disable=protected-access  # the router's own check before it starts
        except ValueError as exc:
            print("vllm_router_start: %s" % exc, file=sys.stderr)
            return 2
        print("vllm_router_start: %s: policy %s, %d worker(s): %s"
              % (argv[0], args.policy, len(args.worker_urls), " ".join(args.worker_urls)))
        return 0
    key = os.environ.pop(KEY_ENV, "").strip()
    args.api_key = key or None
    _uncoloured_output()
    launch_router(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
