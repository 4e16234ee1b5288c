"""``kimitui campaign FILE`` in the dashboard: the strip follows the phases, a consent left at "ask" comes up
in the F action's modal, A aborts, and F / M / K / R refuse while the campaign runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from kimitui.campaign import machine as machine_module
from kimitui.core.events import CampaignControl, Consent, PhaseStart
from kimitui.live.context import LiveContext
from kimitui.tui.controllers.campaign import RUNNING
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.views.campaign_view import SHORT, CampaignStrip, strip_content
from tests.app_probe import ProbedApp
from tests.campaign_rig import Rig, campaign_rig, small_config
from tests.support import BIG
from tests.waiting import pilot_until


def app_for(rig: Rig) -> ProbedApp:
    live = LiveContext(rig.host, "demo", default_service="sim:vllm", api_url=rig.host.api_url, simulated=True)
    app = ProbedApp(rig.session, host_label="demo", live=live, sources=[rig.source])
    app.campaign.load(rig.machine)
    return app


async def test_the_dashboard_runs_the_campaign_and_asks_in_the_modal(tmp_path: Path) -> None:
    cfg = small_config(["cleanup", "micro", "analysis"], consent={"graceful": "ask"})
    async with campaign_rig(cfg, tmp_path, app_pumps=True) as rig:
        app = app_for(rig)
        async with app.run_test(size=BIG) as pilot:
            await pilot_until(pilot, lambda: isinstance(app.screen, ConsentScreen), "the graceful consent modal")
            assert isinstance(app.screen, ConsentScreen) and app.screen.preview.step == "graceful"
            strip = str(app.query_one(CampaignStrip).render())
            assert "▶ transition" in strip and "next: Phase 2 micro" in strip and "P pause" in strip
            await pilot.press("enter")
            await pilot_until(pilot, lambda: rig.machine.finished, "the campaign's end")
            strip = str(strip_content(app.session.state, live=False))
            # no Phase 1 in this campaign: no TPOT to divide, so the analysis ends without a verdict
            assert "✓ transition  ✓ micro  ✗ analysis  done" in strip
            await pilot.press("a")
            await pilot_until(pilot, lambda: app._views["analysis"] is not None, "the Analysis tab")
    graceful = next(c for c in rig.of(Consent) if c.step == "graceful")
    assert graceful.accepted and graceful.note == "confirmed in the dashboard"
    process = next(c for c in rig.of(Consent) if c.step == "process")
    assert process.note == "campaign policy: process = yes"


async def test_a_aborts_the_campaign_from_the_dashboard(tmp_path: Path) -> None:
    cfg = small_config(["macro", "cleanup", "micro"], macro={"concurrency": [1, 2, 4], "max_tokens": 60})
    async with campaign_rig(cfg, tmp_path, app_pumps=True) as rig:
        app = app_for(rig)
        async with app.run_test(size=BIG) as pilot:
            await pilot_until(pilot, lambda: any(isinstance(e, PhaseStart) for e in rig.events), "Phase 1")
            for key in "MF":
                await pilot.press(key)
            assert sum(RUNNING in n for n in app.notices) == 2, "refused while the campaign runs"
            await pilot.press("A")
            await pilot_until(pilot, lambda: rig.machine.finished, "the abort")
    (ctl,) = rig.of(CampaignControl)
    assert ctl.action == "abort" and ctl.phase == "macro"
    c = rig.session.state.campaign
    assert c is not None and c.end is not None and c.end.status == "aborted"
    assert c.phases["cleanup"].status == "pending", "nothing after the abort ran; no restart was due"



async def test_a_aborts_the_campaign_from_its_consent_modal(tmp_path: Path) -> None:
    """Issue 33 item 10: the modal's keys name A, and A there aborts (a modal screen stops the app's keys):
    the step in hand is declined as aborted and nothing after it runs."""
    cfg = small_config(["cleanup", "micro", "analysis"], consent={"graceful": "ask"})
    async with campaign_rig(cfg, tmp_path, app_pumps=True) as rig:
        app = app_for(rig)
        async with app.run_test(size=BIG) as pilot:
            await pilot_until(pilot, lambda: isinstance(app.screen, ConsentScreen), "the graceful consent modal")
            keys = str(app.screen.query_one("#consent-keys", Static).render())
            assert "A abort the campaign" in keys and "x cancel" not in keys, keys
            await pilot.press("A")
            await pilot_until(pilot, lambda: rig.machine.finished, "the abort")
            assert not isinstance(app.screen, ConsentScreen)
    (ctl,) = rig.of(CampaignControl)
    assert ctl.action == "abort" and ctl.phase == "cleanup"
    graceful = next(c for c in rig.of(Consent) if c.step == "graceful")
    assert not graceful.accepted and graceful.note == "campaign aborted"
    c = rig.session.state.campaign
    assert c is not None and c.end is not None and c.end.status == "aborted"
    assert c.phases["micro"].status == "pending"


async def test_a_campaign_without_telemetry_ends_before_it_began(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No sample from the host: the machine ends itself (nothing published), the dashboard says why."""
    monkeypatch.setattr(machine_module, "FIRST_SAMPLE_S", 0.3)
    async with campaign_rig(small_config(["micro"]), tmp_path, app_pumps=True) as rig:
        live = LiveContext(rig.host, "demo", default_service="sim:vllm", api_url=rig.host.api_url, simulated=True)
        app = ProbedApp(rig.session, host_label="demo", live=live)  # no source: nothing pumps the telemetry
        app.campaign.load(rig.machine)
        async with app.run_test(size=BIG) as pilot:
            await pilot_until(pilot, lambda: any("no telemetry" in n for n in app.notices), "the notice")
            assert rig.machine.finished and not app.campaign.running and app.busy() is None
    assert rig.session.state.campaign is None, "no plan was published"

