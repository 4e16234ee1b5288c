"""The fleet view (issue 39, ``kimitui fleet``): what the table shows of the fold (``session.state.fleet``), in
attention order, a host expanded to its GPUs and collapsed again, a later round redrawing only the row it changed,
a host's dashboard opened in the terminal while the app is suspended, 256 hosts scrolled and sorted; and Escape
quitting the dashboard that ``KIMITUI_ESCAPE_QUITS=1`` names as opened from the fleet."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from textual.drivers.headless_driver import HeadlessDriver
from textual.message import Message
from textual.notifications import Notify

from kimitui.core.events.fleet import FleetGpu, FleetHost, FleetSample
from kimitui.core.fleet_state import attention
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui import fleet_app as fleet_app_module
from kimitui.tui.fleet_app import FleetApp
from kimitui.tui.keys import ESCAPE_QUITS_ENV
from kimitui.tui.screens.help_screen import HelpScreen
from kimitui.tui.views.fleet_view import FleetTable, gpu_key
from tests.screen_text import screen_text
from tests.support import replay_app
from tests.waiting import pilot_until

DOWN, HELD, CAPPED = "gpu-03", "gpu-05", "gpu-06"
ORDER = [DOWN, HELD, CAPPED, "gpu-00", "gpu-01", "gpu-02", "gpu-04", "gpu-07"]
"""The attention order of ``hosts()``: the host down, memory held with no service, a clock cap, the rest by name."""


class Fleet(FleetApp):
    """The fleet app, keeping every notice's message (a toast expires; this list does not)."""

    CSS_PATH = str(Path(fleet_app_module.__file__).with_name("fleet.tcss"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notices: list[str] = []

    def post_message(self, message: Message) -> bool:
        if isinstance(message, Notify):
            self.notices.append(message.notification.message)
        return super().post_message(message)


def gpu(index: int, **changes: Any) -> FleetGpu:
    figures: dict[str, Any] = dict(name="NVIDIA H100 80GB HBM3", mem_used_mib=70000.0, mem_total_mib=81559.0,
                                   util_pct=90.0, temp_c=60.0, power_w=500.0, sm_clock_mhz=1980.0, holders=1,
                                   service_holders=1)
    return FleetGpu(index, **{**figures, **changes})


def host(name: str, **changes: Any) -> FleetHost:
    fields: dict[str, Any] = dict(gpus=[gpu(i) for i in range(8)], service="vllm", requests_running=4.0,
                                  requests_waiting=0.0)
    return FleetHost(name, **{**fields, **changes})


def hosts(**replaced: FleetHost) -> list[FleetHost]:
    """8 hosts of 8 GPUs: gpu-03 down, gpu-05's GPU 2 holding 40 GB with no service process, gpu-06's GPU 4
    under a power cap; REPLACED by name."""
    out = []
    for n in range(8):
        name = f"gpu-{n:02d}"
        if name == DOWN:
            h = FleetHost(name, state="down", detail="connection refused")
        elif name == HELD:
            h = host(name, gpus=[*(gpu(i) for i in range(2)), gpu(2, mem_used_mib=40000.0, service_holders=0),
                                 *(gpu(i) for i in range(3, 8))])
        elif name == CAPPED:
            h = host(name, gpus=[gpu(i, throttle=["power cap"]) if i == 4 else gpu(i) for i in range(8)])
        else:
            h = host(name)
        out.append(replaced.get(name, h))
    return out


def round_of(seq: int, hs: list[FleetHost], error: str = "") -> FleetSample:
    return FleetSample(1000.0 + seq, source="demo", where="8 simulated hosts", seq=seq, hosts=hs, round_ms=12.0,
                       error=error)


class Rounds:
    """A source: these rounds, then nothing more (the app pumps it in a worker)."""

    def __init__(self, *rounds: FleetSample) -> None:
        self.rounds = rounds

    async def events(self) -> AsyncIterator[FleetSample]:
        for r in self.rounds:
            yield r


def table(app: FleetApp) -> FleetTable:
    return app.query_one(FleetTable)


def shown_hosts(app: FleetApp) -> list[str]:
    return [k for k in table(app).row_keys if "\t" not in k]


async def test_the_rows_come_in_attention_order_with_their_reasons_and_a_host_expands_to_its_gpus() -> None:
    session = Session()
    app = Fleet(session, sources=[Rounds(round_of(0, hosts()))], title="test fleet")
    async with app.run_test(size=(160, 40)) as pilot:
        t = await pilot_until(pilot, lambda: table(app).row_count == 8 and table(app), "the first round's rows")
        fleet = session.state.fleet
        assert fleet is not None
        assert t.row_keys == ORDER == [h.name for h in fleet.ordered()]
        for name in ORDER:  # the fold's words, whole (the screen cuts them to the column)
            assert t.cell_text(name, "attention") == "; ".join(attention(fleet.hosts[name])[1])
        assert t.cell_text(DOWN, "state") == "down"
        assert t.cell_text(DOWN, "attention") == "down: connection refused"
        assert t.cell_text(HELD, "attention") == "GPU 2: 40,000 MiB held with no service"
        assert t.cell_text(CAPPED, "attention") == "GPU 4: power cap"
        assert t.cell_text("gpu-00", "attention") == ""
        assert t.cell_text(HELD, "procs").strip() == "7/8" and t.cell_text(HELD, "service") == "vllm"
        assert t.cell_text("gpu-00", "memory").strip() == "547/637"  # GiB, the host's GPUs summed
        assert t.cell_text("gpu-00", "power").strip() == "4000W"
        text = screen_text(app)
        assert "round 1 in 12 ms" in text and "hosts 8: 7 up, 1 down" in text and "GPUs 56" in text, text
        assert "3 need you" in text and "test fleet" in text, text
        assert "down: connection refused" in text and "power cap" in text, text
        footer = await pilot_until(pilot, lambda: "q Quit" in (last := screen_text(app).splitlines()[-1]) and last,
                                   "the footer's keys")
        assert "Enter Dashboard" in footer and "Space/→/← GPUs" in footer and "s Sort" in footer, footer

        await pilot.press("down")  # the host holding memory
        await pilot.press("space")
        gpu_rows = [gpu_key(HELD, i) for i in range(8)]
        await pilot_until(pilot, lambda: gpu_key(HELD, 0) in t.row_keys, "the host's GPUs under it")
        assert t.row_keys == [DOWN, HELD, *gpu_rows, *ORDER[2:]]
        assert t.cell_text(gpu_key(HELD, 2), "attention") == "40,000 MiB held with no service"
        assert t.cell_text(gpu_key(HELD, 2), "procs").strip() == "0/1"
        assert t.cell_text(gpu_key(HELD, 2), "memory").strip() == "39.1/79.6"
        assert t.cell_text(gpu_key(HELD, 0), "clock").strip() == "1980"
        assert t.cell_text(gpu_key(HELD, 0), "host").strip() == "0 H100 80GB HBM3"
        assert t.cell_text(HELD, "host").startswith("▾")
        await pilot.press("down", "down", "down")  # onto GPU 2: the detail line says it whole
        assert t.cursor_key == gpu_key(HELD, 2)
        await pilot_until(pilot, lambda: "gpu-05 GPU 2 · H100" in screen_text(app), "the GPU's detail line")
        await pilot.press("left")  # from a GPU row: its host folds back, the cursor on it
        await pilot_until(pilot, lambda: t.row_count == 8, "the GPUs folded back")
        assert t.row_keys == ORDER and t.cursor_key == HELD
        await pilot.press("right")
        await pilot_until(pilot, lambda: t.row_count == 16, "expanded with the arrow")
        await pilot.press("space")
        await pilot_until(pilot, lambda: t.row_count == 8, "collapsed with Space")
        await pilot.press("up", "right")  # the host down has no GPUs: nothing to expand
        await pilot.pause()
        assert t.row_count == 8 and t.cursor_key == DOWN
        await pilot.press("q")
        await pilot_until(pilot, lambda: not app.is_running, "q quits")


async def test_a_later_round_redraws_the_row_it_changed_and_the_order_follows_the_fold() -> None:
    session = Session()
    session.publish(round_of(0, hosts()))
    app = Fleet(session)
    async with app.run_test(size=(160, 40)) as pilot:
        t = await pilot_until(pilot, lambda: table(app).row_count == 8 and table(app), "the first round's rows")
        assert t.made_total == 8
        cells = {k: t._lines[k].cells for k in t.row_keys}
        repainted: list[list[int]] = []
        refresh_rows = t._refresh_rows

        def counting(indices: list[int]) -> None:
            repainted.append(list(indices))
            refresh_rows(indices)

        t._refresh_rows = counting  # type: ignore[method-assign]
        # round 2: gpu-07's GPU 0 busier; every other host reads as before (equal, not the same objects)
        busier = host("gpu-07", gpus=[gpu(0, util_pct=40.0), *(gpu(i) for i in range(1, 8))])
        session.publish(round_of(1, hosts(**{"gpu-07": busier})))
        await pilot_until(pilot, lambda: t.made_total > 8, "the second round drawn")
        await pilot.pause()
        assert session.state.fleet is not None and session.state.fleet.revisions["gpu-07"] == 2
        assert t.made_total == 9 and t.made_last == ["gpu-07"]  # one host row made again, of 8
        assert [k for k in t.row_keys if t._lines[k].cells is not cells[k]] == ["gpu-07"]
        assert repainted == [[ORDER.index("gpu-07")]]  # and only its line repainted
        assert t.cell_text("gpu-07", "util").strip() == "84%"  # the mean of 40 and seven 90s
        assert t.row_keys == ORDER

        # round 3: gpu-07 goes down: it moves up to the top, after gpu-03 (same rank, by name); the source errs
        session.publish(round_of(2, hosts(**{"gpu-07": FleetHost("gpu-07", state="down", detail="timeout")}),
                                 error="prometheus: connection refused"))
        await pilot_until(pilot, lambda: t.row_keys[1] == "gpu-07", "the host down moved up")
        assert t.row_keys == [DOWN, "gpu-07", *ORDER[1:-1]]
        assert session.state.fleet is not None
        assert t.row_keys == [h.name for h in session.state.fleet.ordered()]
        text = screen_text(app)
        assert "6 up, 2 down" in text and "source: prometheus: connection refused" in text, text

        # s: the next order (by name), the cursor staying on its row
        await pilot.press("down")
        assert t.cursor_key == "gpu-07"
        await pilot.press("s")
        await pilot_until(pilot, lambda: t.row_keys[0] == "gpu-00", "sorted by name")
        assert t.row_keys == sorted(ORDER) and t.cursor_key == "gpu-07"
        assert "sorted by name" in screen_text(app)


async def test_the_open_key_runs_the_highest_rows_dashboard_in_the_suspended_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """o on the top row: ``open_host`` is asked for that host's argv, the app is suspended (its driver hands the
    terminal over and takes it back: Textual's headless driver cannot, so it is told it can and its two calls are
    recorded), the argv runs with ``KIMITUI_ESCAPE_QUITS=1``, and the fleet is back and running afterwards."""
    calls: list[str] = []
    monkeypatch.setattr(HeadlessDriver, "can_suspend", property(lambda self: True), raising=False)
    monkeypatch.setattr(HeadlessDriver, "suspend_application_mode", lambda self: calls.append("suspend"),
                        raising=False)
    monkeypatch.setattr(HeadlessDriver, "resume_application_mode", lambda self: calls.append("resume"),
                        raising=False)
    seen = tmp_path / "child-env"
    asked: list[str] = []

    def open_host(name: str) -> list[str] | None:
        asked.append(name)
        calls.append("open")
        if name != DOWN:
            return None
        return [sys.executable, "-c",
                f"import os, pathlib; pathlib.Path({str(seen)!r}).write_text(os.environ.get({ESCAPE_QUITS_ENV!r}, ''))"]

    session = Session()
    session.publish(round_of(0, hosts()))
    app = Fleet(session, open_host=open_host)
    async with app.run_test(size=(160, 40)) as pilot:
        t = await pilot_until(pilot, lambda: table(app).row_count == 8 and table(app), "the first round's rows")
        assert t.cursor_key == DOWN
        await pilot.press("enter")
        await pilot_until(pilot, lambda: seen.exists(), "the dashboard's argv run")
        assert asked == [DOWN] and seen.read_text() == "1"
        assert calls == ["open", "suspend", "resume"]
        assert app.is_running and not app.notices
        # a host whose dashboard cannot be opened: said in a notice, nothing run
        await pilot.press("down", "enter")
        await pilot_until(pilot, lambda: app.notices, "the notice")
        assert asked == [DOWN, HELD] and calls == ["open", "suspend", "resume", "open"]
        assert app.notices == [f"{HELD}: its dashboard cannot be opened from here"]


async def test_a_dashboard_that_cannot_start_is_said_and_the_fleet_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HeadlessDriver, "can_suspend", property(lambda self: True), raising=False)
    monkeypatch.setattr(HeadlessDriver, "suspend_application_mode", lambda self: None, raising=False)
    monkeypatch.setattr(HeadlessDriver, "resume_application_mode", lambda self: None, raising=False)
    session = Session()
    session.publish(round_of(0, hosts()))
    app = Fleet(session, open_host=lambda name: ["/nonexistent/kimitui-dashboard"])
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot_until(pilot, lambda: table(app).row_count == 8, "the first round's rows")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: app.notices, "the notice")
        assert app.notices[0].startswith(f"{DOWN}: its dashboard did not start:"), app.notices
        assert app.is_running


