"""The campaign on screen, from the fold only: a one-line strip under the header (each phase's state, what
comes next, the keys) and the Analysis tab (the decode-step budget as stacked bars per M, the verdict and
its assumptions, the drain and the post-restart probe)."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kimitui.core.budget_words import budget_level, budget_verdict, tpot_label
from kimitui.core.campaign_state import PHASE_TITLES, CampaignState
from kimitui.core.campaign_words import drain_words, probe_words, served_words
from kimitui.core.figures import budget_impossible
from kimitui.core.state import SessionState
from kimitui.report.budget_text import SEGMENTS, budget_lines, stacked_bar
from kimitui.tui import fmt
from kimitui.tui.views.base import ViewContext
from kimitui.tui.views.compare_overlay import (
    CompareRun,
    compare_bar,
    compare_legend,
    compare_of,
    compare_rows_only_in_b,
)

MARKS = {"done": ("✓", "$success"), "failed": ("✗", "bold $error"), "running": ("▶", "bold $accent"),
         "skipped": ("⤼", "$text-muted"), "cut off": ("✂", "$warning"), "pending": ("·", "$text-muted")}
SHORT = {"macro": "macro", "cleanup": "transition", "micro": "micro", "analysis": "analysis", "restart": "restart",
         "check": "check"}
SEGMENT_STYLES = {"allreduce": "$error", "int4": "$warning", "bf16": "$primary", "rest": "$text-muted"}


def strip_content(state: SessionState, live: bool, width: int = 120) -> Content:
    c = state.campaign
    if c is None:
        return Content("")
    content = _phases_and_where(c, state, short=False)
    if content.cell_length > width:
        # too wide for the line: the phases that are done or still to come by their letter, so what runs and
        # what comes next stay whole (the line's end would be cut at the screen's edge)
        content = _phases_and_where(c, state, short=True)
        for terse in (1, 2):  # still too wide: the pause's note, then what the pause is before
            if content.cell_length <= width:
                break
            content = _phases_and_where(c, state, short=True, terse=terse)
    if live and c.end is None:
        # the keys where they fit (the footer lists them too): a line cut at the screen's edge would cut them
        for hint in KEY_HINTS:
            if content.cell_length + len(hint) <= width:
                return Content.assemble(content, (hint, "$text-muted"))
    return content


def _phases_and_where(c: CampaignState, state: SessionState, short: bool, terse: int = 0) -> Content:
    parts: list[str | tuple[str, str]] = [(" campaign ", "bold reverse $secondary"), " "]
    for name, phase in c.phases.items():
        status = c.shown_status(name)
        mark, style = MARKS.get(status, ("?", ""))
        label = SHORT.get(name, name)
        if short and status in ("done", "pending", "skipped"):
            label = fmt.PHASE_LETTERS.get(name, name[:1].upper())
            parts += [(mark, style), (label, style if status != "pending" else "$text-muted"), " "]
            continue
        parts += [(f"{mark} ", style), (label, style if status != "pending" else "$text-muted")]
        if status == "running" and phase.start is not None:
            parts.append((f" {fmt.duration(state.clock - phase.start)}", "$text-muted"))
        parts.append(" " if short else "  ")
    parts += _where(c, state, terse)
    return Content.assemble(*parts)


KEY_HINTS = ("   P pause/go on · S skip next · A abort", "   P/S/A")
"""The strip's key hints, longest first: the first that fits is shown."""


def _where(c: CampaignState, state: SessionState, terse: int = 0) -> list[str | tuple[str, str]]:
    """What the campaign does now or next; TERSE 1 leaves out the pause's note, 2 what the pause is before."""
    if c.end is not None:
        style = "bold $success" if c.end.status == "done" else "bold $error"
        probe = state.probe
        tail = "; DRIFT after the restart" if probe is not None and probe.drift and c.end.status == "done" else ""
        return [(c.end.status.upper() if c.end.status != "done" else "done", style), (tail, "bold $warning")]
    out: list[str | tuple[str, str]] = []
    nxt = c.next_phase
    if c.aborting:
        out.append(("ABORTING", "bold $error"))
    elif c.paused:
        before = f" before {PHASE_TITLES.get(nxt.name, nxt.name)}" if nxt and terse < 2 else ""
        out += [("PAUSED", "bold $warning"), (before, "$warning"),
                (f": {c.pause_note}" if c.pause_note and not terse else "", "$warning")]
    elif nxt is not None:
        out.append((f"next: {PHASE_TITLES.get(nxt.name, nxt.name)}", "$text-muted"))
    return out


class CampaignStrip(Static):
    DEFAULT_CSS = """
    CampaignStrip { height: 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; display: none; }
    CampaignStrip.-shown { display: block; }
    """

    _last: tuple[SessionState, bool] | None = None

    def show(self, state: SessionState, live: bool) -> None:
        self._last = (state, live)
        shown = state.campaign is not None
        self.set_class(shown, "-shown")
        if shown:
            # hidden until now, the strip has no width yet: the screen's (it spans it)
            width = self.size.width or self.app.size.width or 120
            self.update(strip_content(state, live, width), layout=False)

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)


