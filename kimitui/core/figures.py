"""Every figure derived from recorded rows, made here once: the views, the CLI and the report call these
(their words are in ``kimitui.core.describe``), so no two surfaces can compute one figure two ways.

- the single-stream headline: output tok/s at concurrency 1, and whether that level ran or failed;
- the TPOT statistic a level's decode step is read with (the median, vLLM's ``median_tpot_ms``);
- a GEMM row's % of its memory roofline and its correctness mark;
- percentiles (numpy's default interpolation, as vLLM computes them);
- the decode-step budget's shares of the TPOT and which of them are impossible;
- a sweep's knee and plateau, and the level a verdict is about (one word names it everywhere);
- whether a change between two runs is beyond the runs' own spread (``kimitui compare``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from kimitui.core.events import BudgetRow, GemmRow, MacroPoint
from kimitui.core.level_result import LevelResult

# -- statistics ---------------------------------------------------------------------------------------------


def request_tpot(ttft_ms: float, e2el_ms: float, output_tokens: float | None) -> float | None:
    """One request's TPOT as vLLM defines it (docs/reference.md section 3): (E2EL - TTFT) / (N - 1), only where
    it has more than one output token (None otherwise). The load generator's summary and the fold's per-request
    records both take it from here."""
    if output_tokens is None or output_tokens <= 1:
        return None
    return (e2el_ms - ttft_ms) / (output_tokens - 1)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """numpy.percentile(values, p) with the default linear interpolation; values sorted ascending (0.0
    for none)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = (n - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


# -- the single-stream headline -----------------------------------------------------------------------------

SingleState = Literal["measured", "failed", "not run", "no figure"]


@dataclass(frozen=True, slots=True)
class SingleStream:
    """Output tok/s at concurrency 1: ``tok_s`` only when that level ran and completed requests."""

    state: SingleState
    tok_s: float | None = None


def single_stream_of(levels: Iterable[LevelResult]) -> SingleStream:
    """The headline from a sweep's levels: a level where every request failed has no throughput (never 0.0)."""
    for level in levels:
        if level.concurrency != 1:
            continue
        if level.all_failed:
            return SingleStream("failed")
        tok = level.output_throughput
        return SingleStream("measured", tok) if tok is not None else SingleStream("no figure")
    return SingleStream("not run")


def single_stream(points: Iterable[MacroPoint]) -> SingleStream:
    return single_stream_of(p.result for p in points)


# -- the TPOT statistic -------------------------------------------------------------------------------------

TPOT_STATISTIC = "median"
"""The TPOT a level's decode step is read with, in the budget and the plots (the tables show the mean and
p99, and say so)."""


def step_tpot(point: MacroPoint) -> tuple[float | None, str]:
    """(the level's TPOT in ms, the statistic it is): the median; the mean for a level recorded without a
    median (an older run), said so."""
    for stat in (TPOT_STATISTIC, "mean"):
        v = point.result.tpot.stat(stat)
        if v is not None and v > 0:
            return v, stat
    return None, TPOT_STATISTIC


# -- GEMM rows ----------------------------------------------------------------------------------------------


def roofline_pct(g: GemmRow) -> float | None:
    """The row's % of its memory roofline (roofline time / measured time x 100)."""
    return g.roofline_us / g.time_us * 100 if g.roofline_us and g.time_us > 0 else None


def correctness_failed(g: GemmRow) -> bool:
    """The row's output was checked against the reference and is off by more than the limit."""
    return g.correct is False


# -- the decode-step budget ---------------------------------------------------------------------------------

ShareFlag = Literal["", "not measured", "exceeds the TPOT", "negative"]


@dataclass(frozen=True, slots=True)
class Share:
    """One part of a decode step: its ms, its share of the TPOT, and what is impossible about it."""

    key: str
    ms: float | None
    share: float | None
    flag: ShareFlag


def budget_shares(row: BudgetRow) -> list[Share]:
    """The row's parts (all-reduce, INT4 GEMMs, bf16 GEMMs, rest) with their shares of the TPOT; a part
    above the TPOT, or a negative rest (the measured parts above the TPOT), is flagged: no share of a
    step can exceed the step."""
    t = row.tpot_ms
    out = []
    for key, ms in (("allreduce", row.allreduce_ms), ("int4", row.int4_gemm_ms), ("bf16", row.bf16_gemm_ms),
                    ("rest", row.rest_ms)):
        share = ms / t if ms is not None and t else None
        flag: ShareFlag = ""
        if ms is None:
            flag = "not measured"
        elif ms < 0:
            flag = "negative"
        elif t and ms > t:
            flag = "exceeds the TPOT"
        out.append(Share(key, ms, share, flag))
    return out


def budget_impossible(row: BudgetRow) -> bool:
    """The measured parts of the row add up to more than its TPOT."""
    return any(s.flag in ("exceeds the TPOT", "negative") for s in budget_shares(row))


def missing_parts(row: BudgetRow) -> list[str]:
    """The parts a row needs for a verdict and lacks: 'allreduce', 'gemm' (a TP=1 run has an all-reduce
    of 0.0, never None)."""
    out = []
    if row.allreduce_ms is None:
        out.append("allreduce")
    if row.gemm_ms is None:
        out.append("gemm")
    return out


# -- a sweep's knee and plateau -----------------------------------------------------------------------------

KNEE_GROWTH = 0.10
"""Growth of output tok/s per doubling of the concurrency below which the sweep has reached its knee."""
PLATEAU_WITHIN = 0.05
"""A level within this fraction of the highest output tok/s is on the plateau."""


def growth_per_doubling(c0: int, tps0: float, c1: int, tps1: float) -> float:
    """Relative growth of tok/s from level ``c0`` to ``c1``, per doubling of the concurrency."""
    if tps0 <= 0 or c1 <= c0:
        return math.inf if tps1 > tps0 else 0.0
    return (tps1 / tps0) ** (1.0 / math.log2(c1 / c0)) - 1.0


def knee(levels: Sequence[tuple[int, float]], growth: float = KNEE_GROWTH) -> int | None:
    """The first concurrency past which tok/s grows by less than ``growth`` per doubling; ``levels`` are
    (concurrency, output tok/s); a level that measured nothing (0 tok/s: every request failed) is left out.
    None when it still grows at the last step (or fewer than two levels measured)."""
    ordered = sorted((c, t) for c, t in levels if t > 0)
    for (c0, t0), (c1, t1) in itertools.pairwise(ordered):
        if growth_per_doubling(c0, t0, c1, t1) < growth:
            return c0
    return None


def plateau(levels: Iterable[tuple[int, float]], within: float = PLATEAU_WITHIN) -> int | None:
    """The lowest concurrency whose output tok/s is within ``within`` of the highest, where another level is
    too: a flat stretch of the sweep. None when only the highest level is within (tok/s still climbs to the
    last level: no plateau was measured), or for no level."""
    scored = [(c, t) for c, t in levels if t > 0]
    if not scored:
        return None
    top = max(t for _, t in scored)
    flat = [c for c, t in scored if t >= top * (1 - within)]
    return min(flat) if len(flat) > 1 else None


LEVEL_KNEE = "knee"
LEVEL_HIGHEST = "highest level measured"
"""The words that name the level a verdict is about (``verdict_level``), the same in the budget's verdict
("At the highest level measured (...)"), its table and bars, the dashboard's marker and ``kimitui compare``."""
LEVEL_BEFORE = "plateau"
"""What a run recorded before ``DecodeBudget.level`` called its verdict's level (the plateau rule's)."""


def verdict_level(levels: Iterable[tuple[int, float]]) -> tuple[int, str] | None:
    """The concurrency a sweep's verdict is about and the word that names it: the knee (``knee``) where the
    sweep found one, else the highest level measured (tok/s may still grow past it: the sweep did not find
    where it stops). ``levels`` are (concurrency, output tok/s); None when no level measured any."""
    scored = [(c, t) for c, t in levels if t > 0]
    if not scored:
        return None
    at = knee(scored)
    return (at, LEVEL_KNEE) if at is not None else (max(c for c, _ in scored), LEVEL_HIGHEST)


def level_tok_s(points: Iterable[MacroPoint]) -> list[tuple[int, float]]:
    """(concurrency, output tok/s) of the levels that measured it (a failed level has none)."""
    return [(p.concurrency, v) for p in points if not p.result.all_failed
            and (v := p.result.output_throughput) is not None]


# -- a change between two runs, against their spread --------------------------------------------------------

NOISE_MIN_REQUESTS = 5
"""Fewer per-request records than this at a level in either run: too few to tell a change from noise."""
NOISE_RULE = ("a change is beyond noise when the two runs' middle halves (p25 to p75) of the per-request "
              "values at that level do not overlap (TTFT: the TTFT records; tok/s, TPOT, ITL, E2EL: the TPOT "
              f"records); fewer than {NOISE_MIN_REQUESTS} records in either run: too few to tell")
"""The rule in one line, as the compare report states it."""

Noise = Literal["beyond noise", "within noise", "too few requests", "no records"]


@dataclass(frozen=True, slots=True)
class Spread:
    """The quartiles of one level's per-request values."""

    n: int
    p25: float
    p50: float
    p75: float


def spread(values: Iterable[float]) -> Spread:
    s = sorted(values)
    return Spread(len(s), percentile(s, 25), percentile(s, 50), percentile(s, 75))


def noise(a: Sequence[float], b: Sequence[float]) -> Noise:
    """Whether the change between two runs' levels exceeds their own spread (``NOISE_RULE``)."""
    if not a or not b:
        return "no records"
    if min(len(a), len(b)) < NOISE_MIN_REQUESTS:
        return "too few requests"
    sa, sb = spread(a), spread(b)
    return "beyond noise" if sa.p75 < sb.p25 or sb.p75 < sa.p25 else "within noise"


def change_pct(before: float | None, after: float | None) -> float | None:
    """``after`` against ``before`` in per cent (None without both, or from zero)."""
    if before is None or after is None or before == 0:
        return None
    return (after - before) / abs(before) * 100.0
