"""What the tests of the controller-side report scripts share (test_sweep_report.py, test_tune_report.py).

files_module(name): a module of playbooks/files, imported the way the entry scripts import their siblings
(that folder on sys.path, plain module names), so a test and sweep_report.py see the one same module.

FakePyplot: a recording test double of matplotlib.pyplot, only what the scripts use: subplots() gives a
FakeFigure (records savefig) and a FakeAxes (records plot() as lines and every other call by name).
"""
from __future__ import annotations

import importlib
import os
import sys

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT

FILES = os.path.join(ROOT, "playbooks", "files")


def files_module(name):
    """playbooks/files/<name>.py as a module."""
    if FILES not in sys.path:
        sys.path.insert(0, FILES)
    return importlib.import_module(name)


def no_matplotlib(monkeypatch):
    """Make `import matplotlib` fail as on a controller without it."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


class FakeAxes:
    """Test double of a matplotlib Axes: records the calls."""

    def __init__(self):
        self.calls = {}
        self.lines = []

    def plot(self, xs, ys, **kwargs):
        self.lines.append((list(xs), list(ys), kwargs))

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.setdefault(name, []).append((args, kwargs))
        return record


class FakeFigure:
    def __init__(self):
        self.saved = []

    def tight_layout(self):
        pass

    def savefig(self, path):
        self.saved.append(path)


class FakePyplot:
    """Test double of matplotlib.pyplot (only what sweep_plot.py and tune_report.py use)."""

    rcParams = {"axes.prop_cycle": type("Cycle", (), {"by_key": staticmethod(lambda: {"color": ["C0", "C1"]})})()}

    def __init__(self):
        self.figures = []
        self.closed = []

    def subplots(self, **_kwargs):
        fig, ax = FakeFigure(), FakeAxes()
        self.figures.append((fig, ax))
        return fig, ax

    def close(self, fig):
        self.closed.append(fig)


def ax_title(plt):
    """The title of the first figure drawn with a FakePyplot."""
    return plt.figures[0][1].calls["set_title"][0][0][0]
