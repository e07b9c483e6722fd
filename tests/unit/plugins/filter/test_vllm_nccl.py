"""Unit tests of the vllm_nccl_environment filter (plugins/filter/vllm_nccl.py).

Data-driven: the cases are in tests/unit/data/vllm_nccl_cases.yaml; their topologies are the public
`nvidia-smi topo -m` captures of tests/fixtures/nvidia-smi/topo/ read as nvidia_gpu_info reads them,
or constructed matrices where no capture exists.
"""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.inference.plugins.filter.vllm_nccl import FilterModule, vllm_nccl_environment
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_topology import parse_topology, topology_facts
from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES, case_ids, load_cases

DATA = load_cases("vllm_nccl_cases.yaml")
CASES = DATA["cases"]


def topology(name):
    if name is None:
        return None
    spec = DATA["topologies"][name]
    if "facts" in spec:
        return spec["facts"]
    if "fixture" in spec:
        with open(os.path.join(FIXTURES, "nvidia-smi", "topo", spec["fixture"]), encoding="utf-8") as handle:
            return topology_facts(parse_topology(handle.read()))
    links = {}
    for pair, label in spec["links"].items():
        a, b = pair.split("-")
        links.setdefault(a, {})[b] = label
        links.setdefault(b, {})[a] = label
    gpus = sorted(int(g) for g in links)
    return topology_facts({"gpus": gpus, "links": links, "affinity": {}})


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_cases(case):
    got = vllm_nccl_environment(topology(case["topology"]), case["config"], case.get("environment", {}),
                                auto=case.get("auto", True))
    assert [(i["name"], i["value"]) for i in got] == [(e["name"], e["value"]) for e in case["expect"]]
    for item, want in zip(got, case["expect"]):
        assert sorted(item) == ["name", "reason", "value"]
        for fragment in want["reason"]:
            assert fragment in item["reason"], (fragment, item["reason"])
        # written as one comment line in the .env file
        assert "\n" not in item["reason"] and "\r" not in item["reason"]


def test_every_topology_is_used():
    assert {c["topology"] for c in CASES} - {None} == set(DATA["topologies"])


def test_the_decision_covers_every_link_kind():
    kinds = set()
    for name in DATA["topologies"]:
        for pair in (topology(name) or {}).get("pairs", []):
            kinds.add(pair["kind"])
    assert kinds == {"NV#", "PIX", "PXB", "PHB", "NODE", "SYS", None}


def test_environment_and_config_may_be_missing():
    phb = topology("phb2")
    assert vllm_nccl_environment(phb, None) == []  # no config: one GPU
    assert vllm_nccl_environment(phb, {"tensor_parallel_size": 2}, None)[0]["name"] == "NCCL_P2P_DISABLE"


def test_filter_registered():
    assert FilterModule().filters() == {"vllm_nccl_environment": vllm_nccl_environment}
