"""The campaign file's Phase 1 beyond a fixed concurrency sweep: ``search`` (the highest concurrency meeting the
goodput SLOs, probed as the load generator's search does) and ``rates`` (levels by request rate, capped at the
highest concurrency); what each one leaves the analysis, the check and a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.campaign.config import CampaignConfigError
from kimitui.campaign.resume import plan_resume
from kimitui.core.campaign_words import probe_words
from kimitui.core.events import (
    CampaignPlan,
    DecodeBudget,
    LogLine,
    MacroPoint,
    MacroVerdict,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
)
from kimitui.core.figures import LevelResult
from kimitui.phases.analysis import decode_budget
from kimitui.phases.check import compare
from tests.campaign_rig import campaign_rig, small_config


def cut_after_first_point(run: Path, tmp_path: Path) -> Path:
    """The run as it was when kimitui died right after Phase 1's first point."""
    lines = run.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if '"type":"macro_point"' in line.replace(" ", ""))
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:first + 1]))
    return cut


def test_rates_are_numbers_and_the_highest_concurrency_caps_them() -> None:
    cfg = small_config(["macro", "cleanup", "micro"], macro={"rates": [2, 4.5, 8], "concurrency": [1, 4, 16]})
    assert cfg.macro.rates == [2.0, 4.5, 8.0] and cfg.macro.levels == [2.0, 4.5, 8.0]
    macro = cfg.macro.macro_config("http://127.0.0.1:8000")
    assert macro.rate_levels == [2.0, 4.5, 8.0] and macro.concurrency == [16] and not macro.search
    assert cfg.macro.macro_config("http://127.0.0.1:8000", [8.0]).rate_levels == [8.0]  # a resume's levels left
    plain = small_config().macro
    assert plain.levels == [1.0, 4.0] and plain.macro_config("http://h:1", [4.0]).concurrency == [4]


@pytest.mark.parametrize(("macro", "error"), [
    ({"rates": ["fast"]}, "[macro] rates: expected a list of numbers, got a list"),
    ({"rates": [True]}, "[macro] rates: expected a list of numbers, got a list"),
    ({"rates": [float("nan")]}, "[macro] rates: expected finite numbers"),
    ({"rates": [0, 2]}, "[macro] request rates must be positive numbers"),
    ({"search": True}, '[macro] search finds where SLOs hold: give them (goodput = "ttft:200,tpot:50")'),
    ({"search": True, "goodput": "ttft:200", "rates": [4, 4]},
     "[macro] search with rates searches between the lowest and the highest of them: give two different rates"),
    ({"search": "yes"}, "[macro] search: expected true/false, got 'yes'"),
    ({"rates": [2, 4], "concurrency": [8]},
     "[macro] rates: analysis and check need concurrency levels (a decode step's batch, a single-stream baseline): "
     "leave them out of [campaign] phases, or sweep concurrencies"),
])
def test_a_bad_search_or_rate_is_one_line_naming_the_key(macro: dict[str, object], error: str) -> None:
    phases = None if "concurrency" in macro else ["macro", "cleanup", "micro", "restart"]
    with pytest.raises(CampaignConfigError) as caught:
        small_config(phases, **{"macro": macro})
    assert str(caught.value) == f"test.toml: {error}"


async def test_a_search_campaign_probes_its_way_to_the_highest_concurrency_meeting_the_slos(tmp_path: Path) -> None:
    """An SLO every level meets (e2el under 10 minutes): the search probes from the lowest level up and answers
    the highest; its probes are the campaign's points, and the analysis divides a decode step at them."""
    cfg = small_config(["macro", "cleanup", "micro", "analysis"],
                       macro={"concurrency": [1, 8], "search": True, "goodput": "e2el:600000"}, micro={"ms": [1]})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await rig.machine.run()
    assert end.status == "done"
    (verdict,) = rig.of(MacroVerdict)
    points = rig.of(MacroPoint)
    assert verdict.searched and verdict.searched[0] == 1 and verdict.slo_concurrency == 8
    assert [p.concurrency for p in points] == [int(c) for c in verdict.searched] and all(p.rate is None for p in points)
    (plan,) = rig.of(CampaignPlan)
    assert plan.settings["macro"]["search"] is True
    (budget,) = rig.of(DecodeBudget)
    assert sorted(r.m for r in budget.rows) == sorted({p.concurrency for p in points})
    # cut off after its first probe, the search runs again whole: its next probes depended on that one's answer
    resume = plan_resume(cut_after_first_point(rig.path, tmp_path), list(cfg.phases))
    assert resume.macro_done == set() and resume.todo[0] == "macro"
    assert resume.notes["macro"] == "the search runs again whole (its probes depend on each other)"


