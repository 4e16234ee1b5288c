"""Phase 3: where a decode step's time goes, a pure function of the folded state (the report, the
dashboard and a replay all show the same).

For each measured concurrency M (a macro level with a TPOT), one decode step of a batch of M takes the
TPOT measured at that concurrency. Of it, the micro benchmarks account for:

- all-reduce: 2 per layer (after o_proj, after the MLP / MoE output) x the layers (Kimi-K2.5: 61, so 122
  all-reduces of M x hidden x 2 bytes): the measured CUDA-graph burst at that M where there is one, else
  that many x one all-reduce (graph, else eager);
- GEMMs: each per-GPU GEMM at M tokens x its calls per token (the micro plan's: for Kimi-K2.5 61 for the
  attention projections, 60 for the MoE and the shared expert, 1 for the dense MLP and the lm_head); the
  routed experts through the fused MoE row (the experts M tokens touch), with Marlin where it was
  measured, else a stand-in (said);
- the rest, TPOT minus both: attention, routing, sampling, scheduling (not measured).

Only the micro runs measured for the model the campaign serves (``ServedModel``: its name and TP) are
counted; rows measured for another model (a resumed campaign, a ``bench micro`` of another preset in the same
session) are refused, and said.

The verdict names the largest share at one level, with its assumptions stated: the knee of the sweep where it
found one (``core.figures.knee``), else the highest level measured (``core.figures.verdict_level``; one word
names that level everywhere).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kimitui.core.budget_words import impossible_words, no_verdict_words
from kimitui.core.events import (
    AllReduceRow,
    BudgetRow,
    DecodeBudget,
    GemmRow,
    LogLine,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    level_failed,
)
from kimitui.core.figures import TPOT_STATISTIC, budget_impossible, step_tpot, verdict_level
from kimitui.core.state import MicroRunState, SessionState
from kimitui.phases.base import Publish, now

ALLREDUCES_PER_LAYER = 2
BOUND_WORDS = {"allreduce": "the all-reduce", "gemm": "the GEMMs",
               "rest": "the rest: attention, routing, sampling, scheduling (not measured)"}


@dataclass(slots=True)
class Shape:
    name: str
    dtype: str
    calls: int
    experts: int
    n: int = 0


def _shapes(runs: list[MicroRunState]) -> list[Shape]:
    for run in reversed(runs):
        if run.plan.gemms:
            return [Shape(str(g.get("name")), str(g.get("dtype", "bf16")), int(g.get("calls_per_token") or 0),
                          int(g.get("experts") or 0), int(g.get("n") or 0)) for g in run.plan.gemms]
    return []


@dataclass(slots=True)
class Measured:
    """The micro runs the budget counts (those of the served model), their rows, and what was refused."""

    runs: list[MicroRunState]
    gemm: list[GemmRow]
    allreduce: list[AllReduceRow]
    model: str
    refused: list[str]


def measured_for_model(state: SessionState) -> Measured:
    """The runs measured for the served model (its name and TP; every run where the campaign recorded no
    model) and their rows; the others named in ``refused``."""
    served = state.served_model
    runs = list(state.micro_runs)
    if served is None or not served.identified:
        model = next((r.plan.model for r in reversed(runs) if r.plan.gemms), "")
        return Measured(runs, list(state.gemm), list(state.allreduce), model, [])
    mine = [r for r in runs if r.plan.model == served.name and r.plan.tp == served.tp]
    others = sorted({f"{r.plan.model or 'a model not named'} at TP={r.plan.tp}" for r in runs if r not in mine})
    refused = [f"micro rows measured for {o}, not for the served {served.name} at TP={served.tp}: not counted"
               for o in others]
    ids = {r.plan.run_id for r in mine}
    return Measured(mine, [g for g in state.gemm if g.run_id in ids],
                    [a for a in state.allreduce if a.run_id in ids], served.name, refused)


def _interpolate(series: dict[int, float], m: int) -> tuple[float | None, str]:
    """The value at m: measured, or linear between the nearest measured Ms on each side (else None)."""
    if m in series:
        return series[m], "measured"
    below = [k for k in series if k < m]
    above = [k for k in series if k > m]
    if not below or not above:
        return None, "not measured"
    lo, hi = max(below), min(above)
    return series[lo] + (series[hi] - series[lo]) * (m - lo) / (hi - lo), f"interpolated from M={lo} and M={hi}"


def _gemm_series(rows: Iterable[GemmRow]) -> dict[tuple[str, str], dict[int, float]]:
    """(row name, backend) -> {M: time us}; the latest row wins (a resumed campaign may measure twice)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        if r.time_us > 0 and r.correct is not False:
            out.setdefault((r.name, r.backend or r.kernel), {})[r.m] = r.time_us
    return out


