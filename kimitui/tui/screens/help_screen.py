"""The help screen: what each key does, in replay and live mode."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

REPLAY_KEYS: tuple[tuple[str, str], ...] = (
    ("space", "pause / resume the replay"),
    ("+ / -", "replay faster / slower (0.5x to 64x)"),
    ("n / p", "jump to the next / previous phase boundary"),
    (". / ,", "step one event forward / back (pauses; back is the state before that event)"),
    ("left/right", "10 s back / forward"),
    ("g", "jump to a time: mm:ss or h:mm:ss into the run, +30s / -5m, @14:05 (wall clock)"),
    ("l", "loop: the end plays on from the start"),
    ("e / End", "jump to the end of the run"),
)
VIEW_KEYS: tuple[tuple[str, str], ...] = (
    ("d / b / c", "dashboard / benchmarks / cleanup view"),
    ("u / a", "micro view / analysis view (the decode-step budget, the verdict)"),
    ("ph M C U", "memory views: where phases began (Macro, Cleanup, micro U, Analysis, Restart, check K)"),
)
LIVE_KEYS: tuple[tuple[str, str], ...] = (
    ("M", "run a macro sweep (live): dialog, then live plots"),
    ("x (bench)", "cancel the sweep (finished levels kept)"),
    ("F", "free the GPUs (live): set up, then confirm each step"),
    ("R", "restart the service (live): preview, confirm, wait for health"),
    ("x", "cancel the running cleanup (the rest declined)"),
    ("K", "run the micro benchmarks on the host (live)"),
    ("x (micro)", "cancel the micro run (every rank ends)"),
    ("P", "campaign (kimitui campaign FILE): pause before the next phase / go on"),
    ("S / A", "campaign: skip the next phase / abort (the phase in hand stops, restart offered)"),
)
COMMON_KEYS: tuple[tuple[str, str], ...] = (
    ("ctrl+p", "command palette: controls, views, themes"),
    ("F1 / ?", "this help"),
    ("q / ctrl+c", "quit (ctrl+c asks first while a cleanup, sweep, micro run or campaign runs)"),
)
KEYS = REPLAY_KEYS + VIEW_KEYS + LIVE_KEYS + COMMON_KEYS
"""Every key the help names."""


def help_sections(replay: bool) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """The keys by section, what the session can use first: a replay's keys in a replay, the live actions in a
    live session; the other mode's keys last, said to do nothing here."""
    if replay:
        return [("replay", REPLAY_KEYS), ("views", VIEW_KEYS), ("", COMMON_KEYS),
                ("live only: these need a live host (M, F and R do nothing in a replay)", LIVE_KEYS)]
    return [("live", LIVE_KEYS), ("views", VIEW_KEYS), ("", COMMON_KEYS),
            ("replay only: these do nothing in a live session", REPLAY_KEYS)]


def help_content(replay: bool, run_path: str | None = None) -> Content:
    parts: list[str | tuple[str, str]] = [("kimitui keys\n", "bold $accent")]
    for title, keys in help_sections(replay):
        parts.append((f"\n{title}\n" if title else "\n", "$text-muted"))
        for key, what in keys:
            parts += [(f"  {key:<10}", "bold $primary"), f" {what}\n"]
    parts.append(("\nreplay mode: the run plays at its recorded pace\n" if replay
                  else "\nlive mode: every event of this session is recorded\n", "$text-muted"))
    if run_path:
        parts += [("\nrun file ", "$text-muted"), (run_path, "bold"),
                  ("\n" if replay else "\n(every event of this session is recorded there)\n", "$text-muted")]
    parts.append(("escape, q or F1 closes this screen", "$text-muted"))
    return Content.assemble(*parts)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 90%; border: round $primary; background: $surface;
        padding: 1 2;
    }
    """
    BINDINGS = [
        Binding("escape,q,f1,question_mark", "dismiss_help", "Close", show=True),
    ]

    def __init__(self, replay: bool, run_path: str | None = None) -> None:
        super().__init__()
        self.replay = replay
        self.run_path = run_path

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_content(self.replay, self.run_path), id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
