"""The dashboard's keys: the views, the replay's controls, the live actions, and which of them apply where
(``KimituiApp.check_action`` reads the action sets)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType

if TYPE_CHECKING:
    from textual.app import App

VIEWS = ("dashboard", "bench", "cleanup", "micro", "analysis")
REPLAY_ACTIONS = frozenset({"toggle_pause", "faster", "slower", "set_speed", "next_phase", "prev_phase",
                            "step", "step_back", "seek_by", "jump", "toggle_loop", "to_end"})
LIVE_ACTIONS = frozenset({"macro_sweep", "free_gpus", "restart_service", "micro_run"})
"""Keys that act on a live host: a replay leaves them out of its footer (pressed, they say why not)."""
CAMPAIGN_ACTIONS = frozenset({"campaign_pause", "campaign_skip", "campaign_abort"})
"""Keys of a campaign run in the dashboard (kimitui campaign FILE): shown only then."""
HOST_ACTIONS = LIVE_ACTIONS | CAMPAIGN_ACTIONS
"""The actions that start, stop or signal something on the host: a read-only dashboard refuses them."""
READ_ONLY_ENV = "KIMITUI_READ_ONLY"
"""1: the dashboard is read-only (``kimitui serve`` without ``--allow-actions`` sets it for each visitor's app)."""
READ_ONLY_NOTICE = "read-only: start with `--allow-actions`"
ESCAPE_QUITS_ENV = "KIMITUI_ESCAPE_QUITS"
"""1: Escape quits the dashboard, as Ctrl-C does (``kimitui fleet`` sets it for a host's dashboard it opens: Escape
goes back to the fleet)."""


def make_read_only(app: App[object]) -> None:
    """Replace every action of ``HOST_ACTIONS`` on this app (its instance, not the class) by the refusal. Every
    way in looks an action up by name on the app when it runs (a key, a click on the footer, the palette's
    entries, ``in_replay``), so this one place covers them all, and an action added to the sets is covered
    too."""

    def refuse(action: str) -> None:
        app.notify(READ_ONLY_NOTICE, title=action.replace("_", " "), severity="warning", timeout=6)

    for action in HOST_ACTIONS:
        setattr(app, f"action_{action}", partial(refuse, action))


BINDINGS: list[BindingType] = [
        # before any other x binding: on the Benchmarks tab x cancels the sweep, elsewhere it is skipped
        Binding("M", "macro_sweep", "Sweep", key_display="M"),
        Binding("x", "cancel_macro_key", "Cancel", key_display="x"),
        Binding("x", "cancel_micro_key", "Cancel", key_display="x"),
        # The footer shows a pair of keys as one entry (+/- speed, n/p phase, d/b/c/u/a views) and leaves out
        # the one-event steps (. ,), the jump (g), loop (l) and the arrows: it fits 80 columns; the help lists
        # every key.
        Binding("space", "toggle_pause", "Pause"),
        Binding("plus,equals_sign", "faster", "Speed", key_display="+/-"),
        Binding("minus", "slower", "Slower", key_display="-", show=False),
        Binding("n", "next_phase", "Phase", key_display="n/p"),
        Binding("p", "prev_phase", "Prev", show=False),
        Binding("full_stop", "step", "Step", key_display=".", show=False),
        Binding("comma", "step_back", "Back", key_display=",", show=False),
        Binding("left", "seek_by(-10)", "-10s", show=False, priority=True),  # over the tabs' arrows, in replay
        Binding("right", "seek_by(10)", "+10s", show=False, priority=True),
        Binding("g", "jump", "Jump", key_display="g", show=False),
        Binding("l", "toggle_loop", "Loop", key_display="l", show=False),
        Binding("e,end", "to_end", "End", key_display="e"),
        Binding("d", "show_view('dashboard')", "Views", key_display="d/b/c/u/a"),
        Binding("b", "show_view('bench')", "Bench", show=False),
        Binding("c", "show_view('cleanup')", "Cleanup", show=False),
        Binding("u", "show_view('micro')", "Micro", show=False),
        Binding("a", "show_view('analysis')", "Analysis", show=False),
        Binding("P", "campaign_pause", "Pause campaign", key_display="P/S/A"),
        Binding("S", "campaign_skip", "Skip next phase", show=False),
        Binding("A", "campaign_abort", "Abort campaign", show=False),
        Binding("K", "micro_run", "Micro", key_display="K"),
        Binding("F", "free_gpus", "Free GPUs", key_display="F"),
        Binding("R", "restart_service", "Restart", key_display="R"),
        Binding("x", "cancel_cleanup", "Cancel", key_display="x"),
        Binding("x", "cancel_cleanup_idle", show=False),  # nothing to cancel: it says so
        # The tab bar has focus after a view key: these keys scroll the view shown (a focused table or log
        # takes them first)
        Binding("pageup", "scroll_view('page_up')", show=False),
        Binding("pagedown", "scroll_view('page_down')", show=False),
        Binding("up", "scroll_view('scroll_up')", show=False),
        Binding("down", "scroll_view('scroll_down')", show=False),
        Binding("f1,question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
        # A replay hides the live keys above (check_action); pressed, the key falls through to these
        # hidden ones, which run the same action: it says why not.
        Binding("M", "in_replay('macro_sweep')", show=False),
        Binding("F", "in_replay('free_gpus')", show=False),
        Binding("R", "in_replay('restart_service')", show=False),
        Binding("K", "in_replay('micro_run')", show=False),
    ]
