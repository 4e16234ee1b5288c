"""What a controller sees of the app: these members and no others (tests/test_import_contracts.py checks that
the controllers use exactly these), so a controller is typed against this and never imports the app."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel
    from textual.screen import Screen
    from textual.worker import Worker

    from kimitui.core.session import Session
    from kimitui.live.context import LiveContext

Result = TypeVar("Result")


@runtime_checkable
class AppPort(Protocol):
    session: Session
    """The bus: a controller publishes what it starts into it and reads the fold from it."""
    live: LiveContext | None
    """The host behind a live session (None in a replay: a controller says it needs one)."""

    @property
    def screen(self) -> Screen[Any]:
        """The screen on top (a consent modal a controller pushed, or another one over it)."""
        ...

    @property
    def is_running(self) -> bool:
        """False once the app is closing: an event seen then shows no tab and no notice."""
        ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None: ...

    def push_screen(self, screen: Screen[Result], callback: Callable[[Result | None], Any] | None = None,
                    wait_for_dismiss: bool = False) -> Any: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], name: str | None = "", group: str = "default",
                   description: str = "", exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Worker[Any]: ...

    def action_show_view(self, view: str) -> None:
        """Show a tab (the one following what was started)."""
        ...
