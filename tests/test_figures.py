"""Issue 20 items 2 and 4: every derived figure made in one place (kimitui.core.figures) and said in one
place (kimitui.core.describe), so one recorded row reads the same on the Benchmarks and Micro tabs, in the
CLI's text, in the log and in the report; and a decode-step budget whose parts exceed the TPOT says so in
the row itself, never as a share above 100 % or below 0."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from textual.widgets import Static

from kimitui.bench.macro.config import MacroConfig
from kimitui.bench.macro.sweep import SweepLevel, SweepResult, sweep_note
from kimitui.bench.micro.tables import TextPrinter
from kimitui.core.budget_words import budget_verdict
from kimitui.core.events import BudgetRow, Event, GemmRow, MacroPoint
from kimitui.core.figures import budget_shares, single_stream
from kimitui.core.micro_words import gemm_words
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.report.budget_text import budget_lines
from kimitui.report.markdown import render_report
from kimitui.report.summary import summarize
from kimitui.tui.app import KimituiApp
from kimitui.tui.views.campaign_view import table_content, verdict_content
from kimitui.tui.views.result_tables import GemmTable
from tests.support import FakeClock
from tests.waiting import pilot_until

ROOT = Path(__file__).resolve().parent.parent
H200_CAMPAIGN = ROOT / "sample_runs" / "campaign-1x-h200.jsonl.gz"
FAILED_C1 = {"completed": 0, "failed": 2, "num_prompts": 2, "output_throughput": 0.0, "duration": 1.0,
             "failures": {"HTTP 500": 2}}
OK_C8 = {"completed": 16, "failed": 0, "num_prompts": 16, "output_throughput": 321.5, "mean_tpot_ms": 24.0,
         "median_tpot_ms": 23.0, "mean_ttft_ms": 80.0, "duration": 3.0}
FAILED_ROW = GemmRow(t=3.0, name="o_proj", m=8, n=7168, k=1024, dtype="bf16", backend="bf16", kernel="torch.mm",
                     time_us=6.17, tflops=19.04, gbps=2401.0, roofline_us=3.49, rel_err=0.12, correct=False)
SINGLE_FAILED = "single stream FAILED (every request at concurrency 1 failed)"


def _events() -> list[Event]:
    return [MacroPoint(1.0, concurrency=1, metrics=dict(FAILED_C1)),
            MacroPoint(2.0, concurrency=8, metrics=dict(OK_C8)), FAILED_ROW]


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "one-row.jsonl"
    with RunWriter(path, host="node") as w:
        for ev in _events():
            w.append(ev)
    return path


GEMM_COLUMNS = {"name": "name", "m": "m", "nk": "nk", "dtype": "dtype", "backend": "backend", "time": "time",
                "tflops": "tflops", "gbps": "gbps", "roof": "pct_roof", "err": "rel_err"}
"""The tables' column -> ``gemm_words``' key."""


async def test_one_recorded_row_reads_the_same_on_every_surface(run_file: Path) -> None:
    words = gemm_words(FAILED_ROW)
    assert words["rel_err"] == "0.1200 FAIL" and words["pct_roof"] == "57%"

    # the CLI's text (kimitui bench micro)
    out = io.StringIO()
    TextPrinter(out=out, err=io.StringIO(), tty=lambda: False)(FAILED_ROW)
    cli_line = out.getvalue().splitlines()[-1]
    assert cli_line.split() == ["o_proj", "8", "7168", "x", "1024", "bf16", "bf16", "6.17", "19.04", "2401", "57%",
                                "0.1200", "FAIL"]

    # the report
    report = render_report(RunReader(run_file))
    gemm = report[report.index("## GEMM (micro)"):]
    row = next(line for line in gemm.splitlines() if line.startswith("| o_proj |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == [words[k] for k in ("name", "m", "nk", "dtype", "backend", "kernel", "time", "roofline",
                                        "pct_roof", "tflops", "gbps", "rel_err")]
    sweep = report[report.index("## Serving sweep"):report.index("## GEMM")]
    assert "Single stream: FAILED (every request at concurrency 1 failed)" in sweep and "0.0 tok/s" not in sweep

    # the summary and the log's sweep note (the campaign's phase end, `bench macro`'s text)
    assert SINGLE_FAILED in summarize(RunReader(run_file))
    result = SweepResult(MacroConfig(url="http://x", concurrency=[1, 8]), "m",
                         levels=[SweepLevel(1, dict(FAILED_C1)), SweepLevel(8, dict(OK_C8))])
    assert result.single_stream_tok_s is None and sweep_note(result) == f"2 levels; {SINGLE_FAILED}"

    # the Benchmarks tab and the Micro tab: the same table, the same cells
    session = Session()
    app = KimituiApp(session, player=Player(RunReader(run_file), session, clock=FakeClock()))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("e", "b")
        bench = app.query_one("#gemm-table", GemmTable)
        await pilot_until(pilot, lambda: len(bench.row_keys) == 1, "the GEMM row on the Benchmarks tab")
        assert {col: bench.cell_text("0", col) for col in GEMM_COLUMNS} == \
               {col: words[key] for col, key in GEMM_COLUMNS.items()}
        single = str(app.query_one("#single-stream", Static).render())
        assert SINGLE_FAILED in single and "0.0" not in single
        caption = str(app.query_one("#headline-caption", Static).render())
        assert "FAILED" in caption
        await pilot.press("u")
        await pilot_until(pilot, lambda: bool(app.query("#micro-gemm")), "the Micro tab mounted")
        micro = app.query_one("#micro-gemm", GemmTable)
        await pilot_until(pilot, lambda: len(micro.row_keys) == 1, "the GEMM row on the Micro tab")
        assert {col: micro.cell_text("0", col) for col in GEMM_COLUMNS} == \
               {col: bench.cell_text("0", col) for col in GEMM_COLUMNS}


def test_single_stream_is_no_zero_for_a_failed_level() -> None:
    points = [MacroPoint(1.0, concurrency=1, metrics=dict(FAILED_C1)), MacroPoint(2.0, concurrency=8,
                                                                                  metrics=dict(OK_C8))]
    assert single_stream(points).state == "failed" and single_stream(points).tok_s is None
    assert fold_all(points).single_stream_tok_s() is None
    assert single_stream(points[1:]).state == "not run"


@pytest.fixture(scope="module")
def h200() -> tuple[str, object]:
    reader = RunReader(H200_CAMPAIGN)
    return render_report(reader), fold_all(list(RunReader(H200_CAMPAIGN).events()))


def test_impossible_budget_shares_are_flagged_in_the_row(h200) -> None:
    """The bundled H200 campaign: the INT4 stand-in's time exceeds the TPOT at M=4..64; the report and the
    Analysis tab flag those cells, name what the verdict lacks, and list every M."""
    report, state = h200
    budget = state.budget
    assert budget is not None and [r.m for r in budget.rows] == [1, 4, 16, 64]
    section = report[report.index("## Phase 3"):report.index("## Post-restart check")]
    assert "(495%)" not in section and "-205.94" not in section and "(-401%)" not in section
    assert "| 64 (plateau) | 945 | 51.41 | n/a | 254.64 > TPOT 51.41! | 2.70 (5%) | none: over by 205.94! |" in section
    assert "the all-reduce at M=64 was not measured" in section and "measured nothing" not in section
    per_m = section[section.index("Per M:"):]
    assert all(f"- M={r.m}: " in per_m for r in budget.rows)
    assert all(f"- M={m}: IMPOSSIBLE" in per_m for m in (4, 16, 64)) and "- M=1: IMPOSSIBLE" not in per_m
    # the Analysis tab: the same verdict, the same flags, every M
    tab = table_content(state).plain
    assert "254.6 > TPOT 51.4!" in tab and "none: over by 205.9!" in tab and "495%" not in tab
    assert all(f"M={r.m}: " in tab for r in budget.rows)
    assert "the all-reduce at M=64 was not measured" in verdict_content(state).plain
    assert budget_verdict(budget) in section


def test_the_budget_says_which_tpot_it_divides() -> None:
    report = render_report(RunReader(H200_CAMPAIGN))
    assert "| M | tok/s | TPOT median |" in report and "| TPOT mean |" in report
    assert "TPOT median" in budget_lines(fold_all(list(RunReader(H200_CAMPAIGN).events())).budget)[0]  # type: ignore[arg-type]


def test_budget_shares_flag_what_cannot_be() -> None:
    row = BudgetRow(m=64, tpot_ms=50.0, tok_s=900.0, allreduce_ms=None, int4_gemm_ms=60.0, bf16_gemm_ms=2.0,
                    rest_ms=-12.0)
    flags = {s.key: s.flag for s in budget_shares(row)}
    assert flags == {"allreduce": "not measured", "int4": "exceeds the TPOT", "bf16": "", "rest": "negative"}
