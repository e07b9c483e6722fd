"""tests/unit on sys.path, so that `from module_harness import ...` works both under plain pytest
and under `ansible-test units`, which imports the test files as ansible_collections.gpuhost.
inference.tests.unit.* and puts only the collection root on sys.path."""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
