#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_info
short_description: Read the NVIDIA GPUs of a host, their power limits and their links from nvidia-smi
version_added: "1.0.0"
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) once and returns one entry per GPU
    with its index, UUID, name, PCI bus id, driver version, persistence mode, power management state,
    power draw, requested and enforced power limits, default/min/max power limits and total memory.
  - On a host with two GPUs or more it also runs C(nvidia-smi topo -m) once and returns how each pair of GPUs is
    linked (NVLink, or which PCIe path), see RV(topology). A failing C(topo -m) (an old driver, a virtual GPU) does
    not fail the task; RV(topology.available) is then V(false) and RV(topology.reason) says why.
  - Read-only; changes nothing on the host and runs the same in check mode.
  - Says whether the program is the real nvidia-smi (an ELF executable) or a test double (any other
    file at the resolved path, such as the lab's Python mock), see RV(power_source).
  - Fails with a clear message when nvidia-smi is missing, cannot talk to the driver, reports no
    devices, or when O(gpus) names an index that is not present.
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  nvidia_smi_path:
    description:
      - The nvidia-smi program, either a name looked up on the E(PATH) (plus C(/usr/bin) and C(/usr/local/bin))
        or a path to it.
    type: str
    default: nvidia-smi
  gpus:
    description:
      - Only return these GPU indexes (in the order given). All GPUs when omitted or empty.
      - An index that is not present fails the task, naming it and listing the indexes that are.
    type: list
    elements: int
  topology:
    description:
      - Read the links between the GPUs with C(nvidia-smi topo -m) (only where there are two GPUs or more).
      - V(false) skips the command; RV(topology.available) is then V(false).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Values that nvidia-smi reports as C([N/A]) or C([Not Supported]) are returned as V(null).
  - O(gpus) is applied after one query of all GPUs, so an unknown index gives the list of present ones
    instead of nvidia-smi's bare C(No devices were found).
  - RV(topology) always covers every GPU of the host, whatever O(gpus) selects (C(topo -m) takes no C(-i)).
seealso:
  - name: nvidia-smi documentation
    description: The NVIDIA System Management Interface.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
  - name: NCCL_P2P_LEVEL
    description: How NCCL names the same link kinds (the vllm_nccl_environment filter uses RV(topology)).
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-p2p-level
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuhost.inference.nvidia_gpu_info:
  register: __nvidia_power_gpu_info

- name: Show the enforced limit of each GPU
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} ({{ item.name }}): {{ item.enforced_power_limit_w }} W"
  loop: "{{ __nvidia_power_gpu_info.gpus }}"

- name: Read only GPUs 0 and 1, with nvidia-smi at a fixed path
  gpuhost.inference.nvidia_gpu_info:
    nvidia_smi_path: /usr/bin/nvidia-smi
    gpus: [0, 1]
  register: __nvidia_power_gpu_info

- name: Say how the GPUs are linked
  ansible.builtin.debug:
    msg: "{{ __nvidia_power_gpu_info.topology.summary }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU, in nvidia-smi's order (or the order of O(gpus)).
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: Zero-based GPU index.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-1b80dd3e-e53f-bb17-9c6f-1f1f6a19254c
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    pci_bus_id:
      description: PCI bus id as domain:bus:device.function.
      type: str
      sample: "00000000:00:06.0"
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: "580.159.04"
    persistence_mode:
      description: V(Enabled) or V(Disabled); V(null) where not available.
      type: str
      sample: Enabled
    power_management:
      description: Power management state as nvidia-smi reports it (for example V(Enabled)); V(null) where not available.
      type: str
      sample: Enabled
    power_draw_w:
      description: Current board power draw in watts (V(null) where not available).
      type: float
      sample: 80.76
    power_limit_w:
      description: Requested (software) power limit in watts, C(power.limit).
      type: float
      sample: 700.0
    enforced_power_limit_w:
      description: Enforced power limit in watts, C(enforced.power.limit); may be lower than the requested one.
      type: float
      sample: 700.0
    default_power_limit_w:
      description: Default power limit in watts (what the driver restores on reload).
      type: float
      sample: 700.0
    min_power_limit_w:
      description: Lowest power limit that can be set, in watts.
      type: float
      sample: 200.0
    max_power_limit_w:
      description: Highest power limit that can be set, in watts.
      type: float
      sample: 700.0
    memory_total_mib:
      description: Total GPU memory in MiB.
      type: int
      sample: 143771
    compute_cap:
      description:
        - The CUDA compute capability, C(compute_cap) (V(8.6) for an RTX 3090, V(9.0) for an H200); V(null) when the
          driver's nvidia-smi does not know the field (it is asked again without it).
      type: str
      sample: "9.0"
      version_added: "1.2.0"
  sample:
    - index: 0
      uuid: GPU-1b80dd3e-e53f-bb17-9c6f-1f1f6a19254c
      name: NVIDIA H200
      pci_bus_id: "00000000:00:06.0"
      driver_version: "580.159.04"
      persistence_mode: Enabled
      power_management: Enabled
      power_draw_w: 80.76
      power_limit_w: 700.0
      enforced_power_limit_w: 700.0
      default_power_limit_w: 700.0
      min_power_limit_w: 200.0
      max_power_limit_w: 700.0
      memory_total_mib: 143771
driver_version:
  description: The driver version (of the first GPU returned).
  returned: success
  type: str
  sample: "580.159.04"
