"""The `nvidia-smi topo -m` reader, module_utils/nvidia_topology.py: parse_topology(), topology_facts(),
run_topology() and read_topology().

Data-driven: tests/unit/data/nvidia_topology_cases.yaml, against the public captures in
tests/fixtures/nvidia-smi/topo/ (their sources are in the README.md there), and the mocked nvidia-smi
(a test double, tests/doubles/nvidia_smi_mock.py).
"""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.inference.plugins.module_utils import nvidia_topology
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import NvidiaSmi, NvidiaSmiError
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_topology import (
    parse_topology,
    read_topology,
    run_topology,
    topology_facts,
)
from ansible_collections.gpuhost.inference.tests.unit.nvidia_smi_fixtures import (
    TOPO,
    SmiMock,
    ansible_imports,
    smi_mock,
    topo_capture,
)
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

DATA = load_cases("nvidia_topology_cases.yaml")


def check(facts, expect):
    assert facts["available"] is True and facts["reason"] is None
    assert facts["gpus"] == expect["gpus"]
    for pair, label in expect.get("links", {}).items():
        a, b = pair.split("-")
        assert facts["links"][a][b] == label, pair
    # every GPU has a row with every other GPU, nothing else (no NIC)
    for index in facts["gpus"]:
        assert sorted(facts["links"][str(index)]) == sorted(str(g) for g in facts["gpus"] if g != index)
    for index, row in expect.get("affinity", {}).items():
        assert facts["affinity"][index] == row
    assert facts["nvlink"] is expect["nvlink"]
    if "pairs" in expect:
        assert [[p["gpus"][0], p["gpus"][1], p["link"]] for p in facts["pairs"]] == expect["pairs"]
    if "pair_count" in expect:
        assert len(facts["pairs"]) == expect["pair_count"]
    for pair in facts["pairs"]:
        assert pair["nvlink"] is (pair["kind"] == "NV#")
        assert pair["description"] and "unknown" not in pair["description"]
    if "summary" in expect:
        assert facts["summary"] == expect["summary"]


@pytest.mark.parametrize("case", DATA["captures"], ids=case_ids(DATA["captures"]))
def test_captures(case):
    check(topology_facts(parse_topology(topo_capture(case["fixture"]))), case["expect"])


@pytest.mark.parametrize("case", DATA["texts"], ids=case_ids(DATA["texts"]))
def test_constructed_texts(case):
    check(topology_facts(parse_topology(case["text"])), case["expect"])


@pytest.mark.parametrize("case", DATA["bad_texts"], ids=case_ids(DATA["bad_texts"]))
def test_bad_texts(case):
    with pytest.raises(ValueError, match=case["error"]):
        parse_topology(case["text"])


def test_every_capture_has_a_case():
    named = {c["fixture"] for c in DATA["captures"]}
    assert named == {f for f in os.listdir(TOPO) if f.endswith(".txt")}


def _runner(rc, out, calls):
    def run(args):
        calls.append(list(args))
        return rc, out, ""
    return run


def test_run_topology_runs_topo_m_once():
    calls = []
    smi = NvidiaSmi("/usr/bin/nvidia-smi", runner=_runner(0, topo_capture("rtx5090x2-phb.txt"), calls))
    assert run_topology(smi)["links"] == {"0": {"1": "PHB"}, "1": {"0": "PHB"}}
    assert calls == [["/usr/bin/nvidia-smi", "topo", "-m"]]


def test_run_topology_unexpected_output_is_an_nvidia_smi_error():
    smi = NvidiaSmi("nvidia-smi", runner=_runner(0, "something else\n", []))
    with pytest.raises(NvidiaSmiError, match="unexpected output of nvidia-smi topo -m: no GPU matrix"):
        run_topology(smi)


def test_read_topology_two_gpus():
    calls = []
    facts = read_topology(NvidiaSmi("nvidia-smi", runner=_runner(0, topo_capture("rtx3090x2-sys.txt"), calls)), 2)
    assert facts["available"] and facts["pairs"][0]["link"] == "SYS" and len(calls) == 1


@pytest.mark.parametrize("rc,out,fragment", [
    (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", "nvidia-smi failed (rc=2"),
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "cannot talk to the NVIDIA driver"),
    (0, "Topology not supported\n", "no GPU matrix"),
])
def test_read_topology_failure_is_an_explanation_not_an_error(rc, out, fragment):
    facts = read_topology(NvidiaSmi("nvidia-smi", runner=_runner(rc, out, [])), 2)
    assert facts["available"] is False
    assert fragment in facts["reason"]
    assert facts["summary"] == "topology unknown: " + facts["reason"]
    assert facts["pairs"] == [] and facts["links"] == {} and facts["nvlink"] is False


def test_read_topology_one_gpu_does_not_run_topo():
    calls = []
    facts = read_topology(NvidiaSmi("nvidia-smi", runner=_runner(0, "", calls)), 1)
    assert calls == []
    assert facts["available"] is True and facts["gpus"] == [0] and facts["pairs"] == []
    assert facts["reason"] == "one GPU: nvidia-smi topo -m not run"


def test_read_topology_when_the_mock_has_no_topo():
    with smi_mock("rtx3090x2") as box:
        box.set("link=none")
        facts = read_topology(NvidiaSmi(SmiMock.path), 2)
    assert facts["available"] is False
    assert "Invalid combination of input arguments" in facts["reason"]


def test_module_utils_needs_only_nvidia_smi():
    assert ansible_imports(nvidia_topology) == {"ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi"}
