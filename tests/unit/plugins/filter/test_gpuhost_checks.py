"""Unit tests of the unit_value_errors filter (plugins/filter/gpuhost_checks.py).

Data-driven cases in tests/unit/data/unit_value_errors.yaml. The last tests tie the filter's
messages to the bad-input matrix of the fault checks of molecule's default scenario (molecule/default/faults/tests/test_bad_inputs.py):
each of its cases for these checks must be refused with a message holding the strings that
the matrix looks for.
"""
from __future__ import annotations


import pytest

from ansible_collections.gpuhost.inference.plugins.filter.gpuhost_checks import (
    FilterModule,
    unit_value_errors,
)
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import UNIT_TYPES

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import load_cases
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases

CASES = load_cases("unit_value_errors.yaml", "cases")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_cases(case):
    kwargs = {k: case[k] for k in ("allow_empty", "types") if k in case}
    assert_errors_match(unit_value_errors(case["values"], case["kind"], **kwargs), case["expect_errors"])


def test_case_ids_are_unique():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


def test_every_kind_has_a_case():
    assert {c["kind"] for c in CASES} == {"path", "unit", "user", "directives"}


def test_every_unit_type_is_accepted():
    values = {"u_%s" % t: "x.%s" % t for t in UNIT_TYPES}
    assert unit_value_errors(values, "unit") == []
    # ... and each one refused where only another one is allowed
    assert len(unit_value_errors(values, "unit", types=["service"])) == len(UNIT_TYPES) - 1


def test_unit_name_length_limit():
    assert unit_value_errors({"a": "x" * 247 + ".service"}, "unit") == []
    assert unit_value_errors({"a": "x" * 248 + ".service"}, "unit") != []


def test_a_single_type_as_a_string():
    assert unit_value_errors({"a": "x.target"}, "unit", types="target") == []
    assert unit_value_errors({"a": "x.service"}, "unit", types="target") != []


def test_tagged_strings_are_strings():
    # ansible-core 2.19 hands the filter tagged subclasses of str.
    class Tagged(str):
        pass

    assert unit_value_errors({"a": Tagged("/opt/vllm")}, "path") == []
    assert unit_value_errors({"a": Tagged("/opt/%i")}, "path") != []


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of path, unit, user, directives"):
        unit_value_errors({}, "file")
    with pytest.raises(TypeError, match="must be a mapping"):
        unit_value_errors(["/opt"], "path")
    with pytest.raises(ValueError, match="types must be"):
        unit_value_errors({}, "unit", types=["servic"])
    with pytest.raises(ValueError, match="types must be"):
        unit_value_errors({}, "unit", types=[])


def test_does_not_change_its_input():
    values = {"a": ["x.service", "bad unit"], "b": "y.target"}
    unit_value_errors(values, "unit")
    assert values == {"a": ["x.service", "bad unit"], "b": "y.target"}


def test_filter_registered():
    assert set(FilterModule().filters()) == {"unit_value_errors", "typed", "typed_errors", "line_errors", "url_host",
                                             "owned_path_errors", "owned_paths", "listener_errors", "listener_vars",
                                             "port_errors", "secret_value_errors"}


# --- the bad-input matrix -----------------------------------------------------------------------
# Matrix case -> the variable, and how the role's preflight checks it (kind and options, as in
# roles/*/tasks/preflight.yml).
MATRIX = {
    "path_percent_specifier": ("vllm_service_venv", "path", {}),
    "path_quote": ("vllm_service_state_dir", "path", {}),
    "download_dir_space": ("vllm_service_download_dir", "path", {"allow_empty": True}),
    "nvidia_smi_path_bad": ("nvidia_power_nvidia_smi_path", "path", {}),
    "unit_name_bad": ("vllm_service_unit_name", "unit", {"types": ["service"]}),
    "power_unit_name_bad": ("nvidia_power_unit_name", "unit", {"types": ["service"]}),
    "before_unit_bad": ("nvidia_power_before_units", "unit", {}),
    "user_name_bad": ("vllm_service_user", "user", {}),
    "unit_extra_setting_cr": ("vllm_service_unit_extra_settings", "directives", {}),
    "unit_template": ("vllm_service_unit_name", "unit", {"types": ["service"]}),
}


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_matrix_case_gets_the_message_it_looks_for(name):
    cases = matrix_cases()
    assert name in cases, "the bad-input matrix has no case %s" % name
    bad, expected = cases[name]
    variable, kind, kwargs = MATRIX[name]
    errors = unit_value_errors({variable: bad[variable]}, kind, **kwargs)
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "matrix case %s looks for %r, the message is %r" % (name, missing, errors[0])


def test_matrix_multi_line_description_gets_the_message_it_looks_for():
    from ansible_collections.gpuhost.inference.plugins.filter.vllm_profile import vllm_profile_errors

    bad, expected = matrix_cases()["description_line_separator"]
    profiles = bad["vllm_service_extra_profiles"]
    errors = vllm_profile_errors(profiles, ["--max-num-seqs"], sorted(profiles)[0])
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "the matrix looks for %r, the message is %r" % (missing, errors[0])


def test_matrix_type_case_gets_the_message_it_looks_for():
    from ansible_collections.gpuhost.inference.plugins.filter.gpuhost_checks import typed_errors

    bad, expected = matrix_cases()["type_not_an_int"]
    errors = typed_errors(bad)
    assert len(errors) == 1, errors
    missing = [s for s in expected if s not in errors[0]]
    assert not missing, "the matrix looks for %r, the message is %r" % (missing, errors[0])