gpu_count:
  description: Number of entries in RV(gpus).
  returned: success
  type: int
  sample: 2
nvidia_smi_path:
  description: The nvidia-smi program that was run, as resolved.
  returned: success
  type: str
  sample: /usr/bin/nvidia-smi
topology:
  description:
    - How the GPUs of the host are linked, from C(nvidia-smi topo -m) (NIC rows and columns left out).
    - The link labels are nvidia-smi's, SYS for the C(SOC) of older drivers; nearest first
      C(NV<n>) (a bonded set of n NVLinks, e.g. C(NV4)), C(PIX) (at most one PCIe bridge, the same switch),
      C(PXB) (several PCIe bridges, not the host bridge), C(PHB) (through a PCIe host bridge, typically the CPU),
      C(NODE) (between the PCIe host bridges of one NUMA node), C(SYS) (across the SMP interconnect between
      NUMA nodes, e.g. QPI/UPI).
  returned: success
  type: dict
  contains:
    available:
      description: V(true) when the links are known (always with one GPU, which links to nothing).
      type: bool
      sample: true
    reason:
      description:
        - Why the links are not known (the failing command and its output), or that C(topo -m) was not run on
          a one-GPU host or with O(topology=false); V(null) when C(topo -m) was read.
      type: str
      sample: null
    summary:
      description: One line, the link of a lone pair or the count of each link label, and whether there is no NVLink.
      type: str
      sample: "GPU0-GPU1: PHB, PCIe through a PCIe host bridge (typically the CPU); no NVLink"
    nvlink:
      description: V(true) when every pair of GPUs is linked by NVLink (V(false) with fewer than two GPUs).
      type: bool
      sample: false
    gpus:
      description: The GPU indexes of the matrix.
      type: list
      elements: int
      sample: [0, 1]
    links:
      description: The matrix, GPU index -> peer GPU index -> link label (indexes as strings).
      type: dict
      sample: {"0": {"1": "PHB"}, "1": {"0": "PHB"}}
    pairs:
      description: Each pair of GPUs once.
      type: list
      elements: dict
      contains:
        gpus:
          description: The two GPU indexes.
          type: list
          elements: int
          sample: [0, 1]
        link:
          description: The label as printed (C(NV4), C(PHB) ...).
          type: str
          sample: PHB
        kind:
          description: C(NV#) for any NVLink label, else the label; V(null) for a label this module does not know.
          type: str
          sample: PHB
        nvlink:
          description: Whether the pair is linked by NVLink.
          type: bool
          sample: false
        description:
          description: What the label means (from nvidia-smi's legend).
          type: str
          sample: PCIe through a PCIe host bridge (typically the CPU)
    affinity:
      description: Per GPU index (a string) C(cpu_affinity), C(numa_affinity), C(gpu_numa_id) as printed (V(null) for N/A or
        a column the driver does not print).
      type: dict
      sample: {"0": {"cpu_affinity": "0-63", "numa_affinity": "0", "gpu_numa_id": null}}
power_source:
  description:
    - V(nvidia-smi) when the file at RV(nvidia_smi_path) is an ELF executable (the real tool), V(test double)
      when it is anything else (the lab's Python mock, a wrapper script), whose readings are simulated.
  returned: success
  type: str
  sample: nvidia-smi
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import NvidiaSmi, NvidiaSmiError, power_source
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_topology import no_topology, read_topology

EXTRA_DIRS = ["/usr/bin", "/usr/local/bin"]


def resolve_path(module, name):
    if os.sep in name:
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        module.fail_json(msg="nvidia_smi_path %r: no such executable file (is the NVIDIA driver installed?)" % name)
    path = module.get_bin_path(name, required=False, opt_dirs=EXTRA_DIRS)
    if not path:
        module.fail_json(
            msg="nvidia_smi_path %r: not found on PATH or in %s; install the NVIDIA driver or set nvidia_smi_path"
            % (name, ", ".join(EXTRA_DIRS))
        )
    return path


def select(module, gpus, wanted):
    if not wanted:
        return gpus
    by_index = {g["index"]: g for g in gpus}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        module.fail_json(
            msg="gpus: GPU index %s not present on this host; present: %s"
            % (", ".join(str(i) for i in missing), ", ".join(str(i) for i in sorted(by_index)) or "none"),
            gpus=gpus,
        )
    chosen = []
    for index in wanted:
        if by_index[index] not in chosen:
            chosen.append(by_index[index])
    return chosen


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            gpus=dict(type="list", elements="int"),
            topology=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    path = resolve_path(module, module.params["nvidia_smi_path"])
    smi = NvidiaSmi(path, runner=module.run_command)
    try:
        gpus = smi.gpu_info()
    except NvidiaSmiError as exc:
        module.fail_json(msg=exc.msg, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr)
    if not gpus:
        module.fail_json(msg="nvidia-smi (%s) listed no GPUs" % path)
    if module.params["topology"]:
        topology = read_topology(smi, len(gpus))
    else:
        topology = no_topology("not read (topology=false)")
    gpus = select(module, gpus, module.params["gpus"])
    module.exit_json(
        changed=False,
        gpus=gpus,
        driver_version=gpus[0]["driver_version"],
        gpu_count=len(gpus),
        nvidia_smi_path=path,
        power_source=power_source(path),
        topology=topology,
    )


if __name__ == "__main__":
    main()
