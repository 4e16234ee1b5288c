"""Runs side by side as one Markdown report (``kimitui compare RUN_A RUN_B ...``): what differs between them
first, then the change between them: the serving sweep per level with each change judged against the runs'
own spread (``core.figures.noise``), tok/s against concurrency with each run's plateau and knee, the micro
rows every run measured with their ratio, the decode-step budgets and verdicts, the cleanup and the restart,
and the hosts and settings. The first run is the baseline each other run is set against.

Every cell of a run is written as that run's own report writes it (the same functions, the same digits):
``kimitui compare`` agrees with ``kimitui report`` figure by figure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimitui.core.budget_words import budget_level, budget_verdict
from kimitui.core.describe import single_stream_words, verdict_line
from kimitui.core.events import AllReduceRow, DecodeBudget, GemmRow, MacroPoint, level_failed
from kimitui.core.figures import NOISE_RULE, change_pct, knee, level_tok_s, noise, plateau, single_stream
from kimitui.core.level_result import pword
from kimitui.core.micro_words import gemm_words
from kimitui.core.printable import printable
from kimitui.core.runfile import RunReader
from kimitui.core.state import SessionState
from kimitui.report.budget_text import BUDGET_HEAD, budget_cells
from kimitui.report.compare_facts import UP_FRONT, RunFacts, differing, run_facts
from kimitui.report.format import document, fmt_bytes, fmt_num, table
from kimitui.report.markdown import RunDigest, digest

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
PLOT_WIDTH = 44

# (figure, metric key, digits, the per-request series that judges its noise): as the run's own macro table
MEANS = (("output tok/s", "output_throughput", ".1f", "tpot"), ("TTFT mean", "mean_ttft_ms", ".1f", "ttft"),
         ("TPOT mean", "mean_tpot_ms", ".1f", "tpot"), ("ITL mean", "mean_itl_ms", ".1f", "tpot"),
         ("E2EL mean", "mean_e2el_ms", ".0f", "tpot"))
REASONING_MEAN = ("TTFO mean", "mean_ttfo_ms", ".1f", "ttfo")
"""A reasoning model's time to its first output token, shown where a run's levels thought first."""


@dataclass(slots=True)
class Run:
    label: str
    digest: RunDigest
    facts: RunFacts
    budget: DecodeBudget | None
    budget_computed: bool

    @property
    def state(self) -> SessionState:
        return self.digest.state

    @property
    def name(self) -> str:
        return self.digest.reader.path.name


def load_runs(readers: list[RunReader]) -> list[Run]:
    runs = []
    for label, reader in zip(LABELS, readers, strict=False):
        d = digest(reader)
        budget, computed = d.state.budget, False
        if budget is None and d.state.macro_by_level and d.state.gemm:  # as the run's own report computes it
            from kimitui.phases.analysis import decode_budget

            budget, computed = decode_budget(d.state), True
        runs.append(Run(label, d, run_facts(label, d), budget, computed))
    return runs


# -- the change between two figures -------------------------------------------------------------------------


def change_cell(before: float | None, after: float | None, judged: str) -> str:
    pct = change_pct(before, after)
    if pct is None:
        return "n/a"
    text = f"{pct:+.1f}%"
    return f"**{text}** {judged}" if judged == "beyond noise" else f"{text} {judged}"


def _series(run: Run, c: int, key: str) -> list[float]:
    level = run.state.macro_requests.get(c)
    if level is None:
        return []
    return level.ttft_ms if key == "ttft" else level.ttfo_ms if key == "ttfo" else level.tpot_ms


def _common_levels(runs: list[Run]) -> list[int]:
    sets = [set(r.state.macro_by_level) for r in runs]
    return sorted(set.intersection(*sets)) if sets else []


def _percentiles(points: list[MacroPoint]) -> list[str]:
    """The percentiles every level of every run reports, as their keys spell them (p90, p99, p99.9)."""
    out: set[str] | None = None
    for p in points:
        have = {"p" + pword(v) for v in p.result.percentiles}
        out = have if out is None else out & have
    return sorted(out or (), key=lambda k: float(k[1:]))


def _level_rows(runs: list[Run], levels: list[int], figures: list[tuple[str, str, str, str]]) -> list[list[str]]:
    base = runs[0]
    rows = []
    for c in levels:
        points = [r.state.macro_by_level[c] for r in runs]
        for name, key, digits, series in figures:
            cells = [("FAILED" if level_failed(p) else fmt_num(p.result.figure(key), digits)) for p in points]
            changes = []
            for run, p in zip(runs[1:], points[1:], strict=True):
                if level_failed(p) or level_failed(points[0]):
                    changes.append("n/a")
                    continue
                judged = noise(_series(base, c, series), _series(run, c, series))
                changes.append(change_cell(points[0].result.figure(key), p.result.figure(key), judged))
            rows.append([str(c), name, *cells, *changes])
    return rows


def macro_compare(runs: list[Run]) -> list[str]:
    lines = ["## Serving sweep: the change per level", ""]
    levels = _common_levels(runs)
    if not levels:
        return [*lines, "No concurrency level that every run measured."]
    others = [f"{r.label} vs {runs[0].label}" for r in runs[1:]]
    head = ["concurrency", "figure", *[r.label for r in runs], *others]
    # a reasoning model in any run: its first output token beside TTFT (judged by the TTFO records)
    thought = any(r.state.macro_by_level[c].result.reasoning for r in runs for c in levels)
    means = [*MEANS[:2], *([REASONING_MEAN] if thought else []), *MEANS[2:]]
    lines += [f"Latencies in ms, as each run's own report gives them; the change is against run {runs[0].label}; "
              f"{NOISE_RULE}.", "", *table(head, _level_rows(runs, levels, means), "ll" + "r" * (len(head) - 2))]
    pks = _percentiles([r.state.macro_by_level[c] for r in runs for c in levels])
    names = (("TTFT", "ttft"), *([("TTFO", "ttfo")] if thought else []), ("TPOT", "tpot"), ("ITL", "itl"),
             ("E2EL", "e2el"))
    figures = [(f"{name} {pk}", f"{pk}_{key}_ms", ".0f" if key == "e2el" else ".1f",
                key if key in ("ttft", "ttfo") else "tpot") for name, key in names for pk in pks]
    if figures:
        lines += ["", f"The percentiles every run reports ({', '.join(pks)}):", "",
                  *table(head, _level_rows(runs, levels, figures), "ll" + "r" * (len(head) - 2))]
    return lines + _energy_rows(runs, levels, head)


def _tok_per_joule(run: Run, c: int) -> float | None:
    sweep = next((s for s in reversed(run.state.sweeps) if c in s.points), None)
    energy = sweep.energy.get(c) if sweep is not None else None
    return energy.tokens_per_joule(sweep.points[c].result.output_throughput) if sweep and energy else None


def _energy_rows(runs: list[Run], levels: list[int], head: list[str]) -> list[str]:
    """Output tokens per joule at each level where a run recorded its GPUs' power (``core.level_energy``)."""
    values = {c: [_tok_per_joule(r, c) for r in runs] for c in levels}
    if not any(v is not None for row in values.values() for v in row):
        return []
    rows = [[str(c), "output tok/J", *[fmt_num(v, ".3g") for v in row],
             *[change_cell(row[0], v, "(one figure a level: no spread)") for v in row[1:]]]
            for c, row in values.items()]
    return ["", "Energy (the service's GPUs' power sampled during each level; n/a: not recorded):", "",
            *table(head, rows, "ll" + "r" * (len(head) - 2))]


