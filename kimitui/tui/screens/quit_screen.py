"""Ctrl-C while something acts on the host (a cleanup step, a sweep, a micro run, a campaign): quit, or stay."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class QuitScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    QuitScreen { align: center middle; }
    QuitScreen > Vertical { width: 64; max-width: 100%; height: auto; border: thick $warning; background: $surface;
                            padding: 0 1; }
    QuitScreen #quit-keys { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Quit"),
        Binding("n,escape", "answer(False)", "Stay"),
    ]

    def __init__(self, busy: str) -> None:
        super().__init__()
        self.busy = busy
        """What is running, e.g. 'a cleanup step is running'."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"{self.busy}: quit anyway?", id="quit-question")
            yield Static("y / enter / ctrl+c quit · n / esc stay", id="quit-keys")

    def action_answer(self, quit_: bool) -> None:
        self.dismiss(quit_)
