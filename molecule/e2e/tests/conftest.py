"""What the e2e's testinfra modules share with tests/integration's (tests/integration/lab_checks.py: waiting for a
condition, the webhook receiver): its folder is put on sys.path, after the others, so that a module of the same name
here (test_monitoring.py is in both folders) stays this folder's."""
from __future__ import annotations

import os
import sys

LAB_CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "integration")
if os.path.abspath(LAB_CHECKS) not in sys.path:
    sys.path.append(os.path.abspath(LAB_CHECKS))
