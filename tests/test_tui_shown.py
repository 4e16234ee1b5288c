"""What the screen shows is current and whole (issue 20, items 1 and 5): a table updated while its tab was
hidden shows the new values when the tab comes back; numbers are not cut, safety columns are kept, and every
scrollable tab scrolls from the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.screen_text import screen_text
from tests.test_tui import BIG, FakeClock, replay_app, wait_for
from tests.tui_runs import write_test_run


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_run(tmp_path_factory.mktemp("shown") / "campaign.jsonl")


def gpu_line(app: object, index: int) -> str:
    """GPU ``index``'s line of the GPU table as the terminal shows it."""
    lines = [ln for ln in screen_text(app).splitlines() if "RTX PRO 6000" in ln]  # type: ignore[arg-type]
    return next((ln for ln in lines if ln.lstrip("│ ").startswith(f"{index} ")), "")


async def test_the_gpu_table_shows_what_changed_while_another_tab_was_shown(run_path: Path) -> None:
    """The samples change (the cleanup frees every GPU) while the Cleanup tab is shown: back on the
    Dashboard, the GPU table's lines on screen are the latest sample's, not the ones drawn before."""
    clock = FakeClock()
    app = replay_app(run_path, clock)
    async with app.run_test(size=BIG) as pilot:
        clock.now += 3.0
        await wait_for(pilot, lambda: "90.2/95.6 GiB" in gpu_line(app, 0), "GPU 0 held on screen")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.active_view == "cleanup", "the Cleanup tab")
        await pilot.press("e")  # to the end: the last sample has every GPU back at idle
        await wait_for(pilot, lambda: app.session.state.gpus[0].mem_used_mib < 1024, "the last sample folded")
        await pilot.press("d")
        await wait_for(pilot, lambda: app.active_view == "dashboard", "the Dashboard")
        await wait_for(pilot, lambda: "0.6/95.6 GiB" in gpu_line(app, 0), "GPU 0 idle on screen", timeout=3.0)
        for i in range(8):
            assert "90.2/95.6" not in gpu_line(app, i), gpu_line(app, i)
