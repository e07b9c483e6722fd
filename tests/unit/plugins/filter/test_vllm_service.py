"""Unit tests of the vllm_service_var_errors filter (plugins/filter/vllm_service.py).

Data-driven: the cases are in tests/unit/data/vllm_service_var_errors.yaml. The last test ties the
messages to the bad-input matrix of the fault checks of molecule's default scenario (molecule/default/faults/tests/test_bad_inputs.py).
"""
from __future__ import annotations


import pytest

from ansible_collections.gpuhost.inference.plugins.filter.vllm_service import FilterModule, vllm_service_var_errors

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases

DATA_CASES = load_cases("vllm_service_var_errors.yaml")
BASE = DATA_CASES["base"]
CASES = DATA_CASES["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_cases(case):
    assert_errors_match(vllm_service_var_errors(dict(BASE, **case["values"])), case["expect_errors"])


def test_not_a_mapping():
    with pytest.raises(TypeError, match="must be a mapping"):
        vllm_service_var_errors(["vllm_service_port"])


def test_filter_registered():
    assert FilterModule().filters() == {"vllm_service_var_errors": vllm_service_var_errors}


@pytest.mark.parametrize("name", ["port_out_of_range", "empty_model", "api_key_file_missing", "open_api_no_key",
                                  "service_user_root", "port_privileged", "model_line_break"])
def test_matrix_case_gets_the_message_it_looks_for(name):
    bad, expected = matrix_cases()[name]
    errors = vllm_service_var_errors(dict(BASE, **bad))
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "matrix case %s looks for %r, the message is %r" % (name, missing, errors[0])
