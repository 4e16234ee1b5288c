"""One word names the level a decode-step verdict is about, wherever it is shown: the knee where the sweep found
one, else the highest level measured (``core.figures.verdict_level``); never a "plateau" the sweep still climbs
past. Checked on the bundled demo runs: the recorded budget, the sweep's own verdict, the report, compare and
the dashboard's analysis bars."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.core.budget_words import budget_level, budget_verdict
from kimitui.core.events import BudgetRow, DecodeBudget
from kimitui.core.figures import LEVEL_BEFORE, LEVEL_HIGHEST, LEVEL_KNEE, knee, level_tok_s, plateau, verdict_level
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
from kimitui.phases.analysis import decode_budget
from kimitui.report.markdown import render_report

ROOT = Path(__file__).resolve().parent.parent
DEMO_RUNS = sorted((ROOT / "sample_runs").glob("campaign-demo-8x-rtx-pro-6000*.jsonl.gz"))


def test_the_verdicts_level_is_the_knee_else_the_highest_level_measured() -> None:
    assert verdict_level([(1, 50.0), (2, 100.0), (4, 200.0), (8, 215.0), (16, 216.0)]) == (4, LEVEL_KNEE)
    assert verdict_level([(1, 50.0), (8, 329.0), (32, 842.0), (128, 1382.0)]) == (128, LEVEL_HIGHEST)
    assert verdict_level([(1, 50.0), (8, 0.0)]) == (1, LEVEL_HIGHEST)  # a failed level measured nothing
    assert verdict_level([]) is None and verdict_level([(4, 0.0)]) is None
    # a run recorded before the budget named its level: its level was the plateau rule's
    assert budget_level(DecodeBudget(0.0)) == LEVEL_BEFORE
    assert budget_level(DecodeBudget(0.0, level=LEVEL_KNEE)) == LEVEL_KNEE


def test_no_verdict_names_the_level_with_the_same_word() -> None:
    rows = [BudgetRow(m=1, tpot_ms=20.0, tok_s=50.0, allreduce_ms=None, int4_gemm_ms=1.0, bf16_gemm_ms=1.0,
                      rest_ms=None),
            BudgetRow(m=8, tpot_ms=25.0, tok_s=320.0, allreduce_ms=None, int4_gemm_ms=2.0, bf16_gemm_ms=1.0,
                      rest_ms=None)]
    b = DecodeBudget(0.0, rows=rows, plateau_m=8, level=LEVEL_HIGHEST)
    assert budget_verdict(b).startswith("no verdict at the highest level measured (concurrency 8): ")


@pytest.mark.parametrize("path", DEMO_RUNS, ids=lambda p: p.name)
def test_the_demo_runs_name_their_verdicts_level_alike_everywhere(path: Path) -> None:
    state = fold_all(list(RunReader(path).events()))
    budget, sweep = state.budget, state.sweep
    assert budget is not None and budget.bound and sweep is not None
    levels = level_tok_s(state.macro_points)
    at, word = verdict_level(levels) or (None, "")
    # the recorded budget is what the analysis computes from the run's own rows, and agrees with the sweep
    again = decode_budget(state)
    assert (budget.plateau_m, budget.level) == (at, word) == (again.plateau_m, again.level)
    knee_c = sweep.verdict.knee_concurrency if sweep.verdict is not None else knee(levels)
    assert knee_c == knee(levels) and (word == LEVEL_KNEE) == (knee_c is not None)
    if knee_c is None:  # tok/s still grows at the last level: that is no plateau either
        assert word == LEVEL_HIGHEST and at == max(c for c, _ in levels) and plateau(levels) is None
    assert budget.verdict.startswith(f"At the {word} (") and budget_verdict(budget) == budget.verdict
    report = render_report(RunReader(path))
    section = report[report.index("## Phase 3"):report.index("## Post-restart check")]
    assert f"**Verdict:** At the {word} (" in section and f"| {at} ({word}) |" in section
    assert "plateau" not in section


def test_the_dashboards_marker_uses_the_verdicts_word() -> None:
    from kimitui.tui.views.campaign_view import bars_content

    state = fold_all(list(RunReader(DEMO_RUNS[0]).events()))
    assert state.budget is not None
    text = bars_content(state, 120).plain
    marked = [line for line in text.splitlines() if "◀" in line]
    assert len(marked) == 1 and marked[0].startswith(f"M={state.budget.plateau_m} ")
    assert marked[0].endswith(f"◀ {state.budget.level}") and "plateau" not in text
