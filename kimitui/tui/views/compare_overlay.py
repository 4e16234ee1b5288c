"""``kimitui replay RUN_A --compare RUN_B``: run B folded whole once, and what the Benchmarks and Analysis tabs
draw of it over run A's replay: B's output tok/s against concurrency as one more line on A's plot, and B's
decode-step budget bar under each of A's. The app carries it as ``compare_run`` (None without --compare);
the views read B's fold from it, never its events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.content import Content

from kimitui.core.events import DecodeBudget
from kimitui.core.figures import budget_impossible, level_tok_s
from kimitui.core.state import SessionState
from kimitui.report.budget_text import SEGMENTS, stacked_bar
from kimitui.tui import fmt

COMPARE_COLOR = "cyan"
"""B's line on the tok/s plot (A's sweeps are green, yellow, magenta, in turn)."""


@dataclass(frozen=True, slots=True)
class CompareRun:
    name: str
    """The run file's name, as the legend says it."""
    state: SessionState
    """The fold of the whole run."""
    budget: DecodeBudget | None
    """Its decode-step budget: recorded, or computed as its report computes it."""
    budget_computed: bool = False

    @property
    def tok_s(self) -> list[tuple[int, float]]:
        return sorted(level_tok_s(self.state.macro_points))

    @property
    def label(self) -> str:
        return f"B: {self.name}"


def load_compare(path: Path) -> CompareRun:
    """Run B read and folded (the report's digest: every event but the samples, which nothing here draws)."""
    from kimitui.core.runfile import RunReader
    from kimitui.report.compare import load_runs

    (run,) = load_runs([RunReader(path)])
    return CompareRun(run.name, run.state, run.budget, run.budget_computed)


def compare_of(app: Any) -> CompareRun | None:
    run = getattr(app, "compare_run", None)
    return run if isinstance(run, CompareRun) else None


def compare_bar(compare: CompareRun, m: int, bar_w: int, styles: dict[str, str]) -> list[str | tuple[str, str]]:
    """B's bar at concurrency ``m`` (tok/s, TPOT, the stacked bar), to go under A's; nothing when B has no row."""
    budget = compare.budget
    row = next((r for r in budget.rows if r.m == m), None) if budget is not None else None
    if row is None:
        return []
    tok = fmt.num(row.tok_s, "{:.0f}", " tok/s")
    tpot = fmt.num(row.tpot_ms, "{:.1f}", " ms")
    parts: list[str | tuple[str, str]] = ["\n", ("  B   ", f"bold {COMPARE_COLOR}"), f" {tok:>10} {tpot:>9} "]
    for key, cells in stacked_bar(row, bar_w):
        char = next(c for k, c, _ in SEGMENTS if k == key)
        parts.append((char * cells, styles[key]))
    if budget_impossible(row):
        parts.append((" !", "bold $accent"))
    return parts


def compare_rows_only_in_b(compare: CompareRun, shown: set[int], bar_w: int,
                           styles: dict[str, str]) -> list[str | tuple[str, str]]:
    """B's bars at the concurrencies A has no row for."""
    if compare.budget is None:
        return []
    parts: list[str | tuple[str, str]] = []
    for r in compare.budget.rows:
        if r.m not in shown:
            parts += ["\n", (f"M={r.m:<4}", "bold"), *compare_bar(compare, r.m, bar_w, styles)[1:]]
    return parts


def compare_legend(compare: CompareRun) -> Content:
    how = "computed from its macro points and GEMM rows" if compare.budget_computed else "as recorded"
    return Content.assemble(("B", f"bold {COMPARE_COLOR}"), f" under each M: {fmt.printable(compare.name)} "
                            f"(kimitui replay --compare), its budget {how}")
