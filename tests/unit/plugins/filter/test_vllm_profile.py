"""Unit tests of the vllm_service profile filters (plugins/filter/vllm_profile.py) and of the role data.

Data-driven cases in tests/unit/data/vllm_profile_cases.yaml; the flags are the ones the role ships
(roles/vllm_service/files/vllm-0.28.0-serve-flags.txt), the default profiles those of its defaults.
"""
from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuhost.inference.plugins.filter.vllm_profile import (
    FilterModule,
    vllm_profile_config,
    vllm_profile_environment,
    vllm_profile_errors,
    vllm_release,
)

from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, VLLM_DOUBLE_SRC, load_cases

ROLE = os.path.join(ROOT, "roles", "vllm_service")
FLAGS_FILE = os.path.join(ROLE, "files", "vllm-0.28.0-serve-flags.txt")

CASES = load_cases("vllm_profile_cases.yaml")
with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as fh:
    DEFAULTS = yaml.safe_load(fh)
with open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8") as fh:
    SPECS = yaml.safe_load(fh)["argument_specs"]["main"]["options"]
with open(FLAGS_FILE, encoding="utf-8") as fh:
    FLAGS_TEXT = fh.read()
# As the role passes them: lookup('file') | split (the comment lines' words included).
FLAGS = FLAGS_TEXT.split()


def _ids(section):
    return [c["id"] for c in CASES[section]]


@pytest.mark.parametrize("case", CASES["errors"], ids=_ids("errors"))
def test_errors(case):
    profiles = DEFAULTS["vllm_service_profiles"] if case["profiles"] == "role_defaults" else case["profiles"]
    errors = vllm_profile_errors(
        profiles, FLAGS, case["active"],
        common=case.get("common"), environment=case.get("environment"), gpu_count=case.get("gpu_count"),
        version=case.get("version", "0.28.0"),
    )
    assert_errors_match(errors, case["expect_errors"])


def _release_lists(release):
    """The flags (as the role splits the file) and the parsers (families merged) the role ships for a release."""
    with open(os.path.join(ROLE, "files", "vllm-%s-serve-flags.txt" % release), encoding="utf-8") as fh:
        flags = fh.read().split()
    with open(os.path.join(ROLE, "files", "vllm-parser-families.yml"), encoding="utf-8") as fh:
        parsers = yaml.safe_load(fh)
    with open(os.path.join(ROLE, "files", "vllm-%s-parsers.yml" % release), encoding="utf-8") as fh:
        parsers.update(yaml.safe_load(fh))
    return flags, parsers


@pytest.mark.parametrize("case", CASES["releases"], ids=_ids("releases"))
def test_release(case):
    got = vllm_release(case["releases"], case["target"])
    assert got["target"] == case["target"]
    if "expect" in case:
        assert got == dict(case["expect"], target=case["target"], error="")
    else:
        assert got["release"] is None
        assert_errors_match([got["error"]], [case["expect_error"]])


@pytest.mark.parametrize("case", CASES["version_errors"], ids=_ids("version_errors"))
def test_version_errors(case):
    flags, parsers = _release_lists(case["release"])
    errors = vllm_profile_errors(case["profiles"], flags, case["active"], parsers=parsers)
    assert_errors_match(errors, case["expect_errors"])


def test_every_listed_release_ships_its_lists():
    # vllm-versions.yml is the one list: each release has its flags and parsers, the parsers file names its release,
    # and the default pin (vllm_install_version) is one of them.
    with open(os.path.join(ROLE, "files", "vllm-versions.yml"), encoding="utf-8") as fh:
        releases = yaml.safe_load(fh)["releases"]
    with open(os.path.join(ROOT, "roles", "vllm_install", "defaults", "main.yml"), encoding="utf-8") as fh:
        pin = yaml.safe_load(fh)["vllm_install_version"]
    assert pin in releases
    shipped = sorted(f.split("-")[1] for f in os.listdir(os.path.join(ROLE, "files")) if f.endswith("-serve-flags.txt"))
    assert shipped == sorted(releases)
    for release in releases:
        flags, parsers = _release_lists(release)
        assert parsers["version"] == release
        assert len([f for f in flags if f.startswith("--")]) > 200, release
        for key in ("tool_call_parsers", "reasoning_parsers"):
            assert parsers[key] and len(parsers[key]) == len(set(parsers[key])), (release, key)
        # Every family's parser is registered by the release (else `auto` would pick a name it refuses).
        for row in parsers["families"]:
            for key, names in (("tool_call_parser", "tool_call_parsers"), ("reasoning_parser", "reasoning_parsers")):
                assert row[key] == "none" or row[key] in parsers[names], (release, row["family"], key)


@pytest.mark.parametrize("case", CASES["config"], ids=_ids("config"))
def test_config(case):
    kwargs = {"key_style": case["key_style"]} if "key_style" in case else {}
    assert vllm_profile_config(case["common"], case["profile"], **kwargs) == case["expect"]


@pytest.mark.parametrize("case", CASES["environment"], ids=_ids("environment"))
def test_environment(case):
    assert vllm_profile_environment(case["common"], case["profile"]) == case["expect"]


