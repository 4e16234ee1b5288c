"""The decode-step budget as text: a table and a stacked bar per M (the terminal, the report and the
dashboard's Analysis tab draw the same bars)."""

from __future__ import annotations

from kimitui.core.budget_words import budget_row_note, share_words, tpot_label
from kimitui.core.events import BudgetRow, DecodeBudget
from kimitui.core.figures import budget_impossible, budget_shares

SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("allreduce", "#", "all-reduce (122 per step)"),
    ("int4", "=", "INT4 GEMMs (routed experts)"),
    ("bf16", "-", "bf16 GEMMs (attention, shared expert, dense MLP, lm_head)"),
    ("rest", ".", "attention, routing, sampling, scheduling (not measured)"),
)
"""(key, bar character, what it is) in the order a bar draws them."""


def parts(row: BudgetRow) -> dict[str, float]:
    """Each segment's ms (a missing part is 0; a negative rest, the measured parts above the TPOT, is 0)."""
    return {"allreduce": row.allreduce_ms or 0.0, "int4": row.int4_gemm_ms or 0.0,
            "bf16": row.bf16_gemm_ms or 0.0, "rest": max(row.rest_ms or 0.0, 0.0)}


def stacked_bar(row: BudgetRow, width: int) -> list[tuple[str, int]]:
    """(segment key, cells) summing to ``width``: each segment's share of the step, largest remainders
    rounded up (so every segment with time shows at least its due)."""
    p = parts(row)
    total = sum(p.values())
    if total <= 0 or width <= 0:
        return []
    exact = {k: v / total * width for k, v in p.items()}
    cells = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - cells[k], reverse=True)[: width - sum(cells.values())]:
        cells[k] += 1
    return [(k, cells[k]) for k, _, _ in SEGMENTS if cells[k]]


def bar_text(row: BudgetRow, width: int) -> str:
    chars = {k: c for k, c, _ in SEGMENTS}
    return "".join(chars[k] * n for k, n in stacked_bar(row, width))


def legend() -> str:
    return "  ".join(f"{c} {what}" for _, c, what in SEGMENTS)


BUDGET_HEAD = ("M", "tok/s", tpot_label(), "all-reduce", "INT4 GEMMs", "bf16 GEMMs", "rest")


def budget_cells(row: BudgetRow, digits: str = ".2f") -> list[str]:
    """A budget row's cells under ``BUDGET_HEAD``, the report's and the terminal's: each part with its share
    of the TPOT, an impossible part flagged in its cell (``describe.share_words``)."""
    t = row.tpot_ms
    return [str(row.m), "n/a" if row.tok_s is None else f"{row.tok_s:.0f}", "n/a" if t is None else f"{t:{digits}}",
            *(share_words(s, t, digits) for s in budget_shares(row))]


def budget_lines(budget: DecodeBudget, width: int = 40) -> list[str]:
    """The budget as a terminal shows it: one line per M (ms and share of each part, the bar), the legend,
    and each M's notes (an impossible row first)."""
    rows = [list(BUDGET_HEAD), *(budget_cells(r, ".1f") for r in budget.rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(BUDGET_HEAD))]
    bars = ["bar", *(bar_text(r, width) + (" !" if budget_impossible(r) else "") for r in budget.rows)]
    out = [" ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + "  " + bar
           for row, bar in zip(rows, bars, strict=True)]
    return [*out, f"  (ms per decode step; {legend()})", *(f"  {budget_row_note(r)}" for r in budget.rows)]
