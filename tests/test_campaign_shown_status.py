"""A phase's status as the strip and the report show it is derived once, in the campaign fold
(``CampaignState.shown_status``): a phase the operator skipped that a resume put back to pending reads
skipped everywhere."""

from __future__ import annotations

from kimitui.core.events import CampaignControl, CampaignPlan, CampaignResume, PhaseEnd, PhaseStart
from kimitui.core.state import fold_all
from kimitui.report.campaign import campaign_section
from kimitui.tui.views.campaign_view import MARKS, strip_content

PHASES = ["macro", "cleanup", "micro", "analysis"]


def test_a_skipped_phase_put_back_to_pending_by_a_resume_reads_skipped() -> None:
    state = fold_all([
        CampaignPlan(1.0, name="c", phases=PHASES),
        PhaseStart(2.0, phase="macro"), PhaseEnd(3.0, phase="macro"),
        CampaignControl(4.0, action="skip", phase="micro", operator="op"),
        CampaignResume(5.0, done=["macro"], todo=["cleanup", "micro", "analysis"]),
    ])
    c = state.campaign
    assert c is not None
    assert c.phases["micro"].status == "pending" and "micro" in c.skips  # what the fold holds
    assert [c.shown_status(p) for p in PHASES] == ["done", "pending", "skipped", "pending"]
    strip = strip_content(state, live=False).plain
    assert f"{MARKS['skipped'][0]} micro" in strip and f"{MARKS['pending'][0]} transition" in strip
    table = [line for line in campaign_section(state, 6.0) if line.startswith("| ")]
    assert any(line.startswith("| Phase 2 micro | skipped |") for line in table), table
