"""The replay's jump dialog (``g``): where to go, typed; a time it cannot read is said on its line and the
dialog stays open."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from kimitui.core.timecode import HINT, parse_jump, span


class JumpDialog(ModalScreen[float | None]):
    """Gives the run time to jump to, or None when escaped."""

    DEFAULT_CSS = """
    JumpDialog { align: center middle; }
    JumpDialog > Vertical { width: 72; max-width: 100%; height: auto; border: round $primary;
                            background: $surface; padding: 0 1; }
    JumpDialog #jump-error { color: $error; }
    JumpDialog #jump-hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, start: float, end: float, now: float) -> None:
        super().__init__()
        self.start, self.end, self.now = start, end, now

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"jump to (the run lasts {span(self.end - self.start)}, the replay is at "
                         f"{span(self.now - self.start)})", classes="title")
            yield Input(placeholder="mm:ss, +30s, -5m, @14:05", id="jump-input")
            yield Static(HINT, id="jump-hint")
            yield Static("", id="jump-error")

    def on_input_submitted(self, message: Input.Submitted) -> None:
        message.stop()
        try:
            target = parse_jump(message.value, self.start, self.end, self.now)
        except ValueError as exc:
            self.query_one("#jump-error", Static).update(str(exc))
            return
        self.dismiss(target)

    def action_cancel(self) -> None:
        self.dismiss(None)
