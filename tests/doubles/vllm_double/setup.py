"""Build shim: the double's version is taken from GPUHOST_DOUBLE_VERSION (default 0.28.0)."""
from __future__ import annotations

import os

from setuptools import setup

setup(version=os.environ.get("GPUHOST_DOUBLE_VERSION", "0.28.0"))
