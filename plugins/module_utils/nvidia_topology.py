# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reader of ``nvidia-smi topo -m``: how the GPUs of a host are linked (NVLink, PCIe switch, CPU).

The command line is NvidiaSmi.topology_cmd() (nvidia_smi.py); this file parses its matrix and
says what the links mean. Beside nvidia_smi.py it needs only the Python standard library; it never
imports AnsibleModule.

    parse_topology(text)                # {gpus, links, affinity} of the matrix
    topology_facts(parse_topology(t))   # + pairs, nvlink, summary: nvidia_gpu_info's ``topology``
    run_topology(smi)                   # parse_topology() of ``nvidia-smi topo -m``; NvidiaSmiError
    read_topology(smi, gpu_count=2)     # topology_facts(), or why there are none; never raises
    link_kind("NV4"), link_description("PHB"), link_rank("SYS")
"""
from __future__ import annotations

import re

from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import NvidiaSmiError

__all__ = [
    "TOPOLOGY_LINKS",
    "link_description",
    "link_kind",
    "link_rank",
    "no_topology",
    "parse_topology",
    "read_topology",
    "run_topology",
    "topology_facts",
]

# The link kinds of `nvidia-smi topo -m` between two GPUs, nearest first, with the meaning its
# legend gives. NV# (a bonded set of # NVLinks) is NV1, NV2, NV4, NV6, NV12, NV18 ...; SOC is the
# name older drivers print for SYS.
TOPOLOGY_LINKS = (
    ("NV#", "NVLink (a bonded set of # NVLinks)"),
    ("PIX", "PCIe through at most a single PCIe bridge (the same PCIe switch)"),
    ("PXB", "PCIe through multiple PCIe bridges, without the PCIe host bridge"),
    ("PHB", "PCIe through a PCIe host bridge (typically the CPU)"),
    ("NODE", "PCIe and the interconnect between PCIe host bridges within a NUMA node"),
    ("SYS", "PCIe and the SMP interconnect between NUMA nodes (e.g. QPI/UPI)"),
)
_LINK_ORDER = {label: rank for rank, (label, _what) in enumerate(TOPOLOGY_LINKS)}
_LINK_ALIASES = {"SOC": "SYS"}
_NVLINK = re.compile(r"^NV(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DEVICE = re.compile(r"^(GPU)(\d+)$")
# The columns after the device columns, in the order the driver prints them (older drivers
# print only CPU Affinity).
_TOPO_EXTRA = (("CPU Affinity", "cpu_affinity"), ("NUMA Affinity", "numa_affinity"), ("GPU NUMA ID", "gpu_numa_id"))


def link_kind(label):
    """A cell of the matrix -> its kind in TOPOLOGY_LINKS (``NV4`` -> ``NV#``), or None if unknown."""
    label = _LINK_ALIASES.get(label, label)
    if _NVLINK.match(label):
        return "NV#"
    return label if label in _LINK_ORDER else None


def link_description(label):
    """What a link label means, in words (``NV4`` -> ``NVLink (4 bonded NVLinks)``)."""
    kind = link_kind(label) if label else None
    if kind == "NV#":
        return "NVLink (%s bonded NVLinks)" % _NVLINK.match(label).group(1)
    if kind is None:
        return "unknown link %r" % (label,)
    return dict(TOPOLOGY_LINKS)[kind]


def link_rank(label):
    """Distance rank of a link (0 = NVLink ... 5 = SYS); unknown labels rank after SYS."""
    kind = link_kind(label)
    return _LINK_ORDER[kind] if kind is not None else len(TOPOLOGY_LINKS)


def _topo_value(text):
    return None if text in ("N/A", "") else text


def parse_topology(text):
    """The output of ``nvidia-smi topo -m`` -> {gpus, links, affinity}.

    ``gpus``: the GPU indexes of the matrix (sorted); ``links``: {"0": {"1": "PHB"}, "1": {"0": "PHB"}}
    for every pair of GPUs (the cell as printed, ``SOC`` read as ``SYS``; NIC rows and columns are
    left out); ``affinity``: {"0": {cpu_affinity, numa_affinity, gpu_numa_id}} as far as the driver
    prints them (``N/A`` -> None). Columns are split on any whitespace (the driver separates them
    with tabs, a copy from a terminal with spaces); lines before the header, indentation, colour
    escapes and everything from the first ``Legend:`` on (the legend, a second matrix) are ignored.
    Raises ValueError when there is no GPU matrix or a row does not fit the header.
    """
    header = None
    rows = []
    for raw in _ANSI.sub("", text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Legend"):
            break
        tokens = line.split()
        if header is None:
            # the header names GPU0; a matrix row has X or a link label in its second column
            if "GPU0" in tokens and not (len(tokens) > 1 and (tokens[1] == "X" or link_kind(tokens[1]))):
                extra_at = line.find("CPU Affinity")
                names = (line[:extra_at] if extra_at >= 0 else line).split()
                extras = [key for title, key in _TOPO_EXTRA if extra_at >= 0 and title in line[extra_at:]]
                header = (names, extras)
            continue
        rows.append(tokens)
    if header is None:
        raise ValueError("no GPU matrix (no header line naming GPU0)")
    names, extras = header
    gpus = [int(_DEVICE.match(n).group(2)) for n in names if _DEVICE.match(n)]
    links = {}
    affinity = {}
    for tokens in rows:
        match = _DEVICE.match(tokens[0])
        if not match:
            continue  # a NIC row (NIC0, mlx5_0): not a GPU
        index = int(match.group(2))
        cells = tokens[1:1 + len(names)]
        if len(cells) != len(names):
            raise ValueError("row %s has %d link cells for the %d devices of the header" % (tokens[0], len(cells), len(names)))
        row = {}
        for name, cell in zip(names, cells):
            peer = _DEVICE.match(name)
            if peer is None or int(peer.group(2)) == index:
                continue
            row[peer.group(2)] = _LINK_ALIASES.get(cell, cell)
        links[str(index)] = row
        values = dict(zip(extras, tokens[1 + len(names):]))
        affinity[str(index)] = {key: _topo_value(values.get(key, "")) for _t, key in _TOPO_EXTRA}
    missing = [g for g in gpus if str(g) not in links]
    if missing:
        raise ValueError("no matrix row for GPU %s" % ", ".join(str(g) for g in missing))
    return {"gpus": sorted(gpus), "links": links, "affinity": affinity}


def run_topology(smi):
    """``nvidia-smi topo -m`` through ``smi`` (an NvidiaSmi) -> parse_topology() of its output.

    Raises NvidiaSmiError when the command fails or prints no matrix.
    """
    args = smi.topology_cmd()
    _rc, out, _err = smi.run(args)
    try:
        return parse_topology(out)
    except ValueError as exc:
        raise NvidiaSmiError("unexpected output of %s: %s" % (" ".join(args), exc), stdout=out) from exc


def topology_facts(parsed):
    """parse_topology()'s result -> what nvidia_gpu_info returns as ``topology``.

    Adds ``available`` (true), ``pairs`` (each GPU pair once: gpus [a, b], link, kind, nvlink,
    description), ``nvlink`` (true when every pair of GPUs is linked by NVLink; false with one GPU)
    and a one-line ``summary``.
    """
    gpus = parsed["gpus"]
    pairs = []
    for pos, a in enumerate(gpus):
        for b in gpus[pos + 1:]:
            label = parsed["links"][str(a)].get(str(b))
            kind = link_kind(label) if label else None
            pairs.append({"gpus": [a, b], "link": label, "kind": kind, "nvlink": kind == "NV#",
                          "description": link_description(label)})
    if not pairs:
        summary = "%d GPU: no link between GPUs" % len(gpus)
    elif len(pairs) == 1:
        pair = pairs[0]
        summary = "GPU%d-GPU%d: %s, %s" % (pair["gpus"][0], pair["gpus"][1], pair["link"], pair["description"])
    else:
        counts = {}
        for pair in pairs:
            counts[pair["link"]] = counts.get(pair["link"], 0) + 1
        parts = ["%d %s" % (n, label) for label, n in sorted(counts.items(), key=lambda kv: (link_rank(kv[0]), kv[0]))]
        summary = "%d GPUs, %d pairs: %s" % (len(gpus), len(pairs), ", ".join(parts))
    nvlink = bool(pairs) and all(p["nvlink"] for p in pairs)
    if pairs and not any(p["nvlink"] for p in pairs):
        summary += "; no NVLink"
    result = dict(parsed)
    result.update(available=True, pairs=pairs, nvlink=nvlink, summary=summary, reason=None)
    return result


def no_topology(reason):
    """The ``topology`` of a host whose links are not known, saying why."""
    return {"available": False, "gpus": [], "links": {}, "affinity": {}, "pairs": [], "nvlink": False,
            "summary": "topology unknown: %s" % reason, "reason": reason}


def read_topology(smi, gpu_count):
    """``topology`` for nvidia_gpu_info: topology_facts() of ``nvidia-smi topo -m``; never raises.

    One GPU: not asked (nothing links to it). When the command fails (an old driver without
    ``topo``, a virtual GPU) or prints something else, the answer says so in ``reason``.
    """
    if gpu_count < 2:
        parsed = {"gpus": list(range(gpu_count)), "links": {str(i): {} for i in range(gpu_count)}, "affinity": {}}
        facts = topology_facts(parsed)
        facts["reason"] = "one GPU: nvidia-smi topo -m not run"
        return facts
    try:
        return topology_facts(run_topology(smi))
    except NvidiaSmiError as exc:
        return no_topology(exc.msg)