INT4_ORDER = (("marlin", ""), ("torch-int4", "torch-int4 (tinygemm) stands in for Marlin"),
              ("bf16", "bf16 on the dequantized weights stands in for Marlin"))


def _pick(series: dict[tuple[str, str], dict[int, float]], row: str, quantized: bool
          ) -> tuple[dict[int, float] | None, str, str]:
    """The series a GEMM is counted with: (times by M, backend, stand-in note or ''). Where the production
    kernel was not measured, every stand-in overstates it, so the fastest stand-in at each M is counted."""
    order = INT4_ORDER if quantized else (("bf16", ""),)
    first = series.get((row, order[0][0]))
    if first:
        return first, order[0][0], ""
    found = [(backend, note, series[(row, backend)]) for backend, note in order[1:] if series.get((row, backend))]
    if not found:
        return None, "", ""
    best: dict[int, tuple[float, str]] = {}
    for backend, _note, s in found:
        for m, us in s.items():
            if m not in best or us < best[m][0]:
                best[m] = (us, backend)
    used = [(backend, note) for backend, note, _s in found if any(b == backend for _us, b in best.values())]
    times = {m: us for m, (us, _b) in best.items()}
    if len(used) == 1:
        return times, used[0][0], used[0][1]
    names = " or ".join(note.removesuffix(" stands in for Marlin") for _b, note in used)
    return times, used[0][0], f"{names}, the faster at each M, stands in for Marlin"


def _allreduce_series(rows: Iterable[AllReduceRow], count: int) -> tuple[dict[int, float], dict[int, str]]:
    """M -> ms of ``count`` all-reduces, and how it was obtained."""
    best: dict[int, tuple[int, float, str]] = {}
    for r in rows:
        if r.tokens is None or r.time_us <= 0:
            continue
        if r.burst > 1 and r.burst_us:
            rank, ms, how = 3, r.burst_us / r.burst * count / 1000.0, f"measured burst of {r.burst} ({r.mode})"
        else:
            rank = 2 if r.mode == "graph" else 1
            ms, how = r.time_us * count / 1000.0, f"{count} x one all-reduce ({r.mode})"
        if r.tokens not in best or rank >= best[r.tokens][0]:
            best[r.tokens] = (rank, ms, how)
    return {m: v[1] for m, v in best.items()}, {m: v[2] for m, v in best.items()}


def _server_check(point: MacroPoint, tpot: float | None) -> list[str]:
    """The level's decode step cross-checked against the server's own inter-token latency (its /metrics,
    over the same requests): what the client's TPOT holds beyond the server's step."""
    itl = point.result.server.mean_ms.get("itl")
    if itl is None or tpot is None:
        return []
    return [f"the server's own ITL {itl:.2f} ms against a TPOT of {tpot:.2f} ms ({tpot - itl:+.2f} ms: the "
            "network, the client, and the first token's share)"]


def _share(part: float | None, total: float | None) -> float | None:
    return None if part is None or not total else part / total


