"""A phase's start and end, and the one word for how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kimitui.core.events.base import Event


@dataclass(frozen=True, slots=True)
class PhaseStart(Event):
    type: ClassVar[str] = "phase_start"
    phase: str = ""
    title: str = ""


@dataclass(frozen=True, slots=True)
class PhaseEnd(Event):
    type: ClassVar[str] = "phase_end"
    phase: str = ""
    ok: bool = True
    note: str = ""


def phase_outcome(ok: bool | None, note: str) -> str:
    """How a phase ended, as the record says it, in one word: ok, cancelled (the operator's cancel or an
    interrupt: a sweep's "cancelled after 2 of 5 levels", a micro run's "gemm done, allreduce cancelled"),
    refused (a micro run the GPUs' holders stopped before it began), cut off (kimitui stopped during it),
    else FAILED."""
    if ok:
        return "ok"
    note = note.strip()
    if note.startswith("refused"):
        return "refused"
    if note.startswith("cut off"):  # kimitui.core.events.campaign.CUT_OFF
        return "cut off"
    if note.startswith(("cancelled", "interrupted")) or ("cancelled" in note and "failed" not in note):
        return "cancelled"
    return "FAILED"


EVENTS: tuple[type[Event], ...] = (PhaseStart, PhaseEnd)
"""The events this module declares (the registry reads them)."""
