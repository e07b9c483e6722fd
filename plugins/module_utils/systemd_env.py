# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Environment files as systemd reads them for ``EnvironmentFile=``: the collection's one reader of them.

The env file of the vLLM unit (``/etc/default/vllm``: ``VLLM_PROFILE``) and its root-only secrets file
(``/etc/vllm/secrets.env``: ``VLLM_API_KEY``, ``HF_TOKEN``) are read by systemd, which hands the result to the
server. Whatever else reads them must get what the server got, so everything reads them here:

    parse_env_file("VLLM_PROFILE=a\\nVLLM_PROFILE=b\\n")  -> {"VLLM_PROFILE": "b"}   (the last assignment wins)
    read_env_file("/etc/default/vllm")                  -> the same for a file (OSError when unreadable)
    env_assignments(text)                               -> every assignment in file order, invalid names too

The filter ``gpuhost.inference.systemd_env`` and the module ``vllm_verify_wait`` import it. It imports nothing
but the standard library, because vllm_service also installs this very file on the box
(``/usr/local/lib/gpuhost-inference/systemd_env.py``) for the code that runs there without Ansible: the
watchdog and the weights fetch load it by path, and the launcher's by-hand fallback runs it:

    python3 -I systemd_env.py FILE KEY    # KEY's value as a service gets it; exit 1: not set, 2: unreadable

The rules are systemd's (systemd.exec(5), EnvironmentFile=; the parser is parse_env_file_internal() in
src/basic/env-file.c, and src/core/execute.c drops the invalid names):

- Empty lines, lines without ``=``, and lines whose first non-blank character is ``#`` or ``;`` are ignored.
  A ``#`` anywhere else is not a comment: ``VLLM_PROFILE=mtp  # note`` sets ``mtp  # note``.
- Blanks around the key and before the value are dropped; the key must be a shell name (letters, digits,
  ``_``, not starting with a digit), else the line is ignored: ``export KEY=value`` is ignored (systemd logs
  "Ignoring invalid environment assignment").
- An unquoted value keeps its interior blanks and loses its trailing ones (space, tab, CR); a backslash
  keeps the next character (``\\\\`` -> ``\\``), a backslash at the end of the line joins the next line.
  Quotes after the first character of a value are kept as they are (``a'b'`` -> ``a'b'``).
- A value that starts with ``'`` runs to the next ``'``, across lines, with no escapes; one that starts
  with ``"`` runs to the next unescaped ``"``, across lines, where ``\\`` keeps one of ``"\\`$``, a
  backslash-newline is dropped and any other backslash is kept with its character. Blanks right after the
  closing quote are dropped, and whatever follows is appended to the value (``'mtp'  # note`` -> ``mtp# note``,
  ``"a" "b"`` -> ``ab``).
- No variable expansion: ``$`` is an ordinary character.
- The last assignment of a name wins (a later EnvironmentFile= line overrides an earlier file too).
- A key or value that is not UTF-8 makes systemd refuse the whole file (EnvFileError here).
- systemd before 254 (Ubuntu 22.04 has 249, Debian 12 has 252) also ignores the line after a comment that
  ends with a backslash; 254 and later read that line. ``systemd_version`` picks the behaviour (None: 254+).
