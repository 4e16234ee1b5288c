"""The operator's answer to a step's preview, and headless ways to give it.

A consent callback is ``async (StepPreview) -> ConsentDecision``. ``pids=None`` accepts the targets as
previewed; a list keeps only those ticked (targets unticked are spared; a spared process marked
optional, such as an NVML-only monitor, may be ticked in). Protected processes stay untouched whatever
is ticked.
"""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kimitui.core.events import ProcRef, StepPreview

OPTIONAL = "optional: "
"""Prefix of a spared process's reason when the operator may tick it in (handle-only holders)."""


def is_optional(ref: ProcRef) -> bool:
    return ref.reason.startswith(OPTIONAL)


@dataclass(slots=True)
class ConsentDecision:
    accepted: bool
    pids: list[int] | None = None
    operator: str = ""
    note: str = ""


ConsentCallback = Callable[[StepPreview], Awaitable[ConsentDecision]]


def current_operator() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def auto_consent(steps: Iterable[str], operator: str | None = None) -> ConsentCallback:
    """Headless ``--yes graceful,process,device``: accept the named steps as previewed, decline others."""
    allowed = {s.strip() for s in steps if s.strip()}
    who = operator or current_operator()

    async def decide(preview: StepPreview) -> ConsentDecision:
        if preview.step in allowed:
            return ConsentDecision(True, None, who, "--yes")
        return ConsentDecision(False, None, who, f"{preview.step} not in --yes")

    return decide


def decline_all(operator: str | None = None) -> ConsentCallback:
    """``--dry-run``: previews only."""
    return auto_consent((), operator)
