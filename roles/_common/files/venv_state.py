"""Run by a venv's own python: the installed version of a distribution and the venv's install record, as JSON.

argv: DISTRIBUTION MARKER (the record's file name under sys.prefix). Prints {"version": ..., "spec": ...};
null where the distribution or the record is missing or unreadable.
"""
import importlib.metadata as m
import json
import pathlib
import sys

try:
    version = m.version(sys.argv[1])
except m.PackageNotFoundError:
    version = None
try:
    spec = json.loads((pathlib.Path(sys.prefix) / sys.argv[2]).read_text())
except (OSError, ValueError):
    spec = None
print(json.dumps({"version": version, "spec": spec}))
