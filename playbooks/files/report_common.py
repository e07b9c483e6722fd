# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller-side report scripts share (sweep_report.py and its modules, tune_report.py).

Number formatting for the Markdown tables, Markdown escaping, reading a JSON file, and the
matplotlib setup (headless, optional: a reason instead of an exception when it cannot be used).
Standard library only; matplotlib is imported when a plot is asked for, never at import time.
"""
from __future__ import annotations

import json
import sys

DASH = "–"


def fmt(value, digits=1, unit=""):
    """A figure with thousands separators and `digits` decimals; DASH for None; text as it is."""
    if value is None:
        return DASH
    if isinstance(value, str):
        return value
    if digits == 0:
        text = "{:,.0f}".format(value)
    else:
        text = "{:,.{d}f}".format(value, d=digits)
    return text + unit


def fmt_small(value):
    """Energy per token: three significant digits, whatever the scale."""
    if value is None:
        return DASH
    if value == 0:
        return "0"
    return "{:.3g}".format(value)


def fmt_pct(value):
    """A percentage: one decimal, or three significant digits below 10 % (tiny models)."""
    if value is None:
        return DASH
    if abs(value) >= 10 or value == 0:
        return fmt(value, 1)
    return "{:.3g}".format(value)


def md_escape(text):
    """Text for a Markdown table cell: pipes escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def load_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def import_pyplot():
    """(pyplot, None) or (None, the reason it cannot be used)."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except Exception as exc:  # pylint: disable=broad-except  # ImportError and a broken install alike
        return None, "matplotlib is not usable with {} ({}: {}); install it on the controller " \
            "(pip install matplotlib) for the PNG plots".format(sys.executable, type(exc).__name__, exc)
    return plt, None