"""
from __future__ import annotations

import re
import sys

__all__ = [
    "COMMENT_CONTINUATION_UNTIL",
    "EnvFileError",
    "env_assignments",
    "parse_env_file",
    "read_env_file",
    "valid_env_name",
]

# The first systemd version in which a comment ending with a backslash no longer swallows the next line.
COMMENT_CONTINUATION_UNTIL = 254

_WHITESPACE = " \t\n\r"
_NEWLINE = "\n\r"
_COMMENTS = "#;"
_SHELL_NEED_ESCAPE = "\"\\`$"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Bytes that are not UTF-8 come out of the surrogateescape decoding as lone surrogates.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")

(_PRE_KEY, _KEY, _PRE_VALUE, _VALUE, _VALUE_ESCAPE, _SINGLE_QUOTE_VALUE, _DOUBLE_QUOTE_VALUE,
 _DOUBLE_QUOTE_VALUE_ESCAPE, _COMMENT, _COMMENT_ESCAPE) = range(10)


class EnvFileError(ValueError):
    """A file systemd would not read at all (a key or value that is not UTF-8)."""


def valid_env_name(name):
    """Whether systemd takes ``name`` as a variable name (bash's: letters, digits, _, no leading digit)."""
    return isinstance(name, str) and _NAME.match(name) is not None


def _comments_continue(systemd_version):
    if systemd_version in (None, ""):
        return False
    try:
        return int(systemd_version) < COMMENT_CONTINUATION_UNTIL
    except (TypeError, ValueError) as exc:
        raise TypeError("systemd_version must be a number such as 252, got %r" % (systemd_version,)) from exc


def env_assignments(text, systemd_version=None):
    """Every assignment of an env file, in file order: [(key, value)], names systemd then drops included.

    A port of systemd's parser, state for state. ``text``: the file's text (a str; bytes are decoded as
    UTF-8). Raises EnvFileError where systemd refuses the file.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if not isinstance(text, str):
        raise TypeError("an env file's text must be a string, got %s" % type(text).__name__)
    text = text.split("\0", 1)[0]   # systemd reads a C string: nothing after a NUL
    old_comments = _comments_continue(systemd_version)
    out = []
    state = _PRE_KEY
    key, value = [], []
    last_key_ws = last_value_ws = None

    def push(chomp):
        k = "".join(key if last_key_ws is None else key[:last_key_ws])
        v = value
        if chomp and last_value_ws is not None:
            v = v[:last_value_ws]
        v = "".join(v)
        if _NOT_UTF8.search(k) or _NOT_UTF8.search(v):
            raise EnvFileError("invalid UTF-8 in the assignment of %r: systemd does not read this file" % (k,))
        out.append((k, v))

    for c in text:
        if state == _PRE_KEY:
            if c in _COMMENTS:
                state = _COMMENT
            elif c not in _WHITESPACE:
                state = _KEY
                last_key_ws = None
                key.append(c)
        elif state == _KEY:
            if c in _NEWLINE:
                state = _PRE_KEY
                key = []
            elif c == "=":
                state = _PRE_VALUE
                last_value_ws = None
            else:
                if c not in _WHITESPACE:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state == _PRE_VALUE:
            if c in _NEWLINE:
                state = _PRE_KEY
                push(chomp=False)
                key, value = [], []
            elif c == "'":
                state = _SINGLE_QUOTE_VALUE
            elif c == '"':
                state = _DOUBLE_QUOTE_VALUE
            elif c == "\\":
                state = _VALUE_ESCAPE
            elif c not in _WHITESPACE:
                state = _VALUE
                value.append(c)
        elif state == _VALUE:
            if c in _NEWLINE:
                state = _PRE_KEY
                push(chomp=True)
                key, value = [], []
            elif c == "\\":
                state = _VALUE_ESCAPE
                last_value_ws = None
            else:
                if c not in _WHITESPACE:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == _VALUE_ESCAPE:
            state = _VALUE
            if c not in _NEWLINE:   # an escaped newline is dropped entirely
                value.append(c)
        elif state == _SINGLE_QUOTE_VALUE:
            if c == "'":
                state = _PRE_VALUE
            else:
                value.append(c)
        elif state == _DOUBLE_QUOTE_VALUE:
            if c == '"':
                state = _PRE_VALUE
            elif c == "\\":
                state = _DOUBLE_QUOTE_VALUE_ESCAPE
            else:
                value.append(c)
        elif state == _DOUBLE_QUOTE_VALUE_ESCAPE:
            state = _DOUBLE_QUOTE_VALUE
            if c in _SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value.extend(("\\", c))
        elif state == _COMMENT:
            if c == "\\":
                state = _COMMENT_ESCAPE
            elif c in _NEWLINE:
                state = _PRE_KEY
        else:  # _COMMENT_ESCAPE
            state = _PRE_KEY if c in _NEWLINE and not old_comments else _COMMENT
    if state in (_PRE_VALUE, _VALUE, _VALUE_ESCAPE, _SINGLE_QUOTE_VALUE, _DOUBLE_QUOTE_VALUE,
                 _DOUBLE_QUOTE_VALUE_ESCAPE):
        push(chomp=state == _VALUE)
    return out


def parse_env_file(text, systemd_version=None):
    """{name: value} as a service gets them from this env file: invalid names left out, the last assignment wins
    (a name keeps the place of its first assignment, as systemd keeps it)."""
    env = {}
    for key, value in env_assignments(text, systemd_version):
        if valid_env_name(key):
            env[key] = value
    return env


def read_env_file(path, systemd_version=None):
    """parse_env_file() of a file; OSError when it cannot be read, EnvFileError when systemd would refuse it."""
    with open(path, "rb") as handle:
        return parse_env_file(handle.read(), systemd_version)


def main(argv=None):
    """``python3 -I systemd_env.py FILE KEY [SYSTEMD_VERSION]``: print KEY's value (no newline added)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: systemd_env.py FILE KEY [SYSTEMD_VERSION]\n")
        return 2
    try:
        env = read_env_file(argv[0], argv[2] if len(argv) == 3 else None)
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write("systemd_env.py: cannot read %s: %s\n" % (argv[0], exc))
        return 2
    if argv[1] not in env:
        return 1
    sys.stdout.write(env[argv[1]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