# -- throughput against concurrency, the plateau and the knee -----------------------------------------------


def knee_of(state: SessionState) -> tuple[int | None, str]:
    """(the knee's concurrency, where it comes from): the sweep's recorded verdict, else computed."""
    sweep = state.sweep
    if sweep is not None and sweep.verdict is not None:
        return sweep.verdict.knee_concurrency, verdict_line(sweep.verdict)
    return knee(level_tok_s(state.macro_points)), "computed from the levels (no verdict recorded)"


def _plateau(run: Run) -> str:
    """Where the sweep's tok/s went flat (``core.figures.plateau``), or that it did not within the levels."""
    at = plateau(level_tok_s(run.state.macro_points))
    return "none in the sweep" if at is None else f"c={at}"


def throughput_compare(runs: list[Run]) -> list[str]:
    if not any(r.state.macro_by_level for r in runs):
        return []
    rows = []
    from kimitui.report.bench import peak_point

    for r in runs:
        points = r.state.macro_points
        if not level_tok_s(points):
            rows.append([r.label, single_stream_words(single_stream(points)), "n/a", "n/a", "n/a",
                         "no level measured tok/s"])
            continue
        peak = peak_point(points)
        at, where = knee_of(r.state)
        rows.append([r.label, single_stream_words(single_stream(points)),
                     "n/a" if peak is None else f"{fmt_num(peak.result.output_throughput, '.0f')} at "
                                                f"c={peak.concurrency}",
                     _plateau(r), "none in the sweep" if at is None else f"c={at}", where])
    lines = ["## Throughput against concurrency", "",
             *table(["run", "single stream", "peak tok/s", "plateau", "knee", "knee from"], rows, "llllll"), ""]
    scored = {r.label: dict(level_tok_s(r.state.macro_points)) for r in runs}
    top = max((v for s in scored.values() for v in s.values()), default=0.0) or 1.0
    levels = sorted({c for s in scored.values() for c in s})
    lines += ["Output tok/s against concurrency (one bar a run, scaled to the highest):", "", "```text"]
    for c in levels:
        for r in [r for r in runs if scored[r.label]]:
            v = scored[r.label].get(c)
            bar = "" if v is None else "█" * round(v / top * PLOT_WIDTH)
            lines.append(f"c={c:<5}{r.label} {bar:<{PLOT_WIDTH}} {'n/a' if v is None else f'{v:7.0f}'}")
    return [*lines, "```"]


