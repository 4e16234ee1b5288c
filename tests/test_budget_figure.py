"""budget.png marks a bar whose measured parts exceed its TPOT (hatched in red, the TPOT drawn across it and
"over TPOT by X ms" above it) instead of drawing it like any other; a possible bar is drawn plainly."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.core.figures import budget_impossible
from kimitui.core.runfile import RunReader
from kimitui.report.compare import load_runs

ROOT = Path(__file__).resolve().parent.parent
IMPOSSIBLE_RUN = ROOT / "sample_runs" / "campaign-1x-h200.jsonl.gz"
"""A real H200 run whose stand-in INT4 GEMMs exceed the TPOT at M=4, 16 and 64."""


def test_an_impossible_bar_is_marked_with_how_far_it_is_over() -> None:
    from kimitui.report.figures import _pyplot, budget

    plt = _pyplot()
    (run,) = load_runs([RunReader(IMPOSSIBLE_RUN)])
    assert run.budget is not None
    over = [r for r in run.budget.rows if budget_impossible(r)]
    assert over and len(over) < len(run.budget.rows)  # some bars are possible, some are not
    fig = budget(plt, [run])
    try:
        (ax,) = fig.axes
        notes = sorted(t.get_text() for t in ax.texts if t.get_text().startswith("over TPOT by"))
        expected = sorted(f"over TPOT by {(r.allreduce_ms or 0.0) + (r.gemm_ms or 0.0) - (r.tpot_ms or 0.0):.1f} ms"
                          for r in over)
        assert notes == expected
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 4 * len(over) and len(ax.patches) == 4 * len(run.budget.rows)  # 4 segments a bar
        tpots = sorted(seg[0][1] for coll in ax.collections for seg in coll.get_segments())
        assert tpots == pytest.approx(sorted(r.tpot_ms or 0.0 for r in over))
    finally:
        plt.close(fig)