def decode_budget(state: SessionState, t: float = 0.0) -> DecodeBudget:
    """The budget per measured concurrency, the bound at the verdict's level and the verdict."""
    mine = measured_for_model(state)
    missing: list[str] = list(mine.refused)
    points = [p for p in state.macro_points if not level_failed(p)]
    shapes = _shapes(mine.runs)
    if not points and any(p.rate is not None for sweep in state.sweeps for p in sweep.points.values()):
        missing.append("Phase 1's levels were request rates: the budget divides a decode step at a concurrency, "
                       "and a rate level's batch is not one")
    elif not points:
        missing.append("no macro level with a TPOT: Phase 1 measured nothing to divide")
    if not shapes or not mine.gemm:
        missing.append("no GEMM rows: Phase 2 measured no GEMM" + (f" for {mine.model}" if mine.model else ""))
    series = _gemm_series(mine.gemm)
    o_proj = next((s for s in shapes if s.name == "o_proj"), None)
    layers = o_proj.calls if o_proj is not None else max((s.calls for s in shapes), default=0)
    hidden = o_proj.n if o_proj is not None else 0
    tp = next((run.plan.tp for run in reversed(mine.runs) if run.plan.tp), 0)
    ar_count = ALLREDUCES_PER_LAYER * layers if tp > 1 else 0
    ar_ms, ar_how = _allreduce_series(mine.allreduce, ar_count)
    if ar_count and not ar_ms:
        missing.append("no all-reduce rows at decode-step sizes: Phase 2 measured no all-reduce")
    stand_ins: set[str] = set()
    counted: list[tuple[Shape, str, dict[int, float] | None, str]] = []
    moe = [s for s in shapes if s.experts]
    fused = next((name for name, _ in series if name.startswith("moe (")), None)
    for s in shapes:
        quantized = s.dtype.startswith("int")
        if s.experts:
            continue
        found, backend, stand_in = _pick(series, s.name, quantized)
        counted.append((s, backend, found, stand_in))
    if moe:
        calls = moe[0].calls
        quantized = moe[0].dtype.startswith("int")
        found, backend, stand_in = _pick(series, fused, quantized) if fused else (None, "", "")
        counted.append((Shape(fused or "moe", moe[0].dtype, calls, moe[0].experts), backend, found, stand_in))
    for s, _backend, found, stand_in in counted:
        if stand_in:
            stand_ins.add(f"{s.name}: {stand_in}")
        if found is None and shapes:
            missing.append(f"{s.name}: no row at any M (left in the rest)")
    rows: list[BudgetRow] = []
    for p in points:
        m = p.concurrency
        notes: list[str] = []
        tpot, stat = step_tpot(p)
        if tpot is not None and stat != TPOT_STATISTIC:
            notes.append(f"TPOT: the {stat} (the level has no {TPOT_STATISTIC})")
        tok = p.result.output_throughput
        ar, how = _interpolate(ar_ms, m) if ar_count else (0.0, "tensor parallel 1: no all-reduce")
        if ar is None:
            notes.append(f"all-reduce at M={m}: not measured")
        elif m in ar_how:
            how = ar_how[m]
        if ar_count and ar is not None:
            notes.append(f"all-reduce: {how}")
        int4 = bf16 = 0.0 if counted else None
        for s, _backend, found, _stand_in in counted:
            if found is None:
                continue
            us, got = _interpolate(found, m)
            if us is None:
                notes.append(f"{s.name} at M={m}: not measured (left in the rest)")
                continue
            if got != "measured":
                notes.append(f"{s.name}: {got}")
            ms = us * s.calls / 1000.0
            if s.dtype.startswith("int"):
                int4 = (int4 or 0.0) + ms
            else:
                bf16 = (bf16 or 0.0) + ms
        measured = (ar or 0.0) + (int4 or 0.0) + (bf16 or 0.0)
        notes += _server_check(p, tpot)
        rest = tpot - measured if tpot is not None else None
        if rest is not None and rest < 0:
            notes.append(f"the measured parts exceed the TPOT by {-rest:.1f} ms (stand-ins, or the micro "
                         "figures overstate)")
        rows.append(BudgetRow(m=m, tpot_ms=tpot, tok_s=tok,
                              allreduce_ms=None if ar is None else round(ar, 4),
                              int4_gemm_ms=None if int4 is None else round(int4, 4),
                              bf16_gemm_ms=None if bf16 is None else round(bf16, 4),
                              rest_ms=None if rest is None else round(rest, 4), notes=notes))
    at, level = _verdict_row(rows)
    link = _link(state)
    assumptions = _assumptions(mine, ar_count, layers, link, fused)
    bound, verdict = _verdict(at, level, ar_count, hidden, link, stand_ins, bool(moe))
    return DecodeBudget(t, rows=rows, bound=bound, plateau_m=at.m if at else None,  # type: ignore[arg-type]
                        plateau_tok_s=at.tok_s if at else None, level=level, verdict=verdict,
                        assumptions=assumptions, stand_ins=sorted(stand_ins), link=link, missing=missing,
                        model=mine.model)


def _verdict_row(rows: list[BudgetRow]) -> tuple[BudgetRow | None, str]:
    """The row the verdict is about and its word: the sweep's knee, else its highest level measured."""
    scored = {r.m: r for r in rows if r.tok_s is not None and r.tpot_ms is not None}
    found = verdict_level((m, r.tok_s or 0.0) for m, r in scored.items())
    return (None, "") if found is None else (scored[found[0]], found[1])


def _link(state: SessionState) -> str:
    topo = state.topology
    if topo is None:
        return ""
    limit = f", {topo.link_gbps:g} GB/s per direction" if topo.link_gbps else ""
    sim = " (modelled: the simulated host)" if topo.simulated else f" ({topo.source})" if topo.source else ""
    return f"{topo.link_kind or 'link unknown'}{limit}{sim}"