# -- the micro rows every run measured ----------------------------------------------------------------------


def _ratio(before: float, after: float) -> str:
    return f"{after / before:.2f}x" if before > 0 else "n/a"


def _matched(runs: list[Run], rows: Callable[[SessionState], list], key: Callable) -> list[tuple[tuple, list]]:
    """(key, [each run's row]) for the keys every run has, in the first run's order (the last row of a key)."""
    by_run = [{key(row): row for row in rows(r.state)} for r in runs]
    return [(k, [m[k] for m in by_run]) for k in by_run[0] if all(k in m for m in by_run[1:])]


def gemm_key(g: GemmRow) -> tuple:
    return (g.name, g.m, g.n, g.k, g.dtype, g.backend)


def allreduce_key(a: AllReduceRow) -> tuple:
    return (a.size_bytes, a.ranks, a.dtype, a.burst, a.mode)


def micro_compare(runs: list[Run]) -> list[str]:
    gemm = _matched(runs, lambda s: s.gemm, gemm_key)
    ar = _matched(runs, lambda s: s.allreduce, allreduce_key)
    if not gemm and not ar:
        return ["## Micro rows", "", "No micro row that every run measured (same shape, M, dtype and backend)."]
    ratios = [f"{r.label} / {runs[0].label}" for r in runs[1:]]
    lines = ["## Micro rows every run measured", "",
             "The same shape, M, dtype and backend (all-reduce: size, ranks, dtype, burst, mode); times in us as each "
             f"run's own report gives them; the ratio is the time against run {runs[0].label}'s (below 1: faster).", ""]
    if gemm:
        rows = []
        for _, rs in gemm:
            w = gemm_words(rs[0])
            rows.append([w["name"], w["m"], w["nk"], w["dtype"], w["backend"], *[gemm_words(g)["time"] for g in rs],
                         *[_ratio(rs[0].time_us, g.time_us) for g in rs[1:]]])
        head = ["GEMM", "M", "N x K", "dtype", "backend", *[f"{r.label} time" for r in runs], *ratios]
        lines += ["### GEMM", "", *table(head, rows, "lrlll" + "r" * (len(head) - 5)), ""]
    if ar:
        rows = [[fmt_bytes(rs[0].size_bytes), str(rs[0].ranks), rs[0].dtype, str(rs[0].burst), rs[0].mode,
                 *[f"{a.time_us:.1f}" for a in rs], *[_ratio(rs[0].time_us, a.time_us) for a in rs[1:]]]
                for _, rs in ar]
        head = ["size", "ranks", "dtype", "burst", "mode", *[f"{r.label} time" for r in runs], *ratios]
        lines += ["### All-reduce", "", *table(head, rows, "rrlrl" + "r" * (len(head) - 5)), ""]
    return lines


# -- the budgets, the cleanup and the restart ---------------------------------------------------------------


def budget_compare(runs: list[Run]) -> list[str]:
    lines = ["## Where a decode step's time goes", ""]
    if not any(r.budget for r in runs):
        return [*lines, "No run has a decode-step budget."]
    for r in runs:
        if r.budget is None:
            lines += [f"- **{r.label}**: no budget (no analysis phase, and not both macro points and GEMM rows)."]
        else:
            computed = " (computed: the run has no analysis phase)" if r.budget_computed else ""
            lines += [f"- **{r.label}**{computed}: {budget_verdict(r.budget)}"]
    ms = sorted({row.m for r in runs if r.budget for row in r.budget.rows})
    rows = []
    for m in ms:
        for r in runs:
            row = next((x for x in r.budget.rows if x.m == m), None) if r.budget else None
            if row is not None:
                cells = budget_cells(row)
                mark = f" ({budget_level(r.budget)})" if r.budget is not None and m == r.budget.plateau_m else ""
                rows.append([cells[0] + mark, r.label, *cells[1:]])
    if rows:
        lines += ["", "ms per decode step at concurrency M (share of the TPOT), each run's rows as its own report "
                      "gives them:", "", *table([BUDGET_HEAD[0], "run", *BUDGET_HEAD[1:]], rows, "ll" + "r" * 6)]
    return lines


