"""The head of the Benchmarks tab: the single-stream headline on its own, and the sweep panel (what ran
or runs, progress per level and overall). Both are drawn from the fold alone (``state.sweep``), so a
replay of a recorded sweep shows what the live run showed."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from textual.app import ComposeResult, RenderResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.renderables.bar import Bar as BarRenderable
from textual.widget import Widget
from textual.widgets import Digits, Label, Static

from kimitui.core.describe import single_stream_words
from kimitui.core.events import MacroPoint, MacroVerdict, first_error, level_failed
from kimitui.core.figures import SingleStream, single_stream
from kimitui.core.state import SessionState, Sweep
from kimitui.tui import fmt

TAB_LABEL = "Benchmarks"


class FractionFill(Widget):
    """The bar of a FractionBar: Textual's bar renderable (ProgressBar's look), filled to the fraction."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"fraction-fill--bar", "fraction-fill--complete"}
    DEFAULT_CSS = """
    FractionFill { width: 1fr; height: 1; }
    FractionFill > .fraction-fill--bar { color: $primary; background: $surface; }
    FractionFill > .fraction-fill--complete { color: $success; background: $surface; }
    """

    fraction: reactive[float] = reactive(0.0)

    def render(self) -> RenderResult:
        width = self.size.width
        # to the half cell the bar can show (a smaller step would repaint the same bar)
        filled = int(self.fraction * width * 2) / 2 if width else 0.0
        style = self.get_component_rich_style("fraction-fill--bar" if self.fraction < 1 else "fraction-fill--complete")
        return BarRenderable(highlight_range=(0, filled), highlight_style=Style.from_color(style.color),
                             background_style=Style.from_color(style.bgcolor))