async def test_256_hosts_render_scroll_and_sort() -> None:
    names = [f"node-{n:03d}" for n in range(256)]
    many = [host(name, gpus=[gpu(i, util_pct=float((n * 7 + i) % 100)) for i in range(8)])
            for n, name in enumerate(names)]
    many[200] = FleetHost("node-200", state="down", detail="no route to host")
    session = Session()
    session.publish(round_of(0, many))
    app = Fleet(session)
    async with app.run_test(size=(120, 40)) as pilot:
        t = await pilot_until(pilot, lambda: table(app).row_count == 256 and table(app), "256 rows")
        assert t.row_keys[0] == "node-200" and t.row_keys[1:] == [n for n in names if n != "node-200"]
        text = screen_text(app)
        assert "hosts 256: 255 up, 1 down" in text and "GPUs 2040" in text and "node-200" in text, text
        assert "node-255" not in text
        await pilot.press("down", "down")
        assert t.cursor_row == 2
        await pilot.press("end")
        await pilot_until(pilot, lambda: "node-255" in screen_text(app), "the last host in view")
        assert t.cursor_key == "node-255" and t.scroll_y > 200
        await pilot.press("pageup")
        assert t.cursor_row < 255
        await pilot.press("home")
        await pilot_until(pilot, lambda: t.scroll_y == 0 and "node-200" in screen_text(app), "back at the top")
        await pilot.press("space")  # node-200 is down, no GPUs; the next one expands
        await pilot.press("down", "space")
        await pilot_until(pilot, lambda: t.row_count == 264, "a host of 256 expanded")
        await pilot.press("s", "s", "s")  # attention, name, memory, util: the busiest first
        await pilot_until(pilot, lambda: app.sort == "util" and "sorted by util" in screen_text(app), "by util")
        fleet = session.state.fleet
        assert fleet is not None
        means = [sum(g.util_pct or 0 for g in fleet.hosts[k].gpus) / 8 for k in t.row_keys if "\t" not in k
                 and fleet.hosts[k].gpus]
        assert means == sorted(means, reverse=True)
        assert t.row_keys[-1] == "node-200"  # no figure: last
        assert t.cursor_key == "node-000"  # the cursor stayed on its host


async def test_escape_quits_the_dashboard_only_when_the_fleet_opened_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ESCAPE_QUITS_ENV, raising=False)
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("escape")
        await pilot.pause()
        assert app.is_running

    monkeypatch.setenv(ESCAPE_QUITS_ENV, "1")
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        await pilot.press("escape")  # a dialog's own Escape first: the help closes, the dashboard stays
        await pilot_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help closed")
        assert app.is_running
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not app.is_running, "the dashboard gone")
    assert app.return_code == 0
