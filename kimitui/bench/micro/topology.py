"""The interconnect on the caller's side: the agent's ``topology`` answer (its ``# --- topology ---``
section: NVML, else nvidia-smi -q -x, else modelled on the simulated host) turned into a ``Topology``
event with a one-line summary ("8 x PCIe Gen5 x16, no NVLink, P2P OK") and the link's bandwidth per
direction, which the all-reduce view draws as the limit beside the measured busbw."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kimitui.core.events import TopoGpu, Topology

NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
"""Per link, per direction (NVLink 4 on Hopper: 18 links x 25 GB/s = 450 GB/s)."""
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""Per lane, per direction, after line encoding (Gen5 x16: 63 GB/s)."""

def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _matrix(v: Any, n: int) -> list[list[str]]:
    if not isinstance(v, list) or len(v) != n or not all(isinstance(r, list) and len(r) == n for r in v):
        return []
    return [[str(c) for c in row] for row in v]


def link_limit(gpus: list[TopoGpu], links: list[list[str]]) -> tuple[str, float | None]:
    """(NVLink | PCIe, GB/s per direction): NVLink when every pair is NVLinked, else the slowest PCIe link
    at its trained maximum."""
    n = len(gpus)
    if not gpus:
        return "", None
    pairs = [links[a][b] for a in range(n) for b in range(n) if a != b] if links else []
    if pairs and all(p.startswith("NV") for p in pairs) and all(g.nvlink_gbps for g in gpus):
        return "NVLink", min(g.nvlink_gbps or 0.0 for g in gpus)
    speeds = []
    for g in gpus:
        gen, width = g.pcie_gen_max or g.pcie_gen, g.pcie_width_max or g.pcie_width
        if gen in PCIE_GBPS_PER_LANE and width:
            speeds.append(PCIE_GBPS_PER_LANE[gen] * width)
    return "PCIe", (round(min(speeds), 1) if speeds else None)


def summarize(gpus: list[TopoGpu], links: list[list[str]], p2p: list[list[str]], kind: str,
              gbps: float | None) -> str:
    if not gpus:
        return "no GPUs in the topology"
    parts = []
    pcie = Counter((g.pcie_gen_max or g.pcie_gen, g.pcie_width_max or g.pcie_width) for g in gpus)
    parts.append(", ".join(f"{n} x PCIe Gen{gen or '?'} x{width or '?'}" for (gen, width), n in pcie.most_common()))
    now = [g for g in gpus if (g.pcie_gen, g.pcie_width) != (g.pcie_gen_max or g.pcie_gen,
                                                            g.pcie_width_max or g.pcie_width)]
    if now:
        parts[-1] += f" ({len(now)} trained down now: idle GPUs save power)"
    held = [g for g in gpus if g.pcie_gen_max and g.pcie_gen_gpu_max and g.pcie_gen_max < g.pcie_gen_gpu_max]
    for top, own in sorted({(g.pcie_gen_max, g.pcie_gen_gpu_max) for g in held}):
        which = [g.index for g in held if (g.pcie_gen_max, g.pcie_gen_gpu_max) == (top, own)]
        parts.append(f"GPU{'s' if len(which) > 1 else ''} {', '.join(map(str, which))}: link at most Gen{top} where "
                     f"the GPU takes Gen{own} (the slot, a riser or the firmware holds it back)")
    nv = [g.nvlinks for g in gpus]
    if not any(nv):
        parts.append("no NVLink")
    else:
        counts = Counter(v for row in links for v in row if v.startswith("NV"))
        label = ", ".join(counts) or f"{max(nv)} links"
        parts.append(f"NVLink {label}" + (f" ({gbps:.0f} GB/s per direction)" if kind == "NVLink" and gbps else ""))
    cells = [c for a, row in enumerate(p2p) for b, c in enumerate(row) if a != b]
    if not cells:
        parts.append("P2P unknown")
    else:
        status = Counter(cells)
        parts.append("P2P " + ("OK" if set(status) == {"OK"} else
                               ", ".join(f"{s} {n}" for s, n in status.most_common())))
    numa = {g.numa_node for g in gpus if g.numa_node is not None}
    if len(numa) > 1:
        parts.append(f"{len(numa)} NUMA nodes")
    if kind == "PCIe" and gbps:
        parts.append(f"all-reduce over PCIe: {gbps:.0f} GB/s per direction")
    return ", ".join(parts)


def parse_topology(data: Any, host: str, t: float, simulated: bool = False) -> Topology:
    """The worker's (or the host program's) JSON as an event; what cannot be read becomes an error line."""
    if not isinstance(data, dict):
        return Topology(t, host=host, source="none", errors=["topology: not a JSON object"])
    errors = [str(e) for e in data.get("errors") or [] if e]
    gpus: list[TopoGpu] = []
    for i, g in enumerate(data.get("gpus") or []):
        if not isinstance(g, dict):
            errors.append(f"topology: GPU entry {i} is not an object")
            continue
        version = _int(g.get("nvlink_version"))
        links = _int(g.get("nvlinks")) or 0
        per_link = NVLINK_GBPS_PER_LINK.get(version or 4, 25.0)
        gpus.append(TopoGpu(index=_int(g.get("index")) if _int(g.get("index")) is not None else i,
                            name=str(g.get("name") or ""), bus_id=str(g.get("bus_id") or ""),
                            pcie_gen=_int(g.get("pcie_gen")), pcie_gen_max=_int(g.get("pcie_gen_max")),
                            pcie_gen_gpu_max=_int(g.get("pcie_gen_gpu_max")),
                            pcie_width=_int(g.get("pcie_width")), pcie_width_max=_int(g.get("pcie_width_max")),
                            nvlinks=links, nvlink_gbps=links * per_link if links else None,
                            numa_node=_int(g.get("numa_node")), cpu_affinity=str(g.get("cpu_affinity") or "")))
    n = len(gpus)
    links_m, p2p = _matrix(data.get("links"), n), _matrix(data.get("p2p"), n)
    kind, gbps = link_limit(gpus, links_m)
    source = str(data.get("source") or "")
    return Topology(t, host=host, source=source, gpus=gpus, links=links_m, p2p=p2p,
                    summary=summarize(gpus, links_m, p2p, kind, gbps), link_kind=kind, link_gbps=gbps,
                    simulated=simulated or source == "modelled", errors=errors)


def format_topology(topo: Topology) -> str:
    """The ``nvidia-smi topo -m`` style matrix and the per-GPU links, as text."""
    lines = [f"Topology ({topo.source}): {topo.summary}"]
    n = len(topo.gpus)
    if topo.links:
        lines.append("        " + "".join(f"{'GPU' + str(g.index):>7}" for g in topo.gpus)
                     + "   CPU affinity   NUMA")
        for a, g in enumerate(topo.gpus):
            lines.append(f"{'GPU' + str(g.index):<8}" + "".join(f"{topo.links[a][b]:>7}" for b in range(n))
                         + f"   {g.cpu_affinity or '-':<14} {'-' if g.numa_node is None else g.numa_node}")
    for g in topo.gpus:
        own = (f" (the GPU's own Gen{g.pcie_gen_gpu_max})" if g.pcie_gen_gpu_max and g.pcie_gen_max
               and g.pcie_gen_gpu_max > g.pcie_gen_max else "")
        lines.append(f"GPU{g.index} {g.bus_id or '?'}: PCIe Gen{g.pcie_gen or '?'} x{g.pcie_width or '?'} now, "
                     f"max Gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'}{own}; NVLink {g.nvlinks} links")
    lines += [f"warning: {e}" for e in topo.errors]
    return "\n".join(lines)