def _restart(state: SessionState) -> str:
    for c in reversed(state.cleanups):
        step = c.steps.get("restart")
        if step is not None and step.result is not None:
            return f"{step.status} in {step.elapsed_s or 0.0:.2f} s" + (f": {step.reason}" if step.reason else "")
    return "no restart"


def cleanup_compare(runs: list[Run]) -> list[str]:
    if not any(r.state.cleanups for r in runs):
        return []
    rows = []
    for r in runs:
        c = r.state.cleanup
        if c is None:
            rows.append([r.label, "no cleanup", "n/a", "n/a", _restart(r.state)])
            continue
        verdict = "no verification" if c.verification is None else ("CLEAN" if c.clean else "NOT CLEAN")
        fmt = lambda v: "n/a" if v is None else f"{v:.3f} s"  # noqa: E731
        rows.append([r.label, verdict, fmt(c.consent_to_clean_s), fmt(c.signal_to_clean_s), _restart(r.state)])
    return ["## Cleanup and restart", "",
            *table(["run", "verification", "last consent -> clean", "last signal -> clean", "restart (health)"],
                   rows, "lllll")]


def settings_compare(runs: list[Run]) -> list[str]:
    diff = set(differing([r.facts for r in runs]))
    keys: list[str] = []
    for r in runs:
        keys += [k for k in r.facts.facts if k not in keys]
    keys.sort(key=lambda k: (k not in diff, k not in UP_FRONT))
    rows = [[k, *[r.facts.facts.get(k, "(none)") for r in runs], "differs" if k in diff else ""] for k in keys]
    head = ["fact", *[r.label for r in runs], "differs"]
    return ["## Hosts and settings", "", *table(head, rows, "l" * len(head))]


# -- the whole report ---------------------------------------------------------------------------------------


def _head(runs: list[Run]) -> list[str]:
    from kimitui.report.markdown import fmt_time

    lines = ["# kimitui compare: " + " vs ".join(r.name for r in runs), "",
             *table(["run", "file", "host", "created", "campaign"],
                    [[r.label, r.name, r.facts.facts["host"], fmt_time(r.digest.reader.header.created),
                      r.facts.facts.get("campaign", "-")] for r in runs], "lllll"), ""]
    warned = [(r, w) for r in runs for w in r.digest.reader.warnings]
    if warned:  # a run read in part changes every figure after the cut: said before any of them
        lines += ["**Read in part** (a figure from the missing part is missing here too):", "",
                  *[f"- {r.label}: {printable(w)}" for r, w in warned], ""]
    diff = differing([r.facts for r in runs])
    front = [k for k in diff if k in UP_FRONT]
    if front:
        lines += ["**These runs differ in what they measured** (read every change below with that in mind):", "",
                  *[f"- {k}: " + "; ".join(f"{r.label} {r.facts.facts.get(k, '(none)')}" for r in runs)
                    for k in front], ""]
    rest = [k for k in diff if k not in UP_FRONT and not k.startswith("settings.")]
    settings = [k.removeprefix("settings.") for k in diff if k.startswith("settings.")]
    if len(settings) > 8:
        rest.append(f"{len(settings)} campaign settings")
    elif settings:
        rest.append("the campaign settings " + ", ".join(settings))
    if rest:
        lines += [f"Other differences: {'; '.join(rest)} (the table at the end gives them).", ""]
    if not diff:
        lines += ["The runs' hosts, GPUs, model, service and settings are the same.", ""]
    return lines


def comparable(runs: list[Run]) -> bool:
    """The runs share something to set side by side: a level, a micro row, or each a budget."""
    return bool(_common_levels(runs) or _matched(runs, lambda s: s.gemm, gemm_key)
                or _matched(runs, lambda s: s.allreduce, allreduce_key) or all(r.budget for r in runs))


def render_compare(runs: list[Run], figures: list[tuple[str, str]] | None = None) -> str:
    """The comparison as Markdown; ``figures``: (title, path) of the images written beside it, linked."""
    body = _head(runs)
    if not comparable(runs):
        body += ["Nothing to compare: these runs share no concurrency level, no micro row and no pair of "
                 "decode-step budgets.", ""]
    else:
        for section in (macro_compare(runs), throughput_compare(runs), micro_compare(runs), budget_compare(runs),
                        cleanup_compare(runs)):
            if section:
                body += [*section, ""]
    if figures:
        body += ["## Figures", "", *[f"![{title}]({path})" for title, path in figures], ""]
    body += settings_compare(runs)
    return document(body).rstrip() + "\n"
