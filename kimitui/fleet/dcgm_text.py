"""A host's GPUs in the text NVIDIA's DCGM exporter serves (and a vLLM server's request gauges in vLLM's), written
with prometheus_client: what the demo's simulated hosts serve for a real Prometheus to scrape.

The names, units and labels are the exporter's (docs/fleet.md): ``DCGM_FI_DEV_FB_USED`` and ``_FB_FREE`` in MiB,
``_GPU_UTIL`` in %, ``_GPU_TEMP`` in C, ``_POWER_USAGE`` in W, ``_SM_CLOCK`` in MHz, ``_XID_ERRORS`` (the last
XID), ``_CLOCK_THROTTLE_REASONS`` (NVML's clock event reasons mask), the PCIe link's generation and width now and
at most; labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from kimitui.core.events.fleet import FleetGpu, FleetHost

DRIVER = "580.159.03"
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
REASON_BITS = {"power cap": 0x4, "power brake": 0x80, "thermal": 0x20, "hw slowdown": 0x8, "sync boost": 0x10}
"""NVML's clock event reason bits (kimitui/hostside/clocks.py reads them back into words)."""

FIELDS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons."),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe link generation."),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "PCIe maximum link generation."),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe link width."),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "PCIe maximum link width."),
)


Link = tuple[int, int, int, int]
"""A GPU's PCIe link: (generation, width) now, then (generation, width) at most."""


def _values(g: FleetGpu, link: Link | None) -> dict[str, float | None]:
    gen, width, top, top_width = link or (None, None, None, None)
    free = None if g.mem_total_mib is None or g.mem_used_mib is None else g.mem_total_mib - g.mem_used_mib
    return {"DCGM_FI_DEV_SM_CLOCK": g.sm_clock_mhz, "DCGM_FI_DEV_GPU_TEMP": g.temp_c,
            "DCGM_FI_DEV_POWER_USAGE": g.power_w, "DCGM_FI_DEV_GPU_UTIL": g.util_pct, "DCGM_FI_DEV_FB_FREE": free,
            "DCGM_FI_DEV_FB_USED": g.mem_used_mib, "DCGM_FI_DEV_XID_ERRORS": float(g.xid or 0),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(sum(REASON_BITS.get(w, 0) for w in g.throttle)),
            "DCGM_FI_DEV_PCIE_LINK_GEN": gen, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": top,
            "DCGM_FI_DEV_PCIE_LINK_WIDTH": width, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": top_width}


class _Collected:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def _text(metrics: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(metrics))  # type: ignore[arg-type]
    return generate_latest(registry)


def dcgm_text(host: FleetHost, bus_ids: dict[int, str] | None = None, links: dict[int, Link] | None = None) -> bytes:
    """The exporter's /metrics for HOST's GPUs (BUS_IDS: each GPU's PCI bus id, LINKS its PCIe link, by index;
    a GPU with no link given has no PCIe series)."""
    families = {name: GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in FIELDS}
    for g in host.gpus:
        labels = [str(g.index), g.uuid, (bus_ids or {}).get(g.index, ""), f"nvidia{g.index}", g.name, host.name,
                  DRIVER]
        for name, value in _values(g, (links or {}).get(g.index)).items():
            if value is not None:
                families[name].add_metric(labels, float(value))
    return _text(list(families.values()))


def vllm_text(host: FleetHost, model: str) -> bytes:
    """A vLLM server's request gauges (``vllm:num_requests_running`` and ``_waiting``) for HOST's service."""
    out = []
    for name, value, doc in (("vllm:num_requests_running", host.requests_running, "Number of requests in model "
                              "execution batches."),
                             ("vllm:num_requests_waiting", host.requests_waiting, "Number of requests waiting to "
                              "be processed.")):
        family = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric([model, "0"], float(value or 0))
        out.append(family)
    return _text(out)
