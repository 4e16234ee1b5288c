"""The interconnect as ``nvidia-smi topo -m`` shows it (the agent's ``topology`` request).

Per GPU its PCIe link (generation and width, current and max), active NVLink links, NUMA node and CPU
affinity; per pair the path (NV#, PIX, PXB, PHB, NODE, SYS) and the P2P read status. From NVML (each call
may fail on its own: the failure is listed, the rest stands), else PCIe only from ``nvidia-smi -q -x``,
else (the simulated host) modelled as PCIe Gen5 x16 with no NVLink. kimitui.bench.micro.topology turns the
dict into a Topology event.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


TOPO_PATHS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's legend."""
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
"""nvmlGpuP2PStatus_t -> nvidia-smi topo -p2p's legend (OK, chipset / GPU / topology not supported, ...)."""


def _topo_str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def cpu_list(words: list[int], bits: int = 64) -> str:
    """NVML's CPU affinity bitmask words -> '0-47,96-143'."""
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if (int(word) >> b) & 1]
    out: list[str] = []
    start = prev = None
    for c in [*cpus, None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(out)


def sysfs_numa_node(bus_id: str, root: str = "/sys/bus/pci/devices") -> int | None:
    """NUMA node of a PCI device from sysfs; NVML bus ids have an 8-digit domain, sysfs a 4-digit one."""
    dom, _, rest = bus_id.lower().partition(":")
    try:
        with open(os.path.join(root, "{}:{}".format(dom[-4:].rjust(4, "0"), rest), "numa_node")) as fh:
            node = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def nvml_topology(nv: Any) -> dict[str, Any]:
    """The topology from an initialised pynvml module."""
    errors: list[str] = []

    def get(what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            errors.append("{}: {}".format(what, (type(exc).__name__ + ": " + str(exc)).strip().rstrip(":")))
            return None

    count = get("device count", nv.nvmlDeviceGetCount) or 0
    handles, gpus = [], []
    ncpu_words = max(1, ((os.cpu_count() or 64) + 63) // 64)
    for i in range(count):
        h = get(f"GPU {i}: handle", nv.nvmlDeviceGetHandleByIndex, i)
        handles.append(h)
        g: dict[str, Any] = {"index": i, "name": "", "uuid": "", "bus_id": "", "pcie_gen": None,
                             "pcie_gen_max": None, "pcie_gen_gpu_max": None, "pcie_width": None,
                             "pcie_width_max": None, "nvlinks": 0, "nvlink_version": None, "nvlink_remote": [],
                             "numa_node": None, "cpu_affinity": ""}
        gpus.append(g)
        if h is None:
            continue
        g["name"] = _topo_str(get(f"GPU {i}: name", nv.nvmlDeviceGetName, h) or "")
        g["uuid"] = _topo_str(get(f"GPU {i}: uuid", nv.nvmlDeviceGetUUID, h) or "")
        pci = get(f"GPU {i}: PCI info", nv.nvmlDeviceGetPciInfo, h)
        g["bus_id"] = _topo_str(getattr(pci, "busId", "") or "") if pci is not None else ""
        for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                        ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                        ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
            if hasattr(nv, fn):
                g[key] = get(f"GPU {i}: {key}", getattr(nv, fn), h)
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active = nv.nvmlDeviceGetNvLinkState(h, link)
            except Exception:
                continue  # a link the GPU does not have (or no NVLink at all): not an error
            if active:
                g["nvlinks"] += 1
                if g["nvlink_version"] is None:
                    try:
                        g["nvlink_version"] = int(nv.nvmlDeviceGetNvLinkVersion(h, link))
                    except Exception:
                        pass
                try:
                    remote = nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
                    g["nvlink_remote"].append(_topo_str(getattr(remote, "busId", "")))
                except Exception:
                    g["nvlink_remote"].append("")
        if hasattr(nv, "nvmlDeviceGetNumaNodeId"):
            try:
                g["numa_node"] = int(nv.nvmlDeviceGetNumaNodeId(h))
            except Exception:
                pass
        if g["numa_node"] is None and g["bus_id"]:
            g["numa_node"] = sysfs_numa_node(g["bus_id"])
        words = get(f"GPU {i}: CPU affinity", nv.nvmlDeviceGetCpuAffinity, h, ncpu_words)
        g["cpu_affinity"] = cpu_list(list(words)) if words else ""
    links = [["X" if a == b else "" for b in range(count)] for a in range(count)]
    p2p = [["X" if a == b else "" for b in range(count)] for a in range(count)]
    read = getattr(nv, "NVML_P2P_CAPS_INDEX_READ", 0)
    for a in range(count):
        for b in range(count):
            if a == b or handles[a] is None or handles[b] is None:
                continue
            nvl = sum(1 for bus in gpus[a]["nvlink_remote"] if bus and bus.lower() == gpus[b]["bus_id"].lower())
            if nvl:
                links[a][b] = f"NV{nvl}"
            else:
                level = get(f"GPUs {a},{b}: path", nv.nvmlDeviceGetTopologyCommonAncestor,
                            handles[a], handles[b])
                links[a][b] = TOPO_PATHS.get(int(level), "?") if level is not None else "?"
            status = get(f"GPUs {a},{b}: P2P", nv.nvmlDeviceGetP2PStatus, handles[a], handles[b], read)
            p2p[a][b] = P2P_STATUS.get(int(status), "U") if status is not None else "U"
    return {"source": "nvml", "gpus": gpus, "links": links, "p2p": p2p, "errors": errors}


def smi_xml_topology(xml_text: str) -> dict[str, Any]:
    """PCIe only, from `nvidia-smi -q -x` (no NVLink, path or P2P there)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml_text)

    def num(node: Any, path: str) -> int | None:
        text = (node.findtext(path) or "").strip().rstrip("x")
        return int(text) if text.isdigit() else None

    gpus = []
    for i, gpu in enumerate(root.findall("gpu")):
        gpus.append({"index": i, "name": gpu.findtext("product_name") or "", "uuid": gpu.findtext("uuid") or "",
                     "bus_id": gpu.findtext("pci/pci_bus_id") or gpu.get("id", ""),
                     "pcie_gen": num(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
                     "pcie_gen_max": num(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
                     "pcie_gen_gpu_max": num(gpu, "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"),
                     "pcie_width": num(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
                     "pcie_width_max": num(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"),
                     "nvlinks": 0, "nvlink_version": None, "nvlink_remote": [], "numa_node": None,
                     "cpu_affinity": ""})
    for g in gpus:
        g["numa_node"] = sysfs_numa_node(g["bus_id"]) if g["bus_id"] else None
    return {"source": "nvidia-smi", "gpus": gpus, "links": [], "p2p": [],
            "errors": ["nvidia-smi -q -x has no NVLink, path or P2P information (NVML is needed for those)"]}


def modelled_topology(sim_dir: str) -> dict[str, Any]:
    """The simulated host: its GPUs (gpus.json) on PCIe Gen5 x16, no NVLink, two NUMA nodes, P2P OK."""
    with open(os.path.join(sim_dir, "gpus.json")) as fh:
        spec = json.load(fh).get("gpus", [])
    n = len(spec)
    half = max(1, (n + 1) // 2)
    gpus = [{"index": int(s["index"]), "name": s.get("name", ""), "uuid": s.get("uuid", ""),
             "bus_id": s.get("pci", ""), "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16,
             "pcie_width_max": 16, "nvlinks": 0, "nvlink_version": None, "nvlink_remote": [],
             "numa_node": i // half, "cpu_affinity": f"{48 * (i // half)}-{48 * (i // half) + 47}"}
            for i, s in enumerate(spec)]
    links = [["X" if a == b else ("NODE" if a // half == b // half else "SYS") for b in range(n)] for a in range(n)]
    p2p = [["X" if a == b else "OK" for b in range(n)] for a in range(n)]
    return {"source": "modelled", "gpus": gpus, "links": links, "p2p": p2p, "errors": []}


def collect_topology(sim_dir: str | None = None, nvidia_smi: str = "nvidia-smi", nvml: Any = None) -> dict[str, Any]:
    """The host's topology: NVML, else nvidia-smi -q -x, else an error (one line, never an exception)."""
    if sim_dir:
        try:
            return modelled_topology(sim_dir)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {"source": "modelled", "gpus": [], "links": [], "p2p": [], "errors": [f"simulated host: {exc}"]}
    reasons = []
    nv = nvml
    if nv is None:
        try:
            import pynvml as nv  # type: ignore
        except ImportError:
            reasons.append("NVML: pynvml not installed")
    if nv is not None:
        try:
            nv.nvmlInit()
            try:
                return nvml_topology(nv)
            finally:
                try:
                    nv.nvmlShutdown()
                except Exception:
                    pass
        except Exception as exc:
            reasons.append("NVML: %s" % (str(exc) or type(exc).__name__))
    import subprocess

    try:
        out = subprocess.run([nvidia_smi, "-q", "-x"], capture_output=True, timeout=30)
        if out.returncode == 0:
            topo = smi_xml_topology(out.stdout.decode("utf-8", "replace"))
            topo["errors"] = reasons + topo["errors"]
            return topo
        reasons.append(f"nvidia-smi: exit status {out.returncode}")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        reasons.append(f"nvidia-smi: {exc}")
    return {"source": "none", "gpus": [], "links": [], "p2p": [], "errors": reasons}


