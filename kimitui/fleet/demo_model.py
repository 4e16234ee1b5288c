"""The demo fleet's hosts, modelled: 8 GPUs each (the simulated host's RTX PRO 6000 Blackwell), a vLLM service on
all of them, and the load of a serving day that rises and falls, each host at its own phase.

So that the demo shows what the fleet view is for, a few hosts are in trouble, by their place in the fleet
(with 4 hosts or more): the second has lost its service while two orphaned workers still hold memory on GPUs 2
and 3 (memory held with no service, the cleanup this tool exists for), the third runs GPU 5 under its power cap,
the fourth had an XID 79 on GPU 6 and trains GPU 7's link at Gen4. Figures are a function of the time, so two
readers see the same host.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from kimitui.core.events.fleet import FleetGpu, FleetHost
from kimitui.hostside.clocks import link_text

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TOTAL_MIB = 97_887.0
SERVICE_MIB = 88_512.0
"""A vLLM worker's memory on each GPU (gpu_memory_utilization 0.9)."""
ORPHAN_MIB = 40_960.0
IDLE_MIB = 0.0
BOOST_MHZ, CAPPED_MHZ = 2617.0, 2235.0
"""The modelled GPU's SM clock at boost and under its power cap (kimitui/hostside/gemm_rows.py's model)."""
MAX_LINK = (5, 16)
"""The modelled GPUs' PCIe link at most: Gen5 x16."""
MAX_BATCH = 64
MODEL = "moonshotai/Kimi-K2.5"
SERVICE = "vllm.service"


@dataclass(slots=True)
class DemoGpu:
    index: int
    uuid: str
    bus_id: str
    orphans: int = 0
    """Processes (no service's) holding ORPHAN_MIB each on it."""
    capped: bool = False
    xid: int = 0
    link: tuple[int, int] = (5, 16)


@dataclass(slots=True)
class DemoHost:
    """One simulated host; ``at(t)`` is what a reader of it sees at time t."""

    name: str
    index: int
    gpus: list[DemoGpu] = field(default_factory=list)
    service: bool = True
    phase: float = 0.0
    period_s: float = 120.0

    def load(self, t: float) -> float:
        """The service's load, 0 to 1: a slow wave with the host's own phase, and a little noise."""
        if not self.service:
            return 0.0
        wave = 0.55 + 0.4 * math.sin(2 * math.pi * (t / self.period_s + self.phase))
        jitter = random.Random(int(t * 2) * 7919 + self.index).uniform(-0.05, 0.05)
        return min(1.0, max(0.02, wave + jitter))

    def gpu_at(self, g: DemoGpu, load: float) -> FleetGpu:
        service = 1 if self.service else 0
        used = (SERVICE_MIB if self.service else IDLE_MIB) + g.orphans * ORPHAN_MIB
        util = round(100.0 * load * (0.97 + 0.03 * ((g.index * 37) % 5) / 4), 1) if self.service else 0.0
        capped = g.capped and self.service  # a GPU at work under its power cap (the load never drops to idle)
        power = round(95.0 + 5.05 * util * (0.92 if capped else 1.0), 1)
        return FleetGpu(index=g.index, name=GPU_NAME, uuid=g.uuid, mem_used_mib=used, mem_total_mib=TOTAL_MIB,
                        util_pct=util, temp_c=round(34.0 + 0.42 * util + (6.0 if capped else 0.0), 1),
                        power_w=power, sm_clock_mhz=CAPPED_MHZ if capped else BOOST_MHZ,
                        holders=service + g.orphans, service_holders=service, xid=g.xid,
                        throttle=["power cap"] if capped else [],
                        link=link_text(*g.link, *MAX_LINK))

    def at(self, t: float) -> FleetHost:
        load = self.load(t)
        running = round(MAX_BATCH * load) if self.service else None
        waiting = max(0, round(MAX_BATCH * 1.6 * (load - 0.8))) if self.service else None
        return FleetHost(name=self.name, state="up", gpus=[self.gpu_at(g, load) for g in self.gpus],
                         requests_running=running, requests_waiting=waiting, service=SERVICE if self.service else "",
                         age_s=0.0)


def demo_hosts(count: int, seed: int = 0, gpus: int = 8) -> list[DemoHost]:
    """COUNT hosts named demo-01.., the troubled ones (the module's docstring) among them when COUNT >= 4."""
    rnd = random.Random(seed)
    out = []
    width = max(2, len(str(count)))
    for i in range(count):
        name = f"demo-{i + 1:0{width}d}"
        cards = [DemoGpu(index=k, uuid=f"GPU-{rnd.getrandbits(32):08x}-{i:04x}-{k:04x}-demo-{rnd.getrandbits(48):012x}",
                         bus_id=f"00000000:{0x18 + 0x10 * k:02X}:00.0") for k in range(gpus)]
        host = DemoHost(name=name, index=i, gpus=cards, phase=rnd.random())
        if count >= 4 and gpus >= 8:
            if i == 1:
                host.service = False
                cards[2].orphans = cards[3].orphans = 1
            elif i == 2:
                cards[5].capped = True
            elif i == 3:
                cards[6].xid = 79
                cards[7].link = (4, 16)
        out.append(host)
    return out
