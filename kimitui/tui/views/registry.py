"""The dashboard's tabs after the first (the Dashboard is the app's own layout): each one view module's widget,
its tab's id and label, mounted the first time its tab is shown (a faster first frame). A new view is a module
whose widget has ``draw(ctx)`` (``base.View``) and one entry here; a key that shows it goes in ``keys.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.widget import Widget


@dataclass(frozen=True, slots=True)
class ViewEntry:
    id: str
    """The tab's id (what ``show_view`` and the keys name)."""
    label: str
    make: Callable[[], Widget]
    """The view's widget (a ``base.View``), made when its tab is first shown."""
    samples: bool = True
    """It reads the host's samples (the GPUs, the processes, their history, or the clock they move): drawn again
    at each sample. False: drawn again only when the fold takes another event (``SessionState.events_rev``)."""


def _bench() -> Widget:
    from kimitui.tui.views.macro_view import BenchView

    return BenchView(id="bench-view")


def _cleanup() -> Widget:
    from kimitui.tui.views.cleanup_view import CleanupView

    return CleanupView(id="cleanup-view")


def _micro() -> Widget:
    from kimitui.tui.views.micro_view import MicroView

    return MicroView(id="micro-view")


def _analysis() -> Widget:
    from kimitui.tui.views.campaign_view import AnalysisView

    return AnalysisView(id="analysis-view")


VIEWS: tuple[ViewEntry, ...] = (
    ViewEntry("bench", "Benchmarks", _bench, samples=False),
    ViewEntry("cleanup", "Cleanup", _cleanup),
    ViewEntry("micro", "Micro", _micro, samples=False),
    ViewEntry("analysis", "Analysis", _analysis, samples=False),
)
"""In tab order, after the Dashboard."""