def test_the_strip_fits_its_width_and_keeps_the_keys_where_they_fit() -> None:
    """Mid-campaign on a live host the strip ends with the keys; at a width where the whole hint would be
    cut at the screen's edge, the short one is shown; at 80 columns the phases go by their letters and
    what comes next stays."""
    from kimitui.core.replay import state_at
    from kimitui.core.runfile import RunReader
    from kimitui.resources import bundled_sample_run

    reader = RunReader(bundled_sample_run())
    first_micro = next(i for i in range(len(reader)) if isinstance(ev := reader.decoded(i), PhaseStart)
                       and ev.phase == "micro")
    state = state_at(reader, first_micro + 1)
    assert state.campaign is not None and state.campaign.end is None
    widths = {w: strip_content(state, live=True, width=w) for w in (200, 120, 80)}
    for w, content in widths.items():  # a hint is shown only whole, within the width
        if "P/S/A" in content.plain or "pause/go on" in content.plain:
            assert content.cell_length <= w, w
    assert widths[200].plain.endswith("P pause/go on · S skip next · A abort")
    assert widths[120].plain.endswith("P/S/A") and widths[120].cell_length <= 120
    assert "pause" not in widths[80].plain  # the long hint does not fit
    assert "next: Phase 3 analysis" in widths[80].plain and widths[80].cell_length <= 80
    assert "pause" not in strip_content(state, live=False, width=200).plain  # a replay has no keys to give


def test_the_strip_keeps_what_comes_next_at_80_columns() -> None:
    """At 80 columns every phase's state and what comes next are on the strip, within the width: the phases
    done or to come by their letter, the running one by its name."""
    from kimitui.core.replay import state_at
    from kimitui.core.runfile import RunReader
    from kimitui.resources import bundled_sample_run

    reader = RunReader(bundled_sample_run())
    starts = [i for i in range(len(reader)) if isinstance(reader.decoded(i), PhaseStart)]
    assert len(starts) >= 5
    for i in starts:
        state = state_at(reader, i + 1)
        assert state.campaign is not None
        nxt = state.campaign.next_phase
        for live in (True, False):
            content = strip_content(state, live=live, width=80)
            assert content.cell_length <= 80, content.plain
            if nxt is not None:
                assert "next: " in content.plain, content.plain
            running = [n for n in state.campaign.phases if state.campaign.shown_status(n) == "running"]
            assert running and all(SHORT[n] in content.plain for n in running), content.plain


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_paused_campaign_says_paused_whole_at_any_width(width: int) -> None:
    """Issue 33: at 60 columns the strip cut its own state ('PAU…'): the pause's note goes first, then what
    the pause is before; PAUSED itself stays, within the width."""
    from kimitui.core.replay import state_at
    from kimitui.core.runfile import RunReader
    from kimitui.core.state import fold
    from kimitui.resources import bundled_sample_run

    reader = RunReader(bundled_sample_run())
    first_micro = next(i for i in range(len(reader)) if isinstance(ev := reader.decoded(i), PhaseStart)
                       and ev.phase == "micro")
    state = state_at(reader, first_micro + 1)
    note = "the GPUs are warm: cool down before Phase 2"
    state = fold(state, CampaignControl(t=state.clock, action="pause", phase="analysis", operator="op", note=note))
    assert state.campaign is not None and state.campaign.paused
    for live in (True, False):
        content = strip_content(state, live=live, width=width).plain
        assert "PAUSED" in content and len(content) <= width, content
        assert (note in content) == (width >= 120), content