def _assumptions(got: Measured, ar_count: int, layers: int, link: str, fused: str | None) -> list[str]:
    out = [f"GEMM shapes: {got.model}, as the micro plan gave them"] if got.model else []
    out += [f"TPOT ({TPOT_STATISTIC} of the level's requests) at concurrency M is one decode step of a batch of M "
           "(closed loop; the first token, prefill, is not in TPOT)"]
    if ar_count:
        out.append(f"{ar_count} all-reduces per step ({ALLREDUCES_PER_LAYER} per layer x {layers} layers); the "
                   "embedding all-reduce and the logits gather are not counted")
    out.append("GEMMs: each per-GPU shape at M tokens x its calls per token over the layers, lm_head once")
    if fused:
        out.append(f"routed experts: the fused MoE row ({fused}): the experts M tokens touch, both weights")
    if link:
        out.append(f"link limit: {link}")
    if any(r.simulated for r in got.gemm) or any(r.simulated for r in got.allreduce):
        out.append("micro figures are modelled (the simulated host), not measured")
    return out


def _pct(part: float | None, total: float | None) -> str:
    s = _share(part, total)
    return "n/a" if s is None else f"{s:.0%}"


def _verdict(row: BudgetRow | None, level: str, ar_count: int, hidden: int, link: str,
             stand_ins: set[str], moe: bool = True) -> tuple[str, str]:
    if row is None or row.tpot_ms is None:
        return "", "no verdict: no macro level with both a throughput and a TPOT"
    parts = {"allreduce": row.allreduce_ms, "gemm": row.gemm_ms, "rest": row.rest_ms}
    known = {k: v for k, v in parts.items() if v is not None}
    if "gemm" not in known or (ar_count and "allreduce" not in known):
        return "", no_verdict_words(row, level)
    bound = max(known, key=lambda k: known[k] or 0.0)
    t = row.tpot_ms
    size = f" at {row.m * hidden * 2 / 1e6:.2f} MB" if hidden else ""
    ar_words = ("no all-reduce (TP=1)" if not ar_count else
                f"all-reduce {row.allreduce_ms:.1f} ms ({_pct(row.allreduce_ms, t)}: {ar_count} x "
                f"{(row.allreduce_ms or 0.0) / ar_count * 1000:.0f} us{size}"
                + (f", over {link}" if link else "") + ")")
    kernel = "Marlin" if not any(s.startswith("moe") for s in stand_ins) else "a stand-in for Marlin"
    steady = row.m / t * 1000.0
    int4 = row.int4_gemm_ms is not None and row.int4_gemm_ms > 0
    which = "routed experts" if moe else "GEMMs"
    split = (f"; the INT4 {which} on {kernel} {row.int4_gemm_ms or 0.0:.1f} ms, the bf16 GEMMs "
             f"{row.bf16_gemm_ms or 0.0:.1f} ms" if int4 else "")
    text = (f"At the {level} ({row.tok_s:.0f} tok/s measured at concurrency {row.m}; {row.m} / TPOT = "
            f"{steady:.0f} tok/s while decoding) a decode step takes {t:.1f} ms: "
            f"GEMMs {row.gemm_ms:.1f} ms ({_pct(row.gemm_ms, t)}{split}), {ar_words}, "
            f"the rest {row.rest_ms:.1f} ms ({_pct(row.rest_ms, t)}). Throughput is bound by {BOUND_WORDS[bound]}")
    if bound == "gemm" and int4:
        heavy = (("the Marlin MoE GEMMs" if moe else "the INT4 GEMMs") if (row.int4_gemm_ms or 0) >=
                 (row.bf16_gemm_ms or 0) else "the bf16 GEMMs")
        text += f", mostly {heavy}"
    text += "."
    if ar_count and bound != "allreduce":
        text += f" The all-reduce is not the bound: {_pct(row.allreduce_ms, t)} of the step."
    if stand_ins:
        text += " Stand-ins: " + "; ".join(sorted(stand_ins)) + "."
    if budget_impossible(row):
        text += " " + impossible_words(row)
    return bound, text


async def analysis_phase(publish: Publish, state: SessionState) -> DecodeBudget:
    """Where a decode step's time goes, from what the fold holds (a pure function of it), published."""
    publish(PhaseStart(now(), phase="analysis", title="where a decode step's time goes"))
    budget = decode_budget(state, now())
    publish(budget)
    for line in budget.missing:
        publish(LogLine(now(), level="warning", source="analysis", message=line))
    ok = bool(budget.bound)
    publish(PhaseEnd(now(), phase="analysis", ok=ok,
                     note=f"bound by {budget.bound}" if ok else "no verdict: " + ("; ".join(budget.missing)
                                                                                   or "nothing to compare")))
    return budget
