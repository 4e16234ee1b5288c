"""The terminal written only where it changed: the ``_display`` of kimitui's apps (the dashboard's, the fleet's).

Textual writes every frame through ``App._display``; on kimitui's drawing path (``draw_mode``: not with
``KIMITUI_PLAIN_DRAW=1``) a partial frame is cut to the cells that differ from what the terminal shows
(``screen_diff.minimal_update``), and a frame with nothing changed writes nothing. While the app is suspended the
terminal is another program's: what it shows is forgotten, and the next frame is sent whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import RenderableType
from textual.app import App
from textual.screen import Screen

if TYPE_CHECKING:
    from kimitui.tui.screen_diff import ScreenShadow


class DiffDraw(App[None]):
    """Mixed into an app: call ``start_diff_draw(plain)`` in ``__init__`` and ``forget_on_suspend()`` on mount."""

    _shadow: ScreenShadow | None = None

    def start_diff_draw(self, plain: bool) -> None:
        self._shadow = None
        if not plain:
            from kimitui.tui.screen_diff import ScreenShadow  # Textual's internals: imported on kimitui's path only

            self._shadow = ScreenShadow()

    def forget_on_suspend(self) -> None:
        if (shadow := self._shadow) is not None:  # suspended, the terminal is another's: nothing on it is known
            self.app_suspend_signal.subscribe(self, lambda _: shadow.forget(), immediate=True)

    def _display(self, screen: Screen[object], renderable: RenderableType | None) -> None:
        # Textual's one place that writes a frame: a partial one is cut to the cells that changed
        shadow = self._shadow
        if shadow is None:  # plain draw (no shadow made): Textual's own
            return super()._display(screen, renderable)
        from kimitui.tui.screen_diff import DiffUpdate, minimal_update
        driver = self._driver
        written = (renderable is not None and not self._batch_count and self._running and not self._closed
                   and not self.is_headless and driver is not None)
        if written and driver is not None and not driver.is_inline:
            renderable = minimal_update(shadow, renderable, (self.size.width, self.size.height),
                                        self.console)  # type: ignore[assignment]
            if isinstance(renderable, DiffUpdate) and not any(self.cursor_position):
                # Textual ends every frame with a move to the cursor's place: home, where no widget has put it.
                # The cursor is hidden and the next update places itself, so the move is left out, and a frame
                # with nothing changed writes nothing.
                try:
                    if renderable.sequences:
                        self._begin_update()
                        try:
                            driver.write(renderable.sequences)
                        finally:
                            self._end_update()
                        driver.flush()
                finally:
                    self.post_display_hook()
                return
        super()._display(screen, renderable)
