"""Topology: the agent's collection (NVML stands in for the driver where none exists here), the
nvidia-smi XML fallback on a real capture, the simulated host's model, and the caller's event."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kimitui.bench.micro.topology import format_topology, parse_topology
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.layout import create_layout, make_gpus
from kimitui.hostside import topology
from tests.support import FIXTURES

BUS = ["00000000:00:06.0", "00000000:00:07.0"]  # the 2 x H200 capture's bus ids


class FakeNvml:
    """What pynvml answers on the 2 x H200 host of the captures (NV18 between the two, docs/reference.md section 2);
    ``broken`` names calls that raise, as NVML calls do one by one (fan: NotSupported on H200)."""

    NVML_NVLINK_MAX_LINKS = 18
    NVML_P2P_CAPS_INDEX_READ = 0

    def __init__(self, broken: tuple[str, ...] = ()) -> None:
        self.broken = broken

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvmlDevice") and name in object.__getattribute__(self, "broken"):
            def fail(*_a: Any) -> Any:
                raise RuntimeError("NVMLError_NotSupported: Not Supported")
            return fail
        return object.__getattribute__(self, name)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 2
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
    def nvmlDeviceGetName(self, h: int) -> bytes: return b"NVIDIA H200"
    def nvmlDeviceGetUUID(self, h: int) -> str: return f"GPU-{h}"
    def nvmlDeviceGetPciInfo(self, h: int) -> Any: return SimpleNamespace(busId=BUS[h].encode())
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int: return 1  # idle: trained down
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int: return 5
    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int: return 16
    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int: return 16

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return 1

    def nvmlDeviceGetNvLinkVersion(self, h: int, link: int) -> int: return 4
    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any: return SimpleNamespace(busId=BUS[1 - h])
    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        mask = ((1 << 48) - 1) << (48 * h)  # 48 cores per socket
        return [(mask >> (64 * w)) & (2**64 - 1) for w in range(2)]
    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int: return 50
    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int: return 0


def test_nvml_topology_of_two_nvlinked_h200s() -> None:
    topo = parse_topology(topology.nvml_topology(FakeNvml()), "h200x2", 1.0)
    assert topo.source == "nvml" and [g.bus_id for g in topo.gpus] == BUS
    assert topo.links == [["X", "NV18"], ["NV18", "X"]] and topo.p2p == [["X", "OK"], ["OK", "X"]]
    assert topo.link_kind == "NVLink" and topo.link_gbps == 450.0  # 18 links x 25 GB/s per direction
    assert (topo.gpus[0].pcie_gen, topo.gpus[0].pcie_gen_max, topo.gpus[0].pcie_width_max) == (1, 5, 16)
    assert topo.gpus[0].cpu_affinity == "0-47" and topo.gpus[1].cpu_affinity == "48-95"
    assert topo.summary.startswith("2 x PCIe Gen5 x16 (2 trained down now")
    assert "NVLink NV18 (450 GB/s per direction)" in topo.summary and "P2P OK" in topo.summary
    table = format_topology(topo).splitlines()
    assert table[2].split() == ["GPU0", "X", "NV18", "0-47", "-"]


class SlotBound(FakeNvml):
    """GPU 1 is a Gen5 card in a Gen4 slot: the link's maximum is the slot's."""

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int: return 5 - h
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int: return 5


def test_a_gpu_held_back_by_its_slot_is_named() -> None:
    topo = parse_topology(topology.nvml_topology(SlotBound()), "h", 1.0)
    assert [(g.pcie_gen_max, g.pcie_gen_gpu_max) for g in topo.gpus] == [(5, 5), (4, 5)]
    assert ("GPU 1: link at most Gen4 where the GPU takes Gen5 (the slot, a riser or the firmware holds it back)"
            in topo.summary), topo.summary
    assert format_topology(topo).splitlines()[-1].endswith("max Gen4 x16 (the GPU's own Gen5); NVLink 18 links")
    plain = parse_topology(topology.nvml_topology(FakeNvml()), "h", 1.0)  # no GPU-max call: nothing said
    assert "holds it back" not in plain.summary and plain.gpus[0].pcie_gen_gpu_max is None


def test_a_busy_link_below_its_maximum_flags_the_row() -> None:
    from kimitui.hostside.clocks import ClockWatch

    class Link(FakeNvml):
        NVML_CLOCK_SM = 1
        width = 16

        def nvmlDeviceGetViolationStatus(self, h: int, policy: int) -> Any:
            return SimpleNamespace(violationTime=0)

        def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int: return 0
        def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int: return 1980
        def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int: return 4
        def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int: return self.width

    nv = Link()
    assert ClockWatch(0, nv, link=True).lap()["throttle"] == ["PCIe Gen4 x16 of Gen5 x16"]
    assert ClockWatch(0, nv).lap()["throttle"] == []  # a GEMM row's watch does not look at the link
    nv.width = 8
    assert ClockWatch(0, nv, link=True).lap()["throttle"] == ["PCIe Gen4 x8 of Gen5 x16"]


def test_every_nvml_call_fails_on_its_own() -> None:
    nv = FakeNvml(broken=("nvmlDeviceGetP2PStatus", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetMaxPcieLinkWidth"))
    topo = parse_topology(topology.nvml_topology(nv), "h", 1.0)
    assert topo.links[0][1] == "NV18" and topo.p2p[0][1] == "U" and topo.gpus[0].cpu_affinity == ""
    assert topo.gpus[0].pcie_width_max is None and topo.gpus[0].pcie_width == 16
    assert any("GPUs 0,1: P2P" in e for e in topo.errors) and any("CPU affinity" in e for e in topo.errors)


def test_pcie_only_from_the_real_nvidia_smi_xml() -> None:
    data = topology.smi_xml_topology((FIXTURES / "nvidia-smi-q.xml").read_text())
    topo = parse_topology(data, "h200x2", 1.0)
    assert [(g.index, g.name, g.bus_id) for g in topo.gpus] == [(0, "NVIDIA H200", BUS[0]), (1, "NVIDIA H200", BUS[1])]
    assert all((g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (5, 5, 16, 16) for g in topo.gpus)
    assert topo.link_kind == "PCIe" and topo.link_gbps == 63.0  # Gen5 x16 per direction (docs/reference.md section 2)
    assert topo.summary.startswith("2 x PCIe Gen5 x16, no NVLink, P2P unknown")
    assert any("NVML is needed" in e for e in topo.errors)


def test_the_simulated_host_reports_a_modelled_pcie_gen5_topology(tmp_path: Any) -> None:
    layout = create_layout(make_gpus(8), parent=str(tmp_path))
    topo = parse_topology(topology.collect_topology(sim_dir=str(layout.root)), "demo", 1.0)
    assert topo.simulated and topo.source == "modelled"
    assert topo.summary == ("8 x PCIe Gen5 x16, no NVLink, P2P OK, 2 NUMA nodes, all-reduce over PCIe: 63 GB/s per "
                            "direction")
    assert topo.links[0][1] == "NODE" and topo.links[0][7] == "SYS" and topo.link_gbps == 63.0
    assert topology.cpu_list([0b1011, 1], 64) == "0-1,3,64"


def test_bad_topology_data_is_an_error_line_not_a_crash() -> None:
    assert parse_topology("nope", "h", 1.0).errors == ["topology: not a JSON object"]
    topo = parse_topology({"gpus": [{"index": 0, "pcie_gen": "five"}, 7], "links": [["X", "NV1"]]}, "h", 1.0)
    assert len(topo.gpus) == 1 and topo.gpus[0].pcie_gen is None and topo.links == []
    assert topo.errors == ["topology: GPU entry 1 is not an object"]


async def test_the_agent_answers_a_topology_request(tmp_path: Any) -> None:
    layout = create_layout(make_gpus(2), parent=str(tmp_path))
    async with LocalHost() as host:
        data = await host.request("topology", {"sim_dir": str(layout.root)})
    assert data["source"] == "modelled" and len(data["gpus"]) == 2
    topo = parse_topology(data, "demo", 1.0)
    assert topo.gpus[0].pcie_gen == 5 and topo.summary.startswith("2 x PCIe Gen5 x16")
