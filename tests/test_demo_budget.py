"""The bundled demo runs (recorded on the simulated host) read consistently: their decode-step budget is
possible at every M (the modelled GEMMs and all-reduce fit in the TPOT the simulated server served, with time
left for the rest), and the budget's verdict names its level the way the sweep's own verdict sees the sweep:
a sweep whose tok/s still grows at its last level has no plateau, and its verdict is about the highest level
measured. Only the runs' own records and the report are read (issue 33 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.core.figures import budget_impossible, knee, level_tok_s
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
from kimitui.phases.analysis import decode_budget
from kimitui.report.markdown import render_report

ROOT = Path(__file__).resolve().parent.parent
DEMO_RUNS = sorted((ROOT / "sample_runs").glob("campaign-demo-8x-rtx-pro-6000*.jsonl.gz"))


def test_the_three_demo_runs_are_bundled() -> None:
    assert [p.name for p in DEMO_RUNS] == ["campaign-demo-8x-rtx-pro-6000-allreduce-1x.jsonl.gz",
                                          "campaign-demo-8x-rtx-pro-6000-allreduce-2x.jsonl.gz",
                                          "campaign-demo-8x-rtx-pro-6000.jsonl.gz"]


@pytest.mark.parametrize("path", DEMO_RUNS, ids=lambda p: p.name)
def test_the_demo_runs_budget_is_possible_at_every_m(path: Path) -> None:
    """The recorded budget and the one the analysis computes again from the run's rows."""
    state = fold_all(list(RunReader(path).events()))
    for budget in (state.budget, decode_budget(state)):
        assert budget is not None and budget.rows
        for row in budget.rows:
            assert not budget_impossible(row), (path.name, row.m, row.tpot_ms, row.rest_ms)
            assert row.rest_ms is not None and row.rest_ms > 0, (path.name, row.m, row.rest_ms)
        assert "IMPOSSIBLE" not in budget.verdict


@pytest.mark.parametrize("path", DEMO_RUNS, ids=lambda p: p.name)
def test_the_demo_runs_verdict_names_the_level_as_the_sweep_sees_it(path: Path) -> None:
    state = fold_all(list(RunReader(path).events()))
    budget, sweep = state.budget, state.sweep
    assert budget is not None and sweep is not None and sweep.verdict is not None
    levels = level_tok_s(state.macro_points)
    assert sweep.verdict.knee_concurrency == knee(levels)
    section = render_report(RunReader(path)).split("## Phase 3", 1)[1].split("\n## ", 1)[0]
    if sweep.verdict.knee_concurrency is None:  # "no knee: tok/s still grows at the last level"
        top = max(c for c, _ in levels)
        assert budget.plateau_m == top
        assert budget.verdict.startswith(f"At the highest level measured ({budget.plateau_tok_s:.0f} tok/s measured "
                                         f"at concurrency {top};")
        assert f"| {top} (highest level measured) |" in section
    else:
        assert budget.plateau_m == sweep.verdict.knee_concurrency and budget.verdict.startswith("At the knee (")
    assert "plateau" not in section
