"""The help screen puts what a session can use first; the palette's Screenshot saves where it can and says where
in plain words (issue 33 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.core.session import Session
from kimitui.tui.screens.help_screen import KEYS, help_content
from tests.app_probe import ProbedApp
from tests.support import open_dialog, sweep_app
from tests.waiting import pilot_until


def key_order(replay: bool) -> list[str]:
    text = help_content(replay).plain
    return [line.split()[0] for line in text.splitlines() if line.startswith("  ")]


def test_a_live_session_lists_its_actions_first_and_the_replay_keys_last_said_so() -> None:
    live, replay = key_order(False), key_order(True)
    assert live[0] == "M" and live.index("M") < live.index("space"), live
    assert replay[0] == "space" and replay.index("space") < replay.index("M"), replay
    assert "replay only: these do nothing in a live session" in help_content(False).plain
    assert "live only: these need a live host" in help_content(True).plain
    assert sorted(live) == sorted(replay) == sorted(k.split()[0] for k, _ in KEYS)  # every key, once each


async def test_the_screenshot_goes_to_kimituis_folder_where_there_is_no_downloads_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an account without ~/Downloads (a fresh server's), Textual's screenshot failed ("Failed to save
    screenshot"); it is saved under $XDG_DATA_HOME/kimitui/screenshots and the notice names the file in plain
    words (it showed Textual's markup, '[$text-success]', as text)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "home").mkdir()
    app = ProbedApp(Session())
    async with app.run_test(size=(100, 30)) as pilot:
        app.deliver_screenshot()
        await pilot_until(pilot, lambda: any("screenshot" in n.lower() for n in app.notices), "the notice")
    folder = tmp_path / "data" / "kimitui" / "screenshots"
    saved = list(folder.glob("*.svg"))
    assert len(saved) == 1 and saved[0].read_text().lstrip().startswith("<svg"), app.notices
    (notice,) = [n for n in app.notices if "screenshot" in n.lower()]
    assert notice == f"Saved screenshot to {str(saved[0])!r}" and "[$" not in notice


def test_the_sweep_dialog_says_how_big_the_sweep_is_and_how_long_at_the_pace_measured() -> None:
    """The default sweep took about 3 minutes on the demo with nothing said: the dialog says its levels, requests
    and output tokens, and the time it takes at the output tok/s last measured in the session (the nearest level
    standing for one not measured)."""
    from kimitui.tui.screens.macro_dialog import form_defaults, parse_form, sweep_scale

    config = parse_form(form_defaults("http://127.0.0.1:8000"))
    levels = config.concurrency
    requests = sum(config.level_requests(c) for c in levels)
    bare = sweep_scale(config)
    assert bare.startswith(f"{len(levels)} levels, {requests:,} requests, {requests * 128:,} output tokens")
    assert "no sweep measured here yet" in bare
    pace = {1: 50.0, 128: 1391.0}  # the demo's c=1 and c=128 (its other levels take the nearest)
    seconds = sum(config.level_requests(c) * 128 / (50.0 if abs(c - 1) <= abs(c - 128) else 1391.0)
                  for c in levels)
    assert sweep_scale(config, pace).endswith(f"; about {seconds / 60:.0f} min at the pace last measured here")


async def test_the_dialog_shows_the_sweeps_size_as_the_levels_are_typed() -> None:
    from textual.widgets import Input, Static

    app = sweep_app("http://127.0.0.1:9")
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(app, pilot)
        scale = dialog.query_one("#dialog-scale", Static)
        await pilot_until(pilot, lambda: "levels" in str(scale.render()), "the sweep's size")
        assert "no sweep measured here yet" in str(scale.render())
        dialog.query_one("#concurrency", Input).value = "1"
        await pilot_until(pilot, lambda: str(scale.render()).startswith("1 level, 4 requests, 512 output tokens"),
                          "the size of one level")
