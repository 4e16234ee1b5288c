"""A fleet GPU's PCIe link in words, from any source (the DCGM exporter's series, our agent's sample): said only
while the GPU works and only when below its maximum."""

from __future__ import annotations

from collections.abc import Sequence

from kimitui.hostside.clocks import link_text

BUSY_PCT = 10.0
"""A GPU's link is judged only while it works: an idle GPU trains its link down to save power (Gen1 on an idle
H200), a busy one should run it at its maximum."""


def busy_link_words(util_pct: float | None, link: Sequence[float | None] | None) -> str:
    """``PCIe Gen4 x16 of Gen5 x16`` for a busy GPU whose LINK ([generation, width] now, then at most) is below its
    maximum; "" when idle, at its maximum, or unknown (a value missing or out of range)."""
    if util_pct is None or util_pct < BUSY_PCT or link is None or len(link) != 4:
        return ""
    if any(x is None or not 0 < x < 1000 for x in link):
        return ""
    gen, width, top, top_width = (int(x) for x in link)  # type: ignore[arg-type]
    return link_text(gen, width, top, top_width)
