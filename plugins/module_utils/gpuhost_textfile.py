# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one writer of Prometheus text for node exporter's textfile collector.

Standard library only, never AnsibleModule: the GPU collector of roles/node_metrics runs it on the
box (shipped beside the collector), and the filter ``vllm_verify_textfile`` renders the last
verification with it on the controller.

    fam = Family("nvidia_smi_power_draw_watts", "gauge", "power.draw [W]")
    fam.add(80.75, uuid="1b80dd3e-...", index="0")
    text = render([fam])
    write_atomic("/var/lib/prometheus/node-exporter/gpuhost_gpu.prom", text)

A family without samples is left out (node exporter refuses a HELP/TYPE without samples of
another file's family only when they differ, but an empty family says nothing). Values that are
None are skipped; booleans are written 1/0.
"""
from __future__ import annotations

import math
import os
import re
import tempfile

__all__ = ["Family", "TextfileError", "escape_label", "format_value", "render", "write_atomic"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("gauge", "counter", "untyped")


class TextfileError(ValueError):
    """A metric or label name that Prometheus would refuse."""


def escape_label(value):
    """A label value as the exposition format writes it (backslash, quote and newline escaped)."""
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def format_value(value):
    """A sample value: bool -> 1/0, int as is, float in repr form, NaN/Inf as Prometheus spells them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Family:
    """One metric family: a name, a type, a help text and its samples."""

    def __init__(self, name, mtype="gauge", help_text=""):
        if not _NAME.match(name or ""):
            raise TextfileError("not a Prometheus metric name: %r" % (name,))
        if mtype not in TYPES:
            raise TextfileError("metric type of %s must be one of %s, not %r" % (name, ", ".join(TYPES), mtype))
        self.name = name
        self.type = mtype
        self.help = " ".join(str(help_text or name).split())
        self.samples = []

    def add(self, value, **labels):
        """Add a sample (skipped when value is None or not a number)."""
        if value is None:
            return self
        try:
            text = format_value(value)
        except (TypeError, ValueError):
            return self
        for key in labels:
            if not _LABEL.match(key) or key.startswith("__"):
                raise TextfileError("not a Prometheus label name: %r (metric %s)" % (key, self.name))
        self.samples.append((dict(labels), text))
        return self

    def lines(self):
        if not self.samples:
            return []
        out = ["# HELP %s %s" % (self.name, self.help.replace("\\", "\\\\")), "# TYPE %s %s" % (self.name, self.type)]
        for labels, text in self.samples:
            if labels:
                inner = ",".join('%s="%s"' % (k, escape_label(v)) for k, v in sorted(labels.items()))
                out.append("%s{%s} %s" % (self.name, inner, text))
            else:
                out.append("%s %s" % (self.name, text))
        return out


def render(families):
    """The exposition text of the families that have samples (ends with a newline)."""
    lines = []
    seen = set()
    for fam in families:
        if fam.name in seen:
            raise TextfileError("metric family %s given twice" % fam.name)
        seen.add(fam.name)
        lines.extend(fam.lines())
    return "\n".join(lines) + "\n" if lines else ""


def write_atomic(path, text, mode=0o644):
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename, so that
    node exporter never reads half a file. Returns True when the content changed."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                os.utime(path)
                return False
    except OSError:
        pass
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True