class FractionBar(Horizontal):
    """Progress drawn from the fold: a bar and its percentage, as ProgressBar draws them, repainted only
    when fed (ProgressBar also refreshes its ETA once a second, shown or not)."""

    DEFAULT_CSS = """
    FractionBar { width: 1fr; height: 1; }
    FractionBar > Label { width: 5; content-align-horizontal: right; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.total = 1.0
        self.progress = 0.0

    @property
    def percentage(self) -> float:
        """The fraction done, 0 to 1 (a total of 0 is done)."""
        return min(max(self.progress / self.total, 0.0), 1.0) if self.total else 1.0

    def compose(self) -> ComposeResult:
        yield FractionFill()
        yield Label("0%")

    def update(self, *, total: float, progress: float) -> None:
        self.total, self.progress = total, progress
        fraction = self.percentage
        self.query_one(FractionFill).fraction = fraction
        self.query_one(Label).update(f"{round(fraction * 100)}%")


def headline_text(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def single_stream_to_come(sweep: Sweep | None) -> str | None:
    """While a sweep whose levels include concurrency 1 runs and has no point for it yet: that it is measured now
    or still to come (not that the sweep has no such level); None otherwise."""
    if sweep is None or not sweep.active or 1 not in sweep.levels:
        return None
    p = sweep.progress
    running = p is None or not p.stage or p.concurrency == 1
    return "measuring (c=1 running)" if running else "not measured yet (c=1 to run)"


Part = str | tuple[str, str]
GAP = "   "


def single_stream_content(points: list[MacroPoint], verdict: MacroVerdict | None = None,
                          to_come: str | None = None, width: int | None = None) -> Content:
    """The headline, the peak and where, the number of points (a failed level has neither), and the sweep's
    verdict once it has one: the knee and the highest concurrency meeting the SLOs at p99. TO_COME
    (``single_stream_to_come``) says why there is no headline yet while the sweep runs. One line; in WIDTH
    cells, as many lines as it takes, broken between those parts only, never cut."""
    ok = [p for p in points if not level_failed(p)]
    single = single_stream(points)
    peak = max(ok, key=lambda p: p.result.output_throughput or 0.0, default=None)
    style = "bold $accent" if single.tok_s is not None else "bold $error" if single.state == "failed" else "$text-muted"
    words = to_come if to_come is not None and single.state == "not run" else single_stream_words(single)
    groups: list[list[Part]] = [[("single stream ", "$text-muted"), (words, style)]]
    peak_tok = peak.result.output_throughput if peak is not None else None
    if peak is not None and peak_tok:
        groups.append([("peak ", "$text-muted"), (f"{peak_tok:.0f} tok/s", "bold"),
                       (f" at {peak.label}", "$text-muted")])
    groups.append([("points ", "$text-muted"), str(len(points))])
    if verdict is not None:
        groups += verdict_groups(verdict)
    points_at = 2 if peak_tok else 1
    if width is not None and "\n" in pack(groups, width):  # narrow: the status line says the levels run
        groups = [g for i, g in enumerate(groups) if i != points_at]
        if "\n" in pack(groups, width) and single.tok_s is not None:
            groups = groups[1:]  # the headline box beside says the single stream's figure
    return Content.assemble(*pack(groups, width))


def pack(groups: list[list[Part]], width: int | None) -> list[Part]:
    """The groups on one line, GAP apart; in WIDTH cells, a new line where the next group would not fit."""
    out: list[Part] = []
    used = 0
    for group in groups:
        size = sum(len(p if isinstance(p, str) else p[0]) for p in group)
        if out:
            if width is not None and used + len(GAP) + size > width:
                out.append("\n")
                used = 0
            else:
                out.append(GAP)
                used += len(GAP)
        out += group
        used += size
    return out


def verdict_groups(v: MacroVerdict) -> list[list[Part]]:
    """``knee c=128 (1536 tok/s)``, ``SLOs ttft:200,tpot:50 met up to c=16`` (what the sweep's verdict says)."""
    groups: list[list[Part]] = []
    if v.knee_concurrency is not None:
        groups.append([("knee ", "$text-muted"), (v.label(v.knee_concurrency), "bold"),
                       (f" ({fmt.num(v.knee_tok_s, '{:.0f}', ' tok/s')})", "$text-muted")])
    if v.slo:
        slos = ",".join(f"{k}:{x:g}" for k, x in v.slo.items())
        met = ((v.label(v.slo_concurrency), "bold") if v.slo_concurrency is not None
               else ("no level", "bold $error"))
        groups.append([(f"SLOs {slos} p99 met up to ", "$text-muted"), met])
    return groups


def failures_text(sweep: Sweep) -> str:
    """'c=1: 4 of 4 requests failed: HTTP 503: model loading; c=4: ...' for the sweep's failed levels."""
    parts = []
    for p in sweep.failed_levels:
        error = first_error(p)
        parts.append(f"{p.label}: {p.result.failed} of {p.result.num_prompts} requests failed"
                     + (f": {error}" if error else ""))
    return fmt.printable("; ".join(parts))


def _with_hint(parts: list[Part], hint: str, width: int | None) -> Content:
    """PARTS and the key's hint after them, where the line has room for it (the footer says the key too)."""
    shown = Content.assemble(*parts)
    if width is None or shown.cell_length + len(hint) <= width:
        return Content.assemble(*parts, (hint, "$text-muted"))
    return shown


def sweep_status(sweep: Sweep | None, live: bool, width: int | None = None) -> Content:
    """What the latest sweep is doing or did, in one line."""
    if sweep is None:
        if live:
            return Content.assemble(("no sweep yet: ", "$text-muted"), ("M", "bold $accent"),
                                    (" runs one against the server", "$text-muted"))
        return Content.assemble(("no macro sweep in this run", "$text-muted"))
    status = sweep.status
    p = sweep.progress
    points = sweep.point_list
    failed = sweep.failed_levels
    parts: list[str | tuple[str, str]]
    if status == "failed":  # the fold's judgement: it could not run, or every level of it failed
        if sweep.failure is not None:
            plural = "s" if len(points) > 1 else ""
            return Content.assemble(("failed: ", "bold $error"),
                                    f"every request failed at {len(points)} level{plural}: ",
                                    (failures_text(sweep), "$error"))
        return Content.assemble(("failed: ", "bold $error"),
                                fmt.printable((p.error if p is not None else "") or sweep.note))
    if p is None:  # recorded without progress events: its phase and points
        if status == "running":
            return Content.assemble(("sweep running", "bold $success"), ("  (recorded)", "$text-muted"))
        word, style = ("sweep done", "$success") if status == "done" else ("sweep stopped", "$warning")
        parts = [(word, style), (fmt.printable(f": {sweep.note}") if sweep.note else "", "$text-muted")]
        if failed:
            parts += ["  ", (f"{len(failed)} failed: {failures_text(sweep)}", "$error")]
        return Content.assemble(*parts)
    levels = len(sweep.levels)
    if status in ("done", "cancelled"):
        done = len(points)
        word, style = (("done", "bold $success") if status == "done" else ("cancelled", "bold $warning"))
        kept = " (finished levels kept)" if done else ""
        counted = f"{done} level{'' if done == 1 else 's'}"
        tail = f" after {done} of {levels} levels{kept}" if status == "cancelled" else f": {counted}"
        parts = [(word, style), f"{tail} in {p.elapsed_s:.1f} s"]
        if failed:
            parts += [", ", (f"{len(failed)} failed ({failures_text(sweep)})", "bold $error")]
        return _with_hint(parts, "   M runs another", width) if live else Content.assemble(*parts)
    state = ("cancelling", "bold $warning") if status == "cancelling" else ("running", "bold $success")
    if not p.stage:
        return Content.assemble(state, ("  asking the server for its model ...", "$text-muted"))
    parts = [state, "  ", (p.label, "bold"), (f"  level {p.level_index + 1}/{levels}", "$text-muted")]
    if p.stage == "warmup":
        parts.append(("  warm-up", "$warning"))
    else:
        total = "" if p.total is None else f"/{p.total}"
        parts += [f"  {p.done}{total}", (" req", "$text-muted"), f"  {p.in_flight}", (" in flight", "$text-muted")]
        if p.failed:
            parts += ["  ", (f"{p.failed} failed", "bold $error")]
    if failed:
        parts += ["  ", (f"{len(failed)} level{'s' if len(failed) > 1 else ''} failed", "bold $error")]
    return _with_hint(parts, "  x cancels", width)


def progress_bars(sweep: Sweep) -> tuple[float, float, float, float] | None:
    """(level total, level progress, overall total, overall progress), or None for a sweep recorded
    without progress events."""
    p = sweep.progress
    if p is None:
        return None
    levels = len(sweep.levels) or 1
    if sweep.status == "done":
        return (1.0, 1.0, float(levels), float(levels))
    if not p.stage:
        return (1.0, 0.0, float(levels), 0.0)
    level_total = float(p.total) if p.total else 1.0
    return (level_total, p.level_fraction * level_total, float(levels), p.overall_fraction * levels)


class HeadlineBox(Vertical):
    """Single-stream output tok/s, large."""

    def compose(self) -> ComposeResult:
        yield Digits("-", id="headline-digits")
        yield Static("tok/s at concurrency 1", id="headline-caption")

    def on_mount(self) -> None:
        self.border_title = "single stream"
        self._shown: tuple[str, str] | None = None

    def show(self, single: SingleStream, measuring: bool) -> None:
        text = headline_text(single.tok_s)
        if single.state == "not run":
            caption = "measuring (c=1 running)" if measuring else "tok/s at concurrency 1"
        else:
            caption = "tok/s at concurrency 1" if single.tok_s is not None else single_stream_words(single)
        if (text, caption) == self._shown:
            return
        self._shown = (text, caption)
        self.query_one(Digits).update(text)
        self.query_one("#headline-caption", Static).update(caption)


class SweepPanel(Vertical):
    """The sweep: a summary line, the status line, and (for a sweep with progress events) two progress
    bars."""

    def compose(self) -> ComposeResult:
        yield Static(id="single-stream")
        yield Static(id="sweep-status")
        with Horizontal(id="level-row", classes="progress-row"):
            yield Static("level", classes="progress-label")
            yield FractionBar(id="level-progress")
        with Horizontal(id="overall-row", classes="progress-row"):
            yield Static("overall", classes="progress-label")
            yield FractionBar(id="overall-progress")

    def on_mount(self) -> None:
        self.border_title = "macro sweep"
        self._status: Content | None = None
        self._bars: tuple[float, float, float, float] | None = None
        self._summary: tuple[list[MacroPoint], MacroVerdict | None, str | None] = ([], None, None)
        self._summary_shown: Content | None = None

    def show(self, state: SessionState, points: list[MacroPoint], live: bool) -> None:
        sweep = state.sweep
        verdict = sweep.verdict if sweep is not None else None
        self._summary = (points, verdict, single_stream_to_come(sweep))
        self._show_summary()
        self._set_status(sweep_status(sweep, live, self.query_one("#sweep-status", Static).size.width or None))
        bars = progress_bars(sweep) if sweep is not None else None
        self._show_bars(bars is not None)
        if bars is None or bars == self._bars:
            return
        self._bars = bars
        self.query_one("#level-progress", FractionBar).update(total=bars[0], progress=bars[1])
        self.query_one("#overall-progress", FractionBar).update(total=bars[2], progress=bars[3])

    def _show_summary(self) -> None:
        line = self.query_one("#single-stream", Static)
        width = line.size.width or None  # before the first layout: one line, fitted on the resize that follows
        content = single_stream_content(*self._summary, width=width)
        if content != self._summary_shown:
            self._summary_shown = content
            line.update(content)

    def on_resize(self) -> None:
        if self._summary[0] or self._summary[1] is not None or self._summary[2] is not None:
            self.call_after_refresh(self._show_summary)

    def _set_status(self, content: Content) -> None:
        if content != self._status:
            self._status = content
            self.query_one("#sweep-status", Static).update(content)

    def _show_bars(self, on: bool) -> None:
        for row in self.query(".progress-row"):
            if row.display != on:
                row.display = on


def sweep_headline(sweep: Sweep | None) -> SingleStream:
    """The sweep's single-stream headline (``figures.single_stream``)."""
    return single_stream(sweep.point_list if sweep is not None else [])


def tab_label(sweep: Sweep | None) -> str:
    """The Benchmarks tab's label: plain, or the sweep's level and the headline while it runs."""
    if sweep is None or not sweep.active:
        return TAB_LABEL
    p = sweep.progress
    levels = len(sweep.levels)
    level = f"{p.level_index + 1}/{levels}" if p is not None and p.stage else f"0/{levels}"
    single = sweep_headline(sweep).tok_s
    head = f" · 1 stream {single:.1f} tok/s" if single is not None else ""
    return f"{TAB_LABEL} ▶ {level}{head}"
