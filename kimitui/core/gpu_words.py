"""A GPU's state in words, from any source (the agent's sample, the DCGM exporter's series): its last XID, its
clock caps, and its PCIe link, said only while the GPU works and only when below its maximum."""

from __future__ import annotations

from collections.abc import Sequence

from kimitui.core.events import GpuSample

BUSY_PCT = 10.0
"""A GPU's link is judged only while it works: an idle GPU trains its link down to save power (Gen1 on an idle
H200), a busy one should run it at its maximum."""


def busy_link(util_pct: float | None, link: Sequence[float | None] | None) -> tuple[int, int, int, int] | None:
    """(generation, width, most generation, most width) of a busy GPU whose LINK ([generation, width] now, then at
    most) is below its maximum; None when idle, at its maximum, or unknown (a value missing or out of range)."""
    if util_pct is None or util_pct < BUSY_PCT or link is None or len(link) != 4:
        return None
    if any(x is None or not 0 < x < 1000 for x in link):
        return None
    gen, width, top, top_width = (int(x) for x in link)  # type: ignore[arg-type]
    if gen >= top and width >= top_width:
        return None
    return gen, width, top, top_width


def busy_link_words(util_pct: float | None, link: Sequence[float | None] | None) -> str:
    """``PCIe Gen4 x16 of Gen5 x16`` for a busy GPU whose link is below its maximum (``busy_link``); "" else."""
    low = busy_link(util_pct, link)
    return "" if low is None else f"PCIe Gen{low[0]} x{low[1]} of Gen{low[2]} x{low[3]}"


def gpu_state_words(g: GpuSample) -> list[str]:
    """What a sampled GPU's row says besides its figures, the gravest first: ``XID 79``, each clock cap
    (``power cap``, ``thermal``, ...), ``Gen4 x8`` for a busy link below its maximum (short: the dashboard's
    name column is narrow; the fleet view says it whole)."""
    words = [f"XID {g.xid}"] if g.xid else []
    words += [cap for cap in g.throttle or [] if isinstance(cap, str)]
    low = busy_link(g.util_pct, g.pcie)
    if low is not None:
        words.append(f"Gen{low[0]} x{low[1]}")
    return words
