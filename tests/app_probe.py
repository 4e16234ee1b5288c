"""The dashboard as the tests look at it: ``ProbedApp`` is a ``KimituiApp`` that also keeps what only a test
wants to know, seen through Textual itself, so the app carries no test-only state:

- ``notices``: every notification's message, oldest first, as the app gave it to Textual (after its
  printable pass), read off the ``Notify`` message Textual posts for it (a toast expires; this list does not);
- ``frames``: redraws that drew a view anew (the visible view's stamp changed), not the ones that found
  nothing new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.message import Message
from textual.notifications import Notify

from kimitui.tui import app as app_module
from kimitui.tui.app import KimituiApp


class ProbedApp(KimituiApp):
    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))
    """Textual reads a relative CSS_PATH beside the class's own module: here, beside the app's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notices: list[str] = []
        self.frames = 0

    def post_message(self, message: Message) -> bool:
        if isinstance(message, Notify):
            self.notices.append(message.notification.message)
        return super().post_message(message)

    def redraw(self) -> None:
        before = dict(self._drawn)
        super().redraw()
        if self._drawn != before:
            self.frames += 1
