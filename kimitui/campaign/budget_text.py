"""The decode-step budget as text: a table and a stacked bar per M (the terminal, the report and the
dashboard's Analysis tab draw the same bars)."""

from __future__ import annotations

from kimitui.core.campaign_events import BudgetRow, DecodeBudget

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


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _pct(v: float | None, total: float | None) -> str:
    return "" if v is None or not total else f" {v / total:>4.0%}"


def legend() -> str:
    return "  ".join(f"{c} {what}" for _, c, what in SEGMENTS)


def budget_lines(budget: DecodeBudget, width: int = 40) -> list[str]:
    """The budget as a terminal shows it: one line per M (ms and share of each part, the bar), the legend."""
    head = f"{'M':>5} {'tok/s':>7} {'TPOT':>7} {'all-red':>12} {'INT4':>12} {'bf16':>12} {'rest':>12}  bar"
    out = [head]
    for r in budget.rows:
        t = r.tpot_ms
        out.append(f"{r.m:>5} {_num(r.tok_s):>7} {_ms(t):>7} {_ms(r.allreduce_ms) + _pct(r.allreduce_ms, t):>12} "
                   f"{_ms(r.int4_gemm_ms) + _pct(r.int4_gemm_ms, t):>12} "
                   f"{_ms(r.bf16_gemm_ms) + _pct(r.bf16_gemm_ms, t):>12} {_ms(r.rest_ms) + _pct(r.rest_ms, t):>12}  "
                   f"{bar_text(r, width)}")
    return [*out, f"  (ms per decode step; {legend()})"]


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"