async def test_a_campaign_of_rates_runs_them_and_the_analysis_says_why_it_has_no_budget(tmp_path: Path) -> None:
    """The file may not ask for Phase 3 or the check with rates (tested above); a session that has rate levels
    and GEMM rows anyway (a dashboard's sweep by rate) gets a budget that says why it has no rows."""
    cfg = small_config(["macro", "cleanup", "micro", "restart"],
                       macro={"rates": [20, 40], "concurrency": [4], "requests": "8"}, micro={"ms": [1]})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await rig.machine.run()
    assert end.status == "done"
    points = rig.of(MacroPoint)
    assert [(p.rate, p.concurrency) for p in points] == [(20.0, 4), (40.0, 4)]
    assert [e.phase for e in rig.of(PhaseEnd)] == ["macro", "cleanup", "micro", "restart"]
    budget = decode_budget(rig.session.state)
    assert not budget.rows and rig.session.state.gemm
    assert any("Phase 1's levels were request rates" in m for m in budget.missing), budget.missing


def test_a_probe_with_nothing_to_compare_with_is_not_judged() -> None:
    probed = LevelResult.from_json(1, {"completed": 2, "num_prompts": 2, "output_throughput": 48.0,
                                       "mean_ttft_ms": 30.0})
    probe = compare(probed, None, 10.0, 25.0, 0.0)
    assert not probe.drift and probe.note == "no Phase 1 single-stream figure to compare with"
    assert probe_words(probe).endswith(": not judged")


async def test_a_resumed_campaign_of_rates_keeps_the_rates_it_measured(tmp_path: Path) -> None:
    """Cut off after its first rate: the resume keeps 20 req/s and runs 40 alone."""
    cfg = small_config(["macro"], macro={"rates": [20, 40], "concurrency": [4], "requests": "8"})
    async with campaign_rig(cfg, tmp_path) as rig:
        await rig.machine.run()
    resume = plan_resume(cut_after_first_point(rig.path, tmp_path), ["macro"])
    assert resume.macro_done == {20.0} and resume.todo == ["macro"]
    assert resume.notes["macro"] == "levels 20 kept; 40 to run"
    async with campaign_rig(cfg, tmp_path / "resumed", resume=resume) as again:
        end = await again.machine.run()
    assert end.status == "done"
    assert [(p.rate, p.concurrency) for p in again.of(MacroPoint)] == [(40.0, 4)]


async def test_a_campaign_without_concurrency_1_is_told_at_the_start_that_its_check_will_not_judge(
        tmp_path: Path) -> None:
    cfg = small_config(["macro", "check"], macro={"concurrency": [4]})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await rig.machine.run()
    first_phase = next(i for i, e in enumerate(rig.events) if isinstance(e, PhaseStart))
    warned = [e.message for e in rig.events[:first_phase] if isinstance(e, LogLine) and e.level == "warning"]
    assert warned == ["Phase 1 has no concurrency 1 level: the post-restart check will measure the service but have "
                      "no single-stream figure to judge it by (add 1 to [macro] concurrency)"]
    (probe,) = rig.of(ProbeResult)
    assert probe.tok_s and probe.baseline_tok_s is None and not probe.drift
    assert probe_words(probe).endswith(": not judged") and end.status == "done"
