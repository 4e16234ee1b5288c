"""The head of the Benchmarks tab: the single-stream headline on its own, and the sweep panel (what ran
or runs, progress per level and overall)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Digits, ProgressBar, Static

from kimitui.core.events import MacroPoint
from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.bench_runner import MacroRun, headline


class QuietProgressBar(ProgressBar):
    """A ProgressBar without its once-a-second ETA refresh (no ETA is shown): it repaints only when
    it is fed, so an idle Benchmarks tab costs nothing."""

    def set_interval(self, interval: float, callback: Any = None, **kwargs: Any) -> Timer:
        timer = super().set_interval(interval, callback, **kwargs)
        if callback == self.update:
            timer.stop()
        return timer


def headline_text(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def single_stream_content(points: list[MacroPoint]) -> Content:
    """One line: the headline, the peak and where, the number of points."""
    tok = headline(points)
    peak = max(points, key=lambda p: p.metrics.get("output_throughput") or 0.0, default=None)
    parts: list[str | tuple[str, str]] = [("single stream ", "$text-muted"),
                                          (fmt.num(tok, "{:.1f}", " tok/s"), "bold $accent")]
    peak_tok = peak.metrics.get("output_throughput") if peak is not None else None
    if peak is not None and peak_tok:
        parts += [("   peak ", "$text-muted"), (f"{peak_tok:.0f} tok/s", "bold"),
                  (f" at c={peak.concurrency}", "$text-muted")]
    parts += [("   points ", "$text-muted"), str(len(points))]
    return Content.assemble(*parts)


def run_status(run: MacroRun) -> Content:
    """What the sweep started here is doing, in one line."""
    p = run.progress
    levels = len(run.levels)
    if run.status == "failed":
        return Content.assemble(("failed: ", "bold $error"), run.error or "")
    if run.status in ("done", "cancelled"):
        done = run.finished_levels
        word, style = (("done", "bold $success") if run.status == "done"
                       else ("cancelled", "bold $warning"))
        kept = " (finished levels kept)" if done else ""
        tail = f" after {done} of {levels} levels{kept}" if run.status == "cancelled" else f": {done} levels"
        return Content.assemble((word, style), f"{tail} in {run.elapsed_s:.1f} s",
                                ("   M runs another", "$text-muted"))
    state = ("cancelling", "bold $warning") if run.status == "cancelling" else ("running", "bold $success")
    if p is None:
        return Content.assemble(state, ("  asking the server for its model ...", "$text-muted"))
    parts: list[str | tuple[str, str]] = [state, "  ", (f"c={p.concurrency}", "bold"),
                                          (f"  level {p.level_index + 1}/{p.levels}", "$text-muted")]
    if p.stage == "warmup":
        parts.append(("  warm-up", "$warning"))
    else:
        total = "" if p.total is None else f"/{p.total}"
        parts += [f"  {p.done}{total}", (" req", "$text-muted"), f"  {p.in_flight}", (" in flight", "$text-muted")]
        if p.failed:
            parts += ["  ", (f"{p.failed} failed", "bold $error")]
    parts += [("  x cancels", "$text-muted")]
    return Content.assemble(*parts)


def recorded_status(state: SessionState, live: bool) -> Content:
    """No sweep started here: the last recorded macro phase, or how to start one."""
    span = next((s for s in reversed(state.phases) if s.phase == "macro"), None)
    if span is not None and span.end is None:
        return Content.assemble(("sweep running", "bold $success"), ("  (recorded)", "$text-muted"))
    if span is not None:
        word, style = ("sweep done", "$success") if span.ok else ("sweep stopped", "$warning")
        return Content.assemble((word, style), (f": {span.note}" if span.note else "", "$text-muted"))
    if live:
        return Content.assemble(("no sweep yet: ", "$text-muted"), ("M", "bold $accent"),
                                (" runs one against the server", "$text-muted"))
    return Content.assemble(("no macro sweep in this run", "$text-muted"))


class HeadlineBox(Vertical):
    """Single-stream output tok/s, large."""

    def compose(self) -> ComposeResult:
        yield Digits("-", id="headline-digits")
        yield Static("tok/s at concurrency 1", id="headline-caption")

    def on_mount(self) -> None:
        self.border_title = "single stream"
        self._shown: tuple[str, str] | None = None

    def show(self, value: float | None, measuring: bool) -> None:
        text = headline_text(value)
        caption = "measuring (c=1 running)" if value is None and measuring else "tok/s at concurrency 1"
        if (text, caption) == self._shown:
            return
        self._shown = (text, caption)
        self.query_one(Digits).update(text)
        self.query_one("#headline-caption", Static).update(caption)


class SweepPanel(Vertical):
    """The sweep: a summary line, the status line, and (for a sweep started here) two progress bars."""

    def compose(self) -> ComposeResult:
        yield Static(id="single-stream")
        yield Static(id="sweep-status")
        with Horizontal(id="level-row", classes="progress-row"):
            yield Static("level", classes="progress-label")
            yield QuietProgressBar(total=1, show_eta=False, id="level-progress")
        with Horizontal(id="overall-row", classes="progress-row"):
            yield Static("overall", classes="progress-label")
            yield QuietProgressBar(total=1, show_eta=False, id="overall-progress")

    def on_mount(self) -> None:
        self.border_title = "macro sweep"
        self._status: Content | None = None
        self._bars: tuple[object, ...] | None = None
        controller = getattr(self.app, "macro", None)
        if controller is not None:
            controller.panel = self

    def on_unmount(self) -> None:
        controller = getattr(self.app, "macro", None)
        if controller is not None and controller.panel is self:
            controller.panel = None
            if controller.run is not None and controller.run.active:
                controller.run.cancel.set()  # the app is going away: stop the sweep the graceful way

    def show(self, state: SessionState, points: list[MacroPoint], run: MacroRun | None, live: bool) -> None:
        self.query_one("#single-stream", Static).update(single_stream_content(points))
        if run is None:
            self._set_status(recorded_status(state, live))
            self._show_bars(False)
        else:
            self.show_run(run)

    def show_run(self, run: MacroRun | None) -> None:
        """Status and progress of the sweep started here (called ~10 times a second while it runs)."""
        if run is None:
            return
        self._set_status(run_status(run))
        self._show_bars(True)
        p = run.progress
        levels = len(run.levels)
        if run.status == "done":
            bars: tuple[float, float, float, float] = (1, 1, levels, levels)
        elif p is None:
            bars = (1, 0, levels, 0)
        else:
            level_total = float(p.total) if p.total else 1.0
            bars = (level_total, p.level_fraction * level_total, float(levels), p.overall_fraction * levels)
        if bars == self._bars:
            return
        self._bars = bars
        self.query_one("#level-progress", ProgressBar).update(total=bars[0], progress=bars[1])
        self.query_one("#overall-progress", ProgressBar).update(total=bars[2], progress=bars[3])

    def _set_status(self, content: Content) -> None:
        if content != self._status:
            self._status = content
            self.query_one("#sweep-status", Static).update(content)

    def _show_bars(self, on: bool) -> None:
        for row in self.query(".progress-row"):
            if row.display != on:
                row.display = on