def bars_content(state: SessionState, width: int, compare: CompareRun | None = None) -> Content:
    """The budget's bars per M; with ``compare`` (replay --compare), run B's bar under each of A's."""
    budget = state.budget
    if budget is None:
        return Content.assemble(("No decode-step budget yet: Phase 3 of a campaign computes it from Phase 1's "
                                 "TPOT and Phase 2's GEMMs and all-reduces.", "$text-muted"))
    marker = f" ◀ {budget_level(budget)}"  # the verdict's level, named as the verdict names it
    bar_w = max(width - 36 - len(marker), 10)  # the label (28), " !", the marker, padding and the scrollbar
    parts: list[str | tuple[str, str]] = [(f"where a decode step's time goes, per concurrency M (tok/s, "
                                           f"{tpot_label()})", "bold $accent")]
    for r in budget.rows:
        tok = fmt.num(r.tok_s, "{:.0f}", " tok/s")
        tpot = fmt.num(r.tpot_ms, "{:.1f}", " ms")
        mark = marker if r.m == budget.plateau_m else ""
        if budget_impossible(r):
            mark = " !" + mark  # the notes under the table say which part
        parts += ["\n", (f"M={r.m:<4}", "bold"), f" {tok:>10} {tpot:>9} "]
        for key, cells in stacked_bar(r, bar_w):
            char = next(c for k, c, _ in SEGMENTS if k == key)
            parts.append((char * cells, SEGMENT_STYLES[key]))
        parts.append((mark, "bold $accent"))
        if compare is not None:
            parts += compare_bar(compare, r.m, bar_w, SEGMENT_STYLES)
    if compare is not None:
        parts += compare_rows_only_in_b(compare, {r.m for r in budget.rows}, bar_w, SEGMENT_STYLES)
    parts.append("\n")
    for key, char, what in SEGMENTS:
        parts += ["\n  ", (char * 3, SEGMENT_STYLES[key]), f" {what}"]
    if compare is not None:
        parts += ["\n  ", compare_legend(compare)]
    return Content.assemble(*parts)


def verdict_content(state: SessionState) -> Content:
    budget = state.budget
    if budget is None:
        return Content("")
    style = "bold $success" if budget.bound else "bold $warning"
    parts: list[str | tuple[str, str]] = [("Verdict: ", "bold"), (fmt.printable(budget_verdict(budget)), style)]
    if budget.assumptions:
        parts += [("\n\nAssumptions", "bold $accent")]
        parts += [f"\n  - {fmt.printable(a)}" for a in budget.assumptions]
    if budget.missing:
        parts += [("\n\nNot in the budget", "bold $warning")]
        parts += [f"\n  - {fmt.printable(m)}" for m in budget.missing]
    return Content.assemble(*parts)


def table_content(state: SessionState) -> Content:
    budget = state.budget
    if budget is None or not budget.rows:
        return Content("")
    return Content("\n".join(budget_lines(budget, 0)).rstrip())


def checks_content(state: SessionState) -> Content:
    parts: list[str | tuple[str, str]] = []
    if state.served_model is not None:
        served = state.served_model
        parts += [("Model: ", "bold"), (fmt.printable(served_words(served)),
                                         "$warning" if served.note or not served.identified else "")]
    if state.drain is not None:
        if parts:
            parts.append("\n")
        d = state.drain
        style = "$warning" if d.status in ("deadline", "unreadable", "stopped") else ""
        parts += [("Drain before the graceful stop: ", "bold"),
                  (fmt.printable(drain_words(d).removeprefix("drain: ")), style)]
    if state.probe is not None:
        p = state.probe
        if parts:
            parts.append("\n")
        parts += [("After the restart: ", "bold"),
                  (fmt.printable(probe_words(p).removeprefix("post-restart probe: ")),
                   "bold $error" if p.drift else "$success")]
    return Content.assemble(*parts)


class AnalysisView(VerticalScroll):
    DEFAULT_CSS = """
    AnalysisView { height: 1fr; }
    AnalysisView > Static { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static(id="analysis-bars")
        yield Static(id="analysis-verdict")
        yield Static(id="analysis-table")
        yield Static(id="analysis-checks")

    def draw(self, ctx: ViewContext) -> None:
        self.show(ctx.state)

    def show(self, state: SessionState) -> None:
        width = self.size.width or self.app.size.width  # 0 until the first layout
        for wid, content in (("analysis-bars", bars_content(state, width, compare_of(self.app))),
                             ("analysis-verdict", verdict_content(state)), ("analysis-table", table_content(state)),
                             ("analysis-checks", checks_content(state))):
            self.query_one(f"#{wid}", Static).update(content)
