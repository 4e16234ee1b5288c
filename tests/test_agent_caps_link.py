"""The agent's clock caps and PCIe link per GPU, from each source (NVML, nvidia-smi's CSV, the simulated
driver), and what the fleet over SSH makes of them (a busy GPU's link below its maximum is said, an idle
one's never: it trains down to save power)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kimitui.core.events import GpuSample, HostSample
from kimitui.fleet.ssh_reader import host_of_sample
from kimitui.hostside import nvml, smi
from kimitui.hostside.clocks import reasons_words
from kimitui.hostside.simdriver import SimSource
from tests.agent_helpers import Children, children, make_sim_dir  # noqa: F401
from tests.fake_nvml import FakeNvml, NVMLError
from tests.support import FIXTURES

POWER_CAP, GPU_IDLE = 0x4, 0x1


class CapsNvml(FakeNvml):
    """The fake NVML with the clock event reasons and the PCIe link: GPU 0 idle (its link trained down to Gen1),
    GPU 1 at its power cap in a Gen4 slot."""

    def __init__(self, old_names: bool = False, no_events: frozenset[int] = frozenset(), **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.no_events = no_events
        reasons = {0: GPU_IDLE, 1: POWER_CAP | GPU_IDLE << 8}
        if old_names:
            self.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: reasons[h]
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reasons[h]

    # XIDs: the driver's events, queued as (device handle, code); GPUs in ``no_events`` refuse to register
    nvmlEventTypeXidCriticalError, NVML_ERROR_TIMEOUT = 8, 10
    queued: list[tuple[int, int]]

    def nvmlEventSetCreate(self) -> str:
        self.queued = []
        return "set"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, events: str) -> None:
        assert kind == self.nvmlEventTypeXidCriticalError and events == "set"
        if h in self.no_events:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED, "Not Supported")

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never waits: the sample goes on
        if not self.queued:
            raise NVMLError(self.NVML_ERROR_TIMEOUT, "Timeout")
        h, code = self.queued.pop(0)
        return SimpleNamespace(device=h, eventType=self.nvmlEventTypeXidCriticalError, eventData=code)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int: return {0: 1, 1: 4}[h]
    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int: return 16
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int: return 5
    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int: return 16


@pytest.mark.parametrize("old_names", [False, True])
def test_nvml_gives_the_caps_in_words_and_the_link_now_and_at_most(old_names: bool) -> None:
    gpus, _ = nvml.NvmlSource(CapsNvml(old_names=old_names)).sample()
    assert [g["throttle"] for g in gpus] == [[], ["power cap"]]  # idle is not a cap
    assert [g["pcie"] for g in gpus] == [[1, 16, 5, 16], [4, 16, 5, 16]]


def test_a_pynvml_without_the_calls_says_nothing_of_them() -> None:
    gpus, _ = nvml.NvmlSource(FakeNvml()).sample()
    assert [(g["throttle"], g["pcie"], g["xid"]) for g in gpus] == [(None, None, None), (None, None, None)]


def test_an_xid_event_is_the_gpus_last_xid_until_another_and_a_gpu_not_registered_says_none() -> None:
    fake = CapsNvml()
    src = nvml.NvmlSource(fake)
    assert [g["xid"] for g in src.sample()[0]] == [0, 0]
    fake.queued += [(1, 31), (1, 79)]
    assert [g["xid"] for g in src.sample()[0]] == [0, 79]  # the last of those since the last sample
    assert [g["xid"] for g in src.sample()[0]] == [0, 79]  # kept: the driver said it once
    assert [g["xid"] for g in nvml.NvmlSource(CapsNvml(no_events=frozenset({0}))).sample()[0]] == [None, 0]


FAKE_SMI = r'''#!{python}
import sys
REFUSED = {refused!r}
ROWS = {rows!r}
query = sys.argv[1].split("=", 1)[1].split(",")
for field in query:
    if field in REFUSED:
        print('Field "%s" is not a valid field to query.' % field)
        sys.exit(2)
for row in ROWS:
    print(", ".join(row.get(f, "[N/A]") for f in query))
'''


def fake_smi(tmp_path: Path, refused: set[str]) -> str:
    """An nvidia-smi stand-in (a real executable) with two H100s, GPU 0 idle, GPU 1 at its power cap in a Gen4 slot,
    that refuses the REFUSED fields as an older one does."""
    rows = []
    for i, (used, mask, gen) in enumerate((("1", "0x0000000000000001", "1"), ("70000", "0x0000000000000004", "4"))):
        rows.append({"index": str(i), "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3", "memory.used": used,
                     "memory.total": "81559", "clocks_event_reasons.active": mask,
                     "clocks_throttle_reasons.active": mask, "pcie.link.gen.current": gen,
                     "pcie.link.width.current": "16", "pcie.link.gen.max": "5", "pcie.link.width.max": "16"})
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE_SMI.format(python=sys.executable, refused=sorted(refused), rows=rows))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


CAPS_FIELDS = ["index", "clocks_event_reasons.active", "clocks_throttle_reasons.active", "pcie.link.gen.current",
               "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "utilization.gpu"]


def test_the_real_h100_captures_read_as_the_caps_and_the_link() -> None:
    """Idle (the GPU-idle reason, no cap) and at its 700 W power cap, from NVML and from nvidia-smi."""
    caps = FIXTURES.parent / "h100-caps-link"
    busy = smi.parse_query_gpu((caps / "query-caps-busy-nounits.csv").read_text(), CAPS_FIELDS)
    idle = smi.parse_query_gpu((caps / "query-caps-idle-units.csv").read_text(), CAPS_FIELDS)
    assert [(g["throttle"], g["pcie"]) for g in busy + idle] == [(["power cap"], [5, 16, 5, 16]), ([], [5, 16, 5, 16])]
    read = json.loads((caps / "nvml-link.json").read_text())
    assert {reasons_words(r["reasons"]) == ["power cap"] for r in read["busy"]} == {True}
    assert {tuple(reasons_words(r["reasons"])) for r in read["idle"]} == {()}


def test_nvidia_smi_gives_the_caps_and_the_link() -> None:
    line = ("0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:19:00.0, 580.95.05, 70000, 81559, 563, 100, 40, 61, 699.1, "
            "700.00, 1755, 2619, P0, [N/A], 0, Default, 0x0000000000000004, 4, 16, 5, 16\n")
    g = smi.parse_query_gpu(line)[0]
    assert (g["throttle"], g["pcie"]) == (["power cap"], [4, 16, 5, 16])
    idle = smi.parse_query_gpu(line.replace("0x0000000000000004", "0x0000000000000001").replace(", 4, 16,", ", 1, 16,"))
    assert (idle[0]["throttle"], idle[0]["pcie"]) == ([], [1, 16, 5, 16])
    unknown = smi.parse_query_gpu(line.replace("0x0000000000000004, 4, 16, 5, 16", "[N/A], [N/A], 16, 5, 16"))
    assert (unknown[0]["throttle"], unknown[0]["pcie"]) == (None, None)


@pytest.mark.parametrize("refused,named", [
    (set(), "clocks_event_reasons.active"),
    ({"clocks_event_reasons.active"}, "clocks_throttle_reasons.active"),  # an older driver's name
    ({"clocks_event_reasons.active", "clocks_throttle_reasons.active", "pcie.link.gen.max"}, None),
])
def test_a_field_nvidia_smi_refuses_is_renamed_or_dropped_and_the_rest_kept(tmp_path: Path, refused: set[str],
                                                                           named: str | None) -> None:
    src = smi.SmiSource(fake_smi(tmp_path, refused))
    assert not refused & set(src.gpu_fields) and "memory.reserved" in src.gpu_fields
    assert (named in src.gpu_fields) if named else not any("reasons" in f for f in src.gpu_fields)
    gpus, _ = src.sample()
    assert [g["mem_used_mib"] for g in gpus] == [1.0, 70000.0]
    assert [g["throttle"] for g in gpus] == ([[], ["power cap"]] if named else [None, None])
    assert [g["pcie"] for g in gpus] == ([None, None] if "pcie.link.gen.max" in refused
                                         else [[1, 16, 5, 16], [4, 16, 5, 16]])


def test_the_simulated_driver_caps_a_gpu_at_its_power_limit_and_trains_an_idle_link_down(
        tmp_path: Path, children: Children) -> None:  # noqa: F811
    sim = make_sim_dir(tmp_path / "sim", gpus=3)
    spec = json.loads((sim / "gpus.json").read_text())
    spec["gpus"][2]["pcie_best"] = [4, 16]  # a Gen5 card in a slot that trains to Gen4
    (sim / "gpus.json").write_text(json.dumps(spec))
    children.holder(sim, "cuda", "1,2", 1000.0)
    (sim / "load.json").write_text(json.dumps({"util": 100}))
    gpus, _ = SimSource(str(sim)).sample()
    assert [g["throttle"] for g in gpus] == [[], ["power cap"], ["power cap"]]
    assert [g["pcie"] for g in gpus] == [[1, 16, 5, 16], [5, 16, 5, 16], [4, 16, 5, 16]]
    assert [g["sm_clock_mhz"] for g in gpus] == [180.0, 1980.0, 1980.0]
    (sim / "load.json").write_text(json.dumps({"util": 60}))
    assert [g["throttle"] for g in SimSource(str(sim)).sample()[0]] == [[], [], []]
    assert [g["xid"] for g in gpus] == [0, 0, 0]
    (sim / "xid.json").write_text(json.dumps({"1": 79, "0": "79", "2": -1}))  # a hostile file: only 1 is an XID
    assert [g["xid"] for g in SimSource(str(sim)).sample()[0]] == [0, 79, 0]


def test_the_fleet_row_says_the_caps_and_a_busy_gpus_link_below_its_maximum() -> None:
    def gpu(i: int, util: float, pcie: list[int] | None, throttle: list[str] | None) -> GpuSample:
        return GpuSample(index=i, uuid=f"GPU-{i}", name="H100", util_pct=util, pcie=pcie, throttle=throttle,
                         xid=79 if i == 3 else None)

    sample = HostSample(1.0, gpus=[gpu(0, 0.0, [1, 16, 5, 16], []), gpu(1, 97.0, [4, 16, 5, 16], ["power cap"]),
                                   gpu(2, 97.0, [5, 16, 5, 16], None), gpu(3, 97.0, None, None)])
    row = host_of_sample("gpu-a", sample)
    assert [(g.throttle, g.link) for g in row.gpus] == [
        ([], ""),  # idle: trained down, which is no fault
        (["power cap"], "PCIe Gen4 x16 of Gen5 x16"),
        ([], ""), ([], "")]
    assert [g.xid for g in row.gpus] == [None, None, None, 79]