def test_config_does_not_change_its_inputs():
    common = {"max-num-seqs": 2}
    profile = {"settings": {"max_num_seqs": 8, "download_dir": None}}
    vllm_profile_config([common], profile, key_style="dash")
    assert common == {"max-num-seqs": 2}
    assert profile == {"settings": {"max_num_seqs": 8, "download_dir": None}}


def test_config_rejects_bad_arguments():
    with pytest.raises(ValueError, match="key_style"):
        vllm_profile_config({}, {}, key_style="camel")
    with pytest.raises(TypeError, match="profile must be a mapping"):
        vllm_profile_config({}, ["settings"])


def test_flags_as_text_or_list_and_empty():
    profiles = {"lab": {"settings": {"max_num_seq": 4}}}
    assert vllm_profile_errors(profiles, FLAGS_TEXT, "lab") == vllm_profile_errors(profiles, FLAGS, "lab")
    # comment words of the file are not flags
    assert vllm_profile_errors({"lab": {"settings": {"serve": 1}}}, FLAGS, "lab") != []
    assert vllm_profile_errors(profiles, [], "lab") == ["the list of vLLM flags is empty: cannot check the profiles"]


def test_type_names_of_builtin_subclasses():
    # ansible-core 2.19 passes tagged subclasses of float/str: errors name the plain type.
    class Tagged(float):
        pass

    errors = vllm_profile_errors({"p": {"settings": {"gpu_memory_utilization": Tagged(1.5)}}}, FLAGS, "p")
    assert errors == ["profile 'p': gpu_memory_utilization must be a number in (0, 1], got 1.5 (float)"]


def test_filters_registered():
    filters = FilterModule().filters()
    assert filters["vllm_profile_errors"] is vllm_profile_errors
    assert filters["vllm_profile_config"] is vllm_profile_config
    assert filters["vllm_profile_environment"] is vllm_profile_environment


# --- role data --------------------------------------------------------------------------------

def test_flags_file_shape():
    lines = [line for line in FLAGS_TEXT.splitlines() if line and not line.startswith("#")]
    assert len(lines) > 200
    assert all(line.startswith("--") and " " not in line for line in lines)
    for flag in ("--model", "--max-num-seqs", "--speculative-config", "--gpu-memory-utilization",
                 "--kv-cache-memory-bytes", "--tensor-parallel-size", "--served-model-name"):
        assert flag in lines


def test_flags_file_matches_the_vllm_double():
    # Both are the same capture of `vllm serve --help=all` (0.28.0); they must not drift apart.
    double = os.path.join(VLLM_DOUBLE_SRC, "vllm", "_double", "serve_flags.txt")
    if not os.path.exists(double):
        pytest.skip("vLLM test double not present")
    with open(double, encoding="utf-8") as fh:
        theirs = {line.strip() for line in fh if line.startswith("--")}
    ours = {line.strip() for line in FLAGS_TEXT.splitlines() if line.startswith("--")}
    assert ours == theirs


def test_defaults_and_argument_specs_have_the_same_keys():
    assert set(DEFAULTS) == set(SPECS)
    for name, spec in SPECS.items():
        assert name.startswith("vllm_service_"), name
        assert spec.get("type"), name
        assert spec.get("description"), name


def test_argument_spec_defaults_match():
    for name, spec in SPECS.items():
        if "default" in spec:
            assert spec["default"] == DEFAULTS[name], name
    assert SPECS["vllm_service_api_key"].get("no_log") is True


def test_default_profiles_are_the_write_up_s():
    profiles = DEFAULTS["vllm_service_profiles"]
    assert sorted(profiles) == ["default", "long", "mtp", "single_gpu"]
    for name, profile in profiles.items():
        assert set(profile) == {"description", "settings", "environment"}, name
        assert profile["description"].strip(), name
    base = {"max_num_seqs": 8, "max_num_batched_tokens": 8192, "max_model_len": 131072}
    assert profiles["default"]["settings"] == base
    assert profiles["mtp"]["settings"] == dict(base, speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    assert profiles["long"]["settings"] == dict(base, max_model_len=262144)
    assert profiles["single_gpu"]["settings"] == {
        "tensor_parallel_size": 1, "max_model_len": 32768, "gpu_memory_utilization": 0.95}
    assert profiles["single_gpu"]["environment"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert DEFAULTS["vllm_service_tensor_parallel_size"] == 2
    assert DEFAULTS["vllm_service_profile"] == "default"


def test_default_profiles_are_valid_on_two_gpus():
    common = {"model": "/srv/models/m", "host": DEFAULTS["vllm_service_host"],
              "port": DEFAULTS["vllm_service_port"], "dtype": DEFAULTS["vllm_service_dtype"],
              "tensor_parallel_size": DEFAULTS["vllm_service_tensor_parallel_size"]}
    for active in DEFAULTS["vllm_service_profiles"]:
        assert vllm_profile_errors(DEFAULTS["vllm_service_profiles"], FLAGS, active, common=common, gpu_count=2) == []
