# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL settings a serving profile needs on the host's GPU topology (vllm_service's profile .env files).

The docs of the filter are in the YAML file of the same name beside this one; its unit tests are
tests/unit/plugins/filter/test_vllm_nccl.py with the cases of tests/unit/data/vllm_nccl_cases.yaml.

NCCL's P2P transport (CUDA direct access between GPUs, over NVLink or PCIe) is what hangs or crawls
on consumer cards whose PCIe traffic goes through the CPU's root complex or across sockets
(2x RTX 3090/4090/A6000 without an NVLink bridge). NCCL_P2P_LEVEL "defines the maximum distance
between GPUs where NCCL will use the P2P transport" (LOC, NVL, PIX, PXB, PHB, SYS) and
NCCL_P2P_DISABLE=1 turns P2P off (NCCL then uses shared memory, SHM):
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_topology import link_description, link_kind

NCCL_VARIABLES = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")
# Links whose P2P traffic stays off the CPU: NVLink, or PCIe under one switch (PIX) or a tree of
# switches (PXB). P2P over them is NCCL's default on every CPU and is kept.
_NEAR = ("NV#", "PIX", "PXB")
# Links through a PCIe host bridge (PHB), between host bridges (NODE) or between sockets (SYS).
_FAR = ("PHB", "NODE", "SYS")
_DOCS = "NCCL docs, Environment Variables: NCCL_P2P_DISABLE, NCCL_P2P_LEVEL"


def _gpus_used(topology, config, environment):
    """The GPU indexes the profile runs on (None when they cannot be told)."""
    need = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        need *= max(1, _int(config.get(key, 1), 1))
    visible = environment.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return sorted(topology.get("gpus") or [])[:need]
    devices = [d.strip() for d in str(visible).split(",") if d.strip()]
    if not all(d.isdigit() for d in devices):
        return None  # UUIDs or MIG devices: not the indexes of the matrix
    return [int(d) for d in devices][:need]


def _pairs(topology, gpus):
    """[(a, b, label)] for every pair of the GPUs used; None when a link is missing from the matrix."""
    links = topology.get("links") or {}
    pairs = []
    for pos, a in enumerate(gpus):
        for b in gpus[pos + 1:]:
            label = (links.get(str(a)) or {}).get(str(b))
            if not label:
                return None
            pairs.append((a, b, str(label)))
    return pairs


def _which(pairs):
    names = ", ".join("GPU%d-GPU%d %s" % (a, b, label) for a, b, label in pairs[:4])
    return names + (" (and %d more pairs)" % (len(pairs) - 4) if len(pairs) > 4 else "")


def vllm_nccl_environment(topology, config, environment=None, auto=True):
    """The NCCL variables to add to a profile's environment: [{name, value, reason}] (often empty).

    topology: nvidia_gpu_info's ``topology`` (None or unavailable: nothing is added); config: the
    profile's merged settings (tensor/pipeline/data_parallel_size); environment: the profile's merged
    environment (CUDA_VISIBLE_DEVICES picks the GPUs; NCCL_P2P_DISABLE or NCCL_P2P_LEVEL set there
    wins: nothing is added); auto: vllm_service_nccl_auto.
    """
    environment = environment if isinstance(environment, Mapping) else {}
    config = config if isinstance(config, Mapping) else {}
    if not auto or not isinstance(topology, Mapping) or not topology.get("available"):
        return []
    if any(name in environment for name in NCCL_VARIABLES):
        return []
    gpus = _gpus_used(topology, config, environment)
    if not gpus or len(gpus) < 2:
        return []
    pairs = _pairs(topology, gpus)
    if pairs is None:
        return []
    kinds = {label: link_kind(label) for _a, _b, label in pairs}
    if any(kind is None for kind in kinds.values()):
        return []  # a link this collection does not know: leave NCCL's own choice
    far = [p for p in pairs if kinds[p[2]] in _FAR]
    if not far:
        return []
    labels = sorted({p[2] for p in far})
    why = "%s (%s): P2P over PCIe through the CPU's root complex or across sockets hangs or crawls on consumer " \
        "cards" % (_which(far), "; ".join(link_description(label) for label in labels))
    near = [p for p in pairs if kinds[p[2]] in _NEAR]
    if not near:
        return [{"name": "NCCL_P2P_DISABLE", "value": "1",
                 "reason": "%s; no NVLink or PCIe-switch pair among GPUs %s: P2P off, NCCL uses shared memory (%s)"
                 % (why, ",".join(str(g) for g in gpus), _DOCS)}]
    if any(kinds[p[2]] in ("PIX", "PXB") for p in near):
        return [{"name": "NCCL_P2P_LEVEL", "value": "PXB",
                 "reason": "%s; P2P kept up to PXB for %s (%s)" % (why, _which(near), _DOCS)}]
    return [{"name": "NCCL_P2P_LEVEL", "value": "NVL",
             "reason": "%s; P2P kept over NVLink for %s (%s)" % (why, _which(near), _DOCS)}]


class FilterModule:
    """vllm_service NCCL filter."""

    def filters(self):
        return {"vllm_nccl_environment": vllm_nccl_environment}
