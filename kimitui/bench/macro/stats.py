"""Statistics as numpy computes them (vLLM uses numpy), without numpy."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kimitui.core.figures import percentile

__all__ = ["mean_std", "percentile", "pword"]


def pword(p: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
