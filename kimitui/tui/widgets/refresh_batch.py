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
        if batch is None or not self._running or self._next_callbacks:
            super().check_idle()  # callbacks asked to run next are run from the idle: the Prompt is needed
        elif self not in batch:
            batch.append(self)


@contextmanager
def refresh_batch() -> Iterator[None]:
    batch: list[Widget] = []
    token = _batch.set(batch)
    try:
        yield
    finally:
        _batch.reset(token)
        for widget in batch:
            widget._check_refresh()
