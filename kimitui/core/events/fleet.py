"""What a fleet says: every host's GPUs at once, one event a round (``kimitui fleet``).

A round is what the source could read of every host it knows: over SSH each host's latest agent sample, from
Prometheus the DCGM exporter's gauges (and vLLM's, where scraped), from the demo its simulated hosts. A host that
could not be read is still a row, with its state and why (``down``, ``slow``, ``stale``), never left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from kimitui.core.events.base import Event

HostState = Literal["up", "down", "slow", "stale", "connecting"]
"""``up``: read this round. ``down``: not answering (its error in ``detail``). ``slow``: no answer within the
round's deadline; its last figures are kept. ``stale``: the source's data is older than it should be (Prometheus'
last scrape, an agent that stopped sending). ``connecting``: not read yet."""

FleetSource = Literal["ssh", "prometheus", "demo"]


@dataclass(frozen=True, slots=True)
class FleetGpu:
    """One GPU of a fleet host. ``None``: the source does not say (Prometheus has no process list; an older
    DCGM exporter no SM clock)."""

    index: int
    name: str = ""
    uuid: str = ""
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    util_pct: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    holders: int | None = None
    """Processes holding memory or a CUDA context on it (None: the source cannot list processes)."""
    service_holders: int | None = None
    """Of those, the host's service's (a systemd unit's or a container's processes; the demo's vLLM)."""
    xid: int | None = None
    """The last XID error the driver reported for it (DCGM_FI_DEV_XID_ERRORS); 0 or None: none."""
    throttle: list[str] = field(default_factory=list)
    """Clock caps in force (``power cap``, ``thermal``, ...; as kimitui/hostside/clocks.py words them)."""
    link: str = ""
    """Its PCIe link when below its maximum (``PCIe Gen4 x16 of Gen5 x16``); "" when at it or unknown."""
    error: str = ""


@dataclass(frozen=True, slots=True)
class FleetHost:
    """One host of the fleet as this round read it."""

    name: str
    state: HostState = "up"
    detail: str = ""
    """Why it is not up (the connection's error, Prometheus' scrape error), one line."""
    gpus: list[FleetGpu] = field(default_factory=list)
    requests_running: float | None = None
    """The host's vLLM: requests running and waiting (vllm:num_requests_*), where read."""
    requests_waiting: float | None = None
    service: str = ""
    """The host's service as the source names it (a unit, a container, ``vllm``); "" when none runs."""
    age_s: float | None = None
    """How old its figures are at the round's time (a Prometheus sample's age, an agent's last sample)."""


@dataclass(frozen=True, slots=True)
class FleetSample(Event):
    """One round of the fleet: every host the source knows, read at once."""

    type: ClassVar[str] = "fleet_sample"
    source: FleetSource = "demo"
    where: str = ""
    """The source's address (a Prometheus URL, the hosts file) or the demo's words."""
    seq: int = 0
    hosts: list[FleetHost] = field(default_factory=list)
    round_ms: float | None = None
    """How long the round's reads took (a Prometheus query round, the slowest host's answer)."""
    error: str = ""
    """The source itself could not be read this round (Prometheus down), one line; its hosts are then the last
    round's, marked stale."""


EVENTS: tuple[type[Event], ...] = (FleetSample,)
"""The events this module declares (the registry reads them)."""
