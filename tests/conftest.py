"""Test-wide setup: make the collection importable as ansible_collections.gpuhost.inference."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
