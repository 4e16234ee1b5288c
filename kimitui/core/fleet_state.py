"""The fleet as the fold knows it (``kimitui fleet``): the latest round of every host, and what needs the operator
first.

The order puts what needs the operator at the top: a host that cannot be read (down, slow, stale), then GPU
memory held while no service holds it (the cleanup this tool exists for), then the driver's XID errors, then a
GPU under a clock cap or on a PCIe link below its maximum, then the rest by name. ``attention`` gives a host's
rank and its reasons in words, the same for the view, the JSON and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.core.events.fleet import FleetGpu, FleetHost, FleetSample

HELD_MIB = 1024.0
"""GPU memory over this with no service process on the GPU is memory held with no service: a crashed engine's
orphans, a forgotten notebook (an idle GPU with a context shows a few hundred MiB)."""

DOWN, HELD, XID, CAPPED, OK = range(5)
"""Attention ranks, most urgent first."""


def held_without_service(host: FleetHost, g: FleetGpu) -> bool:
    """GPU memory over ``HELD_MIB`` while no service process holds the GPU (where the source lists processes),
    or the host runs no service at all (where it does not: Prometheus)."""
    if g.mem_used_mib is None or g.mem_used_mib <= HELD_MIB:
        return False
    if g.service_holders is not None:
        return g.service_holders == 0
    return not host.service


def _gpus(which: list[int]) -> str:
    return ("GPU " if len(which) == 1 else "GPUs ") + ",".join(map(str, which))


def attention(host: FleetHost) -> tuple[int, list[str]]:
    """(rank, reasons): the host's most urgent rank (``DOWN`` .. ``OK``) and every reason in words, most urgent
    first; ``OK`` and [] for a host that needs nothing."""
    if host.state in ("down", "slow", "stale", "connecting"):
        return DOWN, [host.state + (f": {host.detail}" if host.detail else "")]
    reasons: list[tuple[int, str]] = []
    held = [g.index for g in host.gpus if held_without_service(host, g)]
    if held:
        mib = sum(g.mem_used_mib or 0.0 for g in host.gpus if g.index in held)
        reasons.append((HELD, f"{_gpus(held)}: {mib:,.0f} MiB held with no service"))
    for g in host.gpus:
        if g.xid:
            reasons.append((XID, f"GPU {g.index}: XID {g.xid}"))
    capped = {}
    for g in host.gpus:
        for word in [*g.throttle, *([g.link] if g.link else [])]:
            capped.setdefault(word, []).append(g.index)
    reasons += [(CAPPED, f"{_gpus(on)}: {word}") for word, on in capped.items()]
    reasons.sort(key=lambda r: r[0])
    return (reasons[0][0] if reasons else OK), [words for _, words in reasons]


def sort_key(host: FleetHost) -> tuple[int, str]:
    return attention(host)[0], host.name


@dataclass(slots=True)
class FleetState:
    """The fleet's latest round: every host by name (a host missing from a later round keeps its last row)."""

    source: str = ""
    where: str = ""
    rounds: int = 0
    t: float = 0.0
    round_ms: float | None = None
    error: str = ""
    """The latest round's source error (Prometheus not answering), "" once it answers again."""
    hosts: dict[str, FleetHost] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict, compare=False)
    """The round at which each host's row last changed: the view redraws those rows only."""

    def ordered(self) -> list[FleetHost]:
        """Every host, what needs the operator first (``sort_key``)."""
        return sorted(self.hosts.values(), key=sort_key)

    def fold(self, ev: FleetSample) -> None:
        self.source, self.where, self.t, self.round_ms, self.error = ev.source, ev.where, ev.t, ev.round_ms, ev.error
        self.rounds += 1
        for host in ev.hosts:
            if self.hosts.get(host.name) != host:
                self.hosts[host.name] = host
                self.revisions[host.name] = self.rounds

    def counts(self) -> dict[str, int]:
        """Hosts by state and GPUs in all: ``{"hosts": 8, "up": 7, "down": 1, "gpus": 64}``."""
        out = {"hosts": len(self.hosts), "gpus": sum(len(h.gpus) for h in self.hosts.values())}
        for h in self.hosts.values():
            out[h.state] = out.get(h.state, 0) + 1
        return out
