"""The help screen puts what a session can use first; the palette's Screenshot saves where it can and says where
in plain words (issue 33 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.core.session import Session
from kimitui.tui.screens.help_screen import KEYS, help_content
from tests.app_probe import ProbedApp
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
