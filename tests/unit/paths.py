"""Where the unit tests find the checkout's files: one place, whatever folder a test lives in.

    from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, DATA, FIXTURES
"""
from __future__ import annotations

import os

UNIT = os.path.dirname(os.path.abspath(__file__))   # tests/unit
TESTS = os.path.dirname(UNIT)                       # tests
ROOT = os.path.dirname(TESTS)                       # the collection's root (the checkout)
DATA = os.path.join(UNIT, "data")                   # the data-driven cases
FIXTURES = os.path.join(TESTS, "fixtures")          # captures of the real things
DOUBLES = os.path.join(TESTS, "doubles")            # test doubles
SMI_MOCK = os.path.join(DOUBLES, "nvidia_smi_mock.py")      # the mocked nvidia-smi
VLLM_DOUBLE_SRC = os.path.join(DOUBLES, "vllm_double", "src")  # the vLLM API test double's package


def load_cases(name, key=None, directory=DATA):
    """The YAML cases of a data-driven test: tests/unit/data/<name> (or its `key` part)."""
    # Imported here so that paths stays importable without PyYAML.
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(directory, name), encoding="utf-8") as handle:
        cases = yaml.safe_load(handle)
    return cases[key] if key is not None else cases


def read_fixture(*parts):
    """The text of a capture under tests/fixtures/ (``read_fixture("vllm-0.28.0", "startup.log")``)."""
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as handle:
        return handle.read()


def case_text(case):
    """A case's input text: the capture its ``file`` names (under tests/fixtures/), else its inline ``text``."""
    return read_fixture(case["file"]) if "file" in case else case.get("text")


def case_ids(cases):
    """pytest ids of a list of YAML cases: their `id` keys."""
    return [case["id"] for case in cases]


def tasks_of(items):
    """Every play and task of a loaded playbook or task file, blocks, pre/post tasks and handlers opened."""
    for item in items or []:
        yield item
        for key in ("pre_tasks", "tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from tasks_of(item.get(key))


def load_script(name, path):
    """A Python file that is not a module of the collection (a script, a test double, a file a role copies to the box,
    a lab plugin), loaded by its path as module NAME."""
    import importlib.util  # pylint: disable=import-outside-toplevel

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
