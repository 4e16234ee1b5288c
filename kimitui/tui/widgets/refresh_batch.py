"""Widgets repainted together in one redraw tell the screen from that redraw, not each from its own task.

A widget's ``refresh`` asks its own message pump to go idle (a Prompt message), and only from that idle
does it post the screen its Update: for a frame where the header, the GPU table and the memory history
changed, three tasks are woken, each to dispatch a Prompt and an Idle through its class hierarchy, before
the screen hears of any of them. Inside ``refresh_batch()`` a ``BatchedIdle`` widget is noted instead, and
when the batch ends each noted widget posts the screen what it has to repaint (Textual's own
``_check_refresh``, which its idle would have run): the same Update messages, from the redraw's task.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    _Mixin = object  # not a DOMNode: Textual takes CSS along the first DOMNode base

_batch: ContextVar[list[Widget] | None] = ContextVar("kimitui_refresh_batch", default=None)


class BatchedIdle(_Mixin):
    """A mixin: inside ``refresh_batch()`` a repaint is posted to the screen when the batch ends."""

    def check_idle(self) -> None:
        batch = _batch.get()
        if batch is None or not self._running or not _paint_only(self):
            super().check_idle()
        elif self not in batch:
            batch.append(self)


def _paint_only(widget: Widget) -> bool:
    """Whether all the widget's idle would do is post the screen its repaint: a layout, a scroll or a
    restyle is left to the idle, in Textual's order (a table laid out from the redraw, before the widgets
    mounted beside it were, took a scrollbar the idle's order does not give it); so are callbacks asked to
    run next (run from the idle)."""
    return not (widget._layout_required or widget._scroll_required or widget._refresh_styles_required
                or widget._next_callbacks)


@contextmanager
def refresh_batch(batched: bool = True) -> Iterator[None]:
    """Repaints asked for inside are posted to the screen when it ends; with ``batched`` False (the app's plain
    draw, kimitui/tui/draw_mode.py) it does nothing: each widget posts its own from its idle, as in Textual."""
    if not batched:
        yield
        return
    batch: list[Widget] = []
    token = _batch.set(batch)
    try:
        yield
    finally:
        _batch.reset(token)
        for widget in batch:
            if _paint_only(widget):
                widget._check_refresh()
            # else: asked for more since it was noted, and prompted then (check_idle above)
