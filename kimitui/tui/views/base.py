"""What a tab's view is given to draw (``ViewContext``: the fold, the theme's colours, whether the dashboard is
live) and the one method the app calls on it (``View.draw``). The views themselves are listed in
``registry.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kimitui.core.state import SessionState
    from kimitui.tui.palette import Colors


@dataclass(frozen=True, slots=True)
class ViewContext:
    state: SessionState
    colors: Colors
    live: bool
    """A live dashboard (its keys act on the host), not a replay."""


class View(Protocol):
    def draw(self, ctx: ViewContext) -> None:
        """Show the fold as it is now (called when the session has a new version or the theme changed, while
        the view's tab is the one shown)."""
