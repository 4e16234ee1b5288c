"""A serving sweep as the fold holds it: its levels' points (by concurrency, or by request rate), its progress,
the server's samples through it, its verdict and each level's energy; and the one judgement of a sweep as failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kimitui.core.events import MacroPoint, MacroProgress, MacroVerdict, ServerSample, level_failed
from kimitui.core.events.macro import LevelAxis, level_label
from kimitui.core.level_energy import EnergyMeter, LevelEnergy
from kimitui.core.level_result import LevelResult


def sweep_failure(levels: Iterable[LevelResult]) -> str | None:
    """The one judgement of a sweep as failed: it has levels and every one of them failed (nothing was
    measured). Returns what its phase's end says (the count and the first level's error), else None.
    ``levels`` in order. The macro phase ends on it, the fold reads it."""
    levels = list(levels)
    if not levels or not all(lv.all_failed for lv in levels):
        return None
    error = next((e for lv in levels if (e := lv.first_error)), None)
    plural = "s" if len(levels) > 1 else ""
    return f"every request failed at {len(levels)} level{plural}" + (f": {error}" if error else "")


@dataclass(slots=True)
class Sweep:
    """One serving sweep: its points by level (a concurrency, or a request rate where its levels are rates:
    ``MacroPoint.key``); a later sweep is a new series, not a replacement."""

    start: float
    title: str = ""
    points: dict[float, MacroPoint] = field(default_factory=dict)
    end: float | None = None
    ok: bool | None = None
    note: str = ""
    phase: bool = False
    """Its macro phase has started (a sweep is opened by its first progress, its phase start, or its first
    point)."""
    progress: MacroProgress | None = None
    """The latest progress (None for a sweep recorded without: only its points and phase)."""
    server: list[ServerSample] = field(default_factory=list)
    """The server's gauges read through the sweep (none when its /metrics could not be read)."""
    verdict: MacroVerdict | None = None
    """Its verdict (the SLOs at p99, the knee), once it has ended with a level; None in older runs."""
    energy: dict[float, LevelEnergy] = field(default_factory=dict)
    """Each level's GPU energy from the power samples recorded while it ran (``level_energy``)."""
    meter: EnergyMeter | None = None

    @property
    def levels(self) -> list[float]:
        """The planned levels (from its progress), else the levels it has points for."""
        if self.progress is not None and self.progress.levels:
            return list(self.progress.levels)
        return sorted(self.points)

    @property
    def axis(self) -> LevelAxis:
        """What its levels are: concurrencies, or request rates."""
        if self.progress is not None and self.progress.axis == "rate":
            return "rate"
        return "rate" if any(p.rate is not None for p in self.points.values()) else "concurrency"

    def label(self, key: float) -> str:
        """A level of this sweep as the operator reads it: ``c=8`` or ``2.5 req/s``."""
        return level_label(key, self.axis)

    @property
    def failure(self) -> str | None:
        """Why the sweep failed when every level of it failed (``sweep_failure``), else None."""
        return sweep_failure(p.result for p in self.point_list)

    @property
    def status(self) -> str:
        """starting, running, cancelling, done, cancelled or failed; a sweep recorded without progress is
        running until its phase ends, then done (ok) or cancelled. An ended sweep whose every level failed
        is failed, however it was recorded (a run from before its phase said so ended ok)."""
        if self.end is not None and self.failure is not None:
            return "failed"
        if self.progress is not None:
            if self.end is not None and self.progress.status in ("starting", "running", "cancelling"):
                return "done" if self.ok else "cancelled"  # its phase ended: the last progress is behind
            return self.progress.status
        if self.end is None:
            return "running"
        return "done" if self.ok else "cancelled"

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running", "cancelling")

    @property
    def point_list(self) -> list[MacroPoint]:
        return [self.points[c] for c in sorted(self.points)]

    @property
    def failed_levels(self) -> list[MacroPoint]:
        return [p for p in self.point_list if level_failed(p)]
