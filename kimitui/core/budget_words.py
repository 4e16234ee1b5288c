"""The decode-step budget in words (Phase 3): a part's share, a row's notes, what is missing, the verdict as
every surface writes it (the dashboard's Analysis tab, the report, compare)."""

from __future__ import annotations

from kimitui.core.events import BudgetRow, DecodeBudget
from kimitui.core.figures import LEVEL_BEFORE, TPOT_STATISTIC, Share, budget_impossible, missing_parts


def tpot_label(stat: str = TPOT_STATISTIC) -> str:
    """How a TPOT column or axis names its statistic: ``TPOT median``, ``TPOT mean``."""
    return f"TPOT {stat}"


def share_words(s: Share, tpot: float | None, digits: str = ".2f") -> str:
    """One part of a decode step in a budget row: ``2.45 (12%)``; an impossible part flagged in the cell
    (``254.64 > TPOT!``, ``none: parts > TPOT!``), never a share above 100% or below 0."""
    if s.ms is None:
        return "n/a"
    if s.flag == "negative":
        return f"none: over by {-s.ms:{digits}}!"
    if s.flag == "exceeds the TPOT":
        return f"{s.ms:{digits}} > TPOT {tpot:{digits}}!" if tpot else f"{s.ms:{digits}}!"
    return f"{s.ms:{digits}}" + (f" ({s.share:.0%})" if s.share is not None else "")


def budget_row_note(row: BudgetRow) -> str:
    """A budget row's notes, with the impossible flagged first; every M has a line."""
    notes = list(row.notes)
    if budget_impossible(row):
        if not any("exceed the TPOT" in n for n in notes):
            notes.append("the measured parts exceed the TPOT (stand-ins, or the micro figures overstate)")
        return f"M={row.m}: IMPOSSIBLE, no shares: " + "; ".join(notes)
    return f"M={row.m}: " + ("; ".join(notes) if notes else "every part measured")


PART_WORDS = {"allreduce": "the all-reduce", "gemm": "the GEMMs"}


def missing_words(m: int, parts: list[str]) -> str:
    """``the all-reduce at M=64 was not measured``; ``the all-reduce and the GEMMs at M=64 were not measured``."""
    what = " and ".join(PART_WORDS.get(p, p) for p in parts)
    return f"{what} at M={m} {'were' if len(parts) > 1 or parts == ['gemm'] else 'was'} not measured"


def budget_level(budget: DecodeBudget) -> str:
    """The word that names the level the budget's verdict is about: the recorded one (``figures.
    verdict_level``'s), or the plateau for a run recorded before the budget said it."""
    return budget.level or LEVEL_BEFORE


def no_verdict_words(row: BudgetRow, level: str) -> str:
    parts = missing_parts(row)
    what = missing_words(row.m, parts) if parts else f"the micro benchmarks measured nothing at M={row.m}"
    return f"no verdict at the {level} (concurrency {row.m}): {what}"


def impossible_words(row: BudgetRow) -> str:
    """What a verdict adds for the verdict's row whose measured parts exceed its TPOT."""
    measured = (row.allreduce_ms or 0.0) + (row.gemm_ms or 0.0)
    return (f"IMPOSSIBLE at M={row.m}: the measured parts ({measured:.1f} ms) exceed the TPOT "
            f"({row.tpot_ms or 0.0:.1f} ms): stand-ins, or the micro figures overstate; the shares are not exact.")


def budget_verdict(budget: DecodeBudget) -> str:
    """The budget's verdict as every surface writes it: the recorded one; for the verdict's row that lacks a
    part, what is missing there; for one whose parts exceed its TPOT, that said too (a run recorded before
    the words said them)."""
    row = next((r for r in budget.rows if r.m == budget.plateau_m), None)
    if row is not None and missing_parts(row) and not budget.bound:
        return no_verdict_words(row, budget_level(budget))
    verdict = budget.verdict or "none"
    if row is not None and budget_impossible(row) and "IMPOSSIBLE" not in verdict:
        verdict += " " + impossible_words(row)
    return verdict
