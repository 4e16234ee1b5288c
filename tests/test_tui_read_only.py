"""The read-only dashboard (``kimitui serve``'s visitors, ``KIMITUI_READ_ONLY=1``): every key, footer entry and
palette entry that would act on the host refuses with one notice and starts nothing, on a real simulated
host whose workers are still there afterwards. The bindings are enumerated: an action added to the app must
be either one of ``keys.HOST_ACTIONS`` (refused) or named harmless here, so none slips past."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.actions import parse as parse_action
from textual.binding import Binding
from textual.screen import Screen

from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.commands import palette_commands
from kimitui.tui.keys import HOST_ACTIONS, LIVE_ACTIONS, READ_ONLY_ENV, READ_ONLY_NOTICE, REPLAY_ACTIONS
from kimitui.tui.screens.cleanup_dialog import CleanupSetupScreen
from kimitui.tui.widgets.status_bar import StatusBar
from tests.sshd import alive
from tests.support import cleanup_app, replay_app
from tests.waiting import pilot_until

HARMLESS = REPLAY_ACTIONS | {
    "show_view", "scroll_view", "help", "quit", "interrupt", "help_quit", "focus_next", "focus_previous",
    "copy_text",
    # what a cancel key stops can only have been started here, and nothing can start in a read-only app
    "cancel_macro_key", "cancel_micro_key", "cancel_cleanup", "cancel_cleanup_idle",
}
"""Actions that change only what this dashboard shows (views, scrolling, the replay's position, help)."""


def bindings() -> list[Binding]:
    """Every binding of the app and of its base screen, as declared (hidden ones and those that do not apply
    now included)."""
    out: list[Binding] = []
    for owner in (KimituiApp, Screen):
        for cls in owner.__mro__:
            out += Binding.make_bindings(cls.__dict__.get("BINDINGS", []))
    return out


def acted(binding: Binding) -> str:
    """The action a binding runs in the end (in_replay('free_gpus') runs free_gpus)."""
    _, name, params = parse_action(binding.action)
    return str(params[0]) if name == "in_replay" else name


def refusals(app: KimituiApp) -> int:
    return sum(n == READ_ONLY_NOTICE for n in app.notices)


def test_every_binding_is_a_host_action_or_named_harmless() -> None:
    found = {acted(b) for b in bindings()}
    assert {"free_gpus", "restart_service", "macro_sweep", "micro_run", "campaign_abort", "show_view"} <= found
    unknown = found - HOST_ACTIONS - HARMLESS
    assert unknown == set(), f"classify these actions: add them to keys.HOST_ACTIONS or to HARMLESS: {unknown}"


async def test_read_only_refuses_every_host_action_and_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(READ_ONLY_ENV, "1")
    async with cleanup_app(tmp_path, monkeypatch) as lv:
        app, pilot = lv.app, lv.pilot
        assert app.read_only
        workers = {p.pid for p in lv.host.worker_holders().values()}
        base = app.screen_stack[0]
        host_bindings = [b for b in bindings() if acted(b) in HOST_ACTIONS]
        assert {acted(b) for b in host_bindings} == HOST_ACTIONS
        for action in sorted(HOST_ACTIONS):  # as every way in runs it, looked up by name, applying now or not
            before = refusals(app)
            getattr(app, f"action_{action}")()
            await pilot_until(pilot, lambda b=before: refusals(app) == b + 1, f"the refusal of {action}")
        pressed = 0
        for binding in host_bindings:  # the keys that apply on a live host (P, S, A need a campaign), pressed
            if app.check_action(parse_action(binding.action)[1], ()):
                before = refusals(app)
                await pilot.press(binding.key.split(",")[0])
                await pilot_until(pilot, lambda b=before: refusals(app) == b + 1, f"the refusal of {binding.key}")
                pressed += 1
        assert pressed == len(LIVE_ACTIONS)
        gated = {id(getattr(app, f"action_{a}")) for a in HOST_ACTIONS}
        entries = [(title, cb) for title, _, cb in palette_commands(app) if id(cb) in gated]
        assert len(entries) == 4, [t for t, _ in entries]  # sweep, free the GPUs, restart, micro
        for title, callback in entries:
            before = refusals(app)
            callback()
            await pilot_until(pilot, lambda b=before: refusals(app) == b + 1, f"the refusal of {title!r}")
        await pilot.pause()
        assert app.screen is base, "a dialog opened"
        assert app.busy() is None and not app.macro.running and not app.micro.running
        assert all(alive(pid) for pid in workers)
        assert "read-only: start with `--allow-actions`" in "\n".join(app.notices)


async def test_without_read_only_the_same_key_opens_the_cleanup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(READ_ONLY_ENV, raising=False)
    async with cleanup_app(tmp_path, monkeypatch) as lv:
        assert not lv.app.read_only
        await lv.pilot.press("F")
        await pilot_until(lv.pilot, lambda: isinstance(lv.app.screen, CleanupSetupScreen), "the setup dialog")
        assert refusals(lv.app) == 0


async def test_a_read_only_replay_says_read_only() -> None:
    app = replay_app(bundled_sample_run(), read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("F")  # hidden in a replay: the key falls through to in_replay
        await pilot_until(pilot, lambda: refusals(app) == 1, "the refusal")
        assert app.screen is app.screen_stack[0]
        header = str(app.query_one(StatusBar).render())
        assert "REPLAY" in header and "READ-ONLY" in header
