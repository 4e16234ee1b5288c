"""The SLO search (``kimitui bench macro --slo ttft:200,tpot:50 --search``): the highest concurrency at which a
level meets the SLOs at p99 (``verdict.level_meets``: no request failed, each p99 within its SLO), found by
bracketing and bisection instead of a fixed list of levels.

Bracketing doubles the concurrency from the lowest level given (``--concurrency``; 1 by default) until a probe
misses the SLOs or the highest level given is reached; bisection then halves the gap between the highest probe
that met them and the lowest that missed, down to one. Each probe runs ``probe_requests``: at least
``PROBE_WAVES`` requests per concurrency slot (so every slot sends several, the first wave's queueing included)
and never fewer than the sweep's own requests per level; the answer is said with the probes it took. The answer
assumes that missing the SLOs at one concurrency means missing them at every higher one (a server's latency
grows with its load); a level that met them above one that missed is reported as tried, not searched past.

With request rates as the levels (``--request-rate LOW HIGH --search``, ``RateSearch``) the same bracketing
doubles the rate, and the bisection stops once the gap between the highest rate that met and the lowest that
missed is within ``RATE_RESOLUTION`` of the lower (10 %); each probe sends ``RATE_LEVEL_S`` seconds of its
arrivals, at least ``RATE_LEVEL_MIN_REQUESTS`` (``MacroConfig.rate_level_requests``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

PROBE_WAVES = 4
"""Requests per concurrency slot in a probe, at least: each probe's p99 is over ``4 x c`` requests or more."""
RATE_RESOLUTION = 0.10
"""A rate search stops when the rate that missed is within 10 % of the one that met."""


@dataclass(slots=True)
class SloSearch:
    """Where the search is: the probes so far (concurrency, met the SLOs) and the next probe."""

    lowest: float
    highest: float
    tried: list[tuple[float, bool]] = field(default_factory=list)

    def next(self) -> float | None:
        """The next level to probe; None once the answer is known."""
        if not self.tried:
            return self.lowest
        met = [c for c, ok in self.tried if ok]
        missed = [c for c, ok in self.tried if not ok]
        if not missed:  # bracketing: double until a probe misses, up to the highest level
            top = max(met)
            return None if top >= self.highest else min(2 * top, self.highest)
        hi = min(missed)
        below = [c for c in met if c < hi]
        if not below:  # the lowest level misses: nothing lower is searched
            return None
        return self._between(max(below), hi)

    def _between(self, lo: float, hi: float) -> float | None:
        """The probe between the highest level that met and the lowest that missed (None: close enough)."""
        return None if hi - lo <= 1 else (int(lo) + int(hi)) // 2

    def record(self, level: float, met: bool) -> None:
        self.tried.append((level, met))

    @property
    def answer(self) -> float | None:
        """The highest concurrency that met the SLOs below the lowest that missed them (None: none met)."""
        missed = [c for c, ok in self.tried if not ok]
        hi = min(missed) if missed else None
        met = [c for c, ok in self.tried if ok and (hi is None or c < hi)]
        return max(met) if met else None

    @property
    def order(self) -> list[float]:
        """The levels probed, in the order they ran."""
        return [c for c, _ in self.tried]

    def probe_requests(self, concurrency: int, level_requests: int) -> int:
        """The requests of a probe at this concurrency: ``PROBE_WAVES`` per slot, or the sweep's own if more."""
        return max(level_requests, PROBE_WAVES * concurrency)

    @property
    def planned(self) -> int:
        """Probes a search over these bounds takes at most (for the progress): the bracketing's doublings, then
        the bisection of the widest gap between two of them."""
        levels = [self.lowest]
        while levels[-1] < self.highest:
            levels.append(min(2 * levels[-1], self.highest))
        gap = max((b - a for a, b in itertools.pairwise(levels)), default=1)
        return len(levels) + (int(gap) - 1).bit_length()


@dataclass(slots=True)
class RateSearch(SloSearch):
    """The search over request rates (requests/s): bisection down to ``RATE_RESOLUTION`` of the rate, each
    probe rounded to 3 significant figures (a rate an operator can type back)."""

    def _between(self, lo: float, hi: float) -> float | None:
        if hi - lo <= RATE_RESOLUTION * lo:
            return None
        mid = float(f"{(lo + hi) / 2:.3g}")
        return mid if lo < mid < hi else None

    @property
    def planned(self) -> int:
        levels = [self.lowest]
        while levels[-1] < self.highest:
            levels.append(min(2 * levels[-1], self.highest))
        gap = max((b / a - 1 for a, b in itertools.pairwise(levels)), default=0.0)
        return len(levels) + (math.ceil(math.log2(gap / RATE_RESOLUTION)) if gap > RATE_RESOLUTION else 0)
