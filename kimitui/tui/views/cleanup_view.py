"""The cleanup panel (the escalation as it happens, live or replayed): the plan, each step's status and
elapsed time (counting while it runs), the signals sent and their outcomes, the GPU memory of the GPUs in
scope since the plan (falling as holders die), and the verification's verdict. Renders state only."""

from __future__ import annotations

import re

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kimitui.core.describe import signal_status
from kimitui.core.state import CleanupState, PhaseSpan, SessionState, StepState
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.views.base import ViewContext
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row

STATUS_COLORS = {"done": "success", "failed": "error", "declined": "warning", "skipped": "muted",
                 "running": "accent", "confirmed": "primary", "previewed": "primary", "pending": "muted"}


def signals_summary(step: StepState) -> str:
    """'SIGTERM x9 (7 exited, 2 survived)'."""
    if not step.signals:
        return "-"
    by_signal: dict[str, int] = {}
    for r in step.signals:
        by_signal[r.sent.signal] = by_signal.get(r.sent.signal, 0) + 1
    sent = ", ".join(f"{name} x{n}" for name, n in by_signal.items())
    outcomes: dict[str, int] = {}
    for o in step.outcomes:
        outcomes[o.outcome] = outcomes.get(o.outcome, 0) + 1
    refused = sum(1 for r in step.signals if r.sent.outcome != "sent")
    detail = [f"{n} {name}" for name, n in outcomes.items()]
    if refused:
        detail.append(f"{refused} not sent")
    return sent + (f" ({', '.join(detail)})" if detail else "")


MEM_SINCE_S = 3.0
"""The memory panel starts this long before the plan: the level the GPUs were at."""
SIGNAL_LINES = 12


def step_elapsed(step: StepState, now: float) -> str:
    """The step's one duration (the fold's ``StepState.elapsed_s``), counting while it runs."""
    if step.elapsed_s is not None:
        return fmt.num(step.elapsed_s, "{:.2f}", " s")
    if step.status in ("confirmed", "running") and step.started is not None:
        return fmt.num(max(now - step.started, 0.0), "{:.1f}", " s…")
    return fmt.DASH


def step_cells(step: StepState, colors: Colors, cleanup: CleanupState | None = None, now: float = 0.0) -> list[Cell]:
    status = step.status
    color = getattr(colors, STATUS_COLORS.get(status, "foreground"))
    preview = step.preview
    ticked = str(len(step.consent.pids)) if step.consent is not None and step.consent.accepted else \
        "0" if step.consent is not None else "?"
    return [
        Text(step.step, style="bold"),
        Text(status, style=color),
        Text(step_elapsed(step, now), justify="right"),
        Text(f"{ticked} of {len(preview.targets)}" if preview else "-", justify="right"),
        Text(str(len(preview.spared)) if preview else "-", justify="right"),
        Text(signals_summary(step), no_wrap=True),
    ]


OLD_PLURAL = re.compile(r"^1 (process|holder)(?:es|e|s) ended")
"""A kill step's result for one process as runs recorded before its plural was fixed wrote it ('1 processe
ended', '1 processes ended')."""


def step_note(step: StepState) -> str:
    """The step's note: its result's reason, or what its preview would do."""
    preview = step.preview
    note = fmt.printable(step.reason or (preview.action if preview else ""))
    return OLD_PLURAL.sub(r"1 \1 ended", note)


def notes_rows(cleanup: CleanupState | None, with_signals: bool) -> tuple[tuple[str, str], ...]:
    """(step, note) for each step with one; WITH_SIGNALS: the signals' summary first (the table has no room
    for its column)."""
    rows = []
    for name, step in (cleanup.steps.items() if cleanup is not None else ()):
        parts = [signals_summary(step)] if with_signals and step.signals else []
        if note := step_note(step):
            parts.append(note)
        if parts:
            rows.append((name, "; ".join(parts)))
    return tuple(rows)


def notes_table(rows: tuple[tuple[str, str], ...], colors: Colors) -> Table:
    """Each step's note beside its name, wrapped at words under itself (never cut)."""
    grid = Table.grid(padding=(0, 2), pad_edge=False)  # the note under the table's Status
    grid.add_column(width=8, no_wrap=True, style="bold")
    grid.add_column(ratio=1, overflow="fold", style=colors.foreground)
    for name, note in rows:
        grid.add_row(name, note)
    return grid


def plan_content(cleanup: CleanupState | None) -> Content:
    if cleanup is None:
        return Content.assemble(("no cleanup in this run yet", "$text-muted"),
                                ("   live: F frees the GPUs, each step previewed and asked", "$text-muted"))
    plan = cleanup.plan
    return Content.assemble(
        ("plan ", "$text-muted"), (fmt.printable(plan.service or "GPUs"), "bold"),
        (" via ", "$text-muted"), fmt.printable(plan.manager or "-"),
        (" on GPUs ", "$text-muted"), fmt.gpu_list(plan.gpus),
        (" clean below ", "$text-muted"), f"{fmt.mib(plan.clean_threshold_mib)} MiB",
        (fmt.printable(f"  (cleanup {cleanup.plan.host or ''})"), "$text-muted") if cleanup.plan.host else "",
    )


def verdict_content(cleanup: CleanupState | None) -> Content:
    if cleanup is None or cleanup.verification is None:
        return Content.assemble(("verification: ", "$text-muted"), ("not yet", "$text-muted"))
    v = cleanup.verification
    verdict = ("CLEAN", "bold reverse $success") if v.clean else ("NOT CLEAN", "bold reverse $error")
    parts: list[str | tuple[str, str]] = [("verification: ", "$text-muted"), verdict,
                                          f"  after {v.elapsed_s:.2f} s"]
    if v.detail:
        parts.append(fmt.printable(f"  {v.detail}"))
    for g in v.gpus:
        mark = ("ok", "$success") if g.clean else ("HELD", "bold $error")
        parts += [f"\n  GPU {g.index}: {fmt.mib(g.used_mib)} MiB (baseline {fmt.mib(g.baseline_mib)} MiB) ",
                  mark]
        if g.holders:
            parts.append(f" holders {', '.join(map(str, g.holders))}")
    for h in v.holders_left:
        command = fmt.shorten(fmt.command_gist(h.cmdline), 40)
        parts.append(("\n" + fmt.printable(f"  left: pid {h.pid} {h.user or '-'} {command}: {h.reason}"), "$warning"))
    return Content.assemble(*parts)


def last_cleanup_span(state: SessionState) -> PhaseSpan | None:
    """The latest cleanup phase of the run (not kimitui.phases.transition.cleanup_phase, which runs one)."""
    for span in reversed(state.phases):
        if span.phase == "cleanup":
            return span
    return None


def phase_content(state: SessionState) -> Content:
    """How the cleanup phase ended (its note holds last consent -> clean), or that it runs."""
    span = last_cleanup_span(state)
    if span is None or state.cleanup is None or span.start > state.cleanup.plan.t:
        return Content("")
    if span.end is None:
        return Content.assemble(("cleanup running", "bold $accent"),
                                (f"  {fmt.num(state.clock - span.start, '{:.1f}', ' s')}", "$text-muted"),
                                ("   x cancels (the step in hand finishes, the rest is declined)", "$text-muted"))
    style = "bold $success" if span.ok else "bold $error"
    return Content.assemble(("cleanup ended: ", "$text-muted"),
                            (fmt.printable(span.note or ("ok" if span.ok else "not ok")), style),
                            (f"  ({span.end - span.start:.2f} s)", "$text-muted"))


def memory_content(state: SessionState, width: int) -> Content:
    """Per GPU in scope: its used memory since just before the plan, as a sparkline (a low line is
    empty), and now: green when within the clean threshold."""
    cleanup = state.cleanup
    if cleanup is None:
        return Content("")
    since = cleanup.plan.t - MEM_SINCE_S
    threshold = cleanup.plan.clean_threshold_mib
    spark_w = max(width - 11, 6)
    parts: list[str | tuple[str, str]] = [("GPU memory since the plan (MiB)", "$text-muted")]
    gpus = cleanup.plan.gpus or sorted(state.gpus)
    times = [t for t, _ in state.mem_history.get(gpus[0], ()) if t >= since] if gpus else []
    marks = fmt.phase_marks(times, [(p.start, p.phase) for p in state.phases], spark_w)
    if marks:
        parts += ["\n", ("ph ", "$text-muted"), (marks, "bold $accent")]
    for index in gpus:
        points = [used for t, used in state.mem_history.get(index, ()) if t >= since]
        gpu = state.gpus.get(index)
        total = gpu.mem_total_mib if gpu is not None and gpu.mem_total_mib else max(fmt.readings(points), default=0.0)
        last = points[-1] if points else None
        spark = fmt.sparkline(points, total or 0.0, spark_w)
        data = min(len(points), spark_w)
        pad, drawn = spark[: spark_w - data], spark[spark_w - data:].replace(" ", "▁")
        style = "$text-muted" if last is None else "$success" if last <= threshold else "$warning"
        parts += ["\n", (f"{index:>2} ", "$text-muted"), pad, (drawn, "$primary"),
                  (f" {fmt.mib(last):>7}", style)]
    return Content.assemble(*parts)


def signals_content(cleanup: CleanupState | None) -> Content:
    """Each signal sent (or refused) with its outcome: 'process  SIGTERM  pid 4242  exited after 0.04 s'."""
    if cleanup is None:
        return Content("")
    rows: list[tuple[str, str, str]] = []
    for step in cleanup.steps.values():
        for r in step.signals:
            s, o = r.sent, r.outcome
            style = ("$warning" if s.outcome != "sent" else "$accent" if o is None else "$success"
                     if o.outcome == "exited" else "$warning" if o.outcome == "survived" else "$error")
            rows.append((f"{step.step:<9}{s.signal:<8}pid {s.pid:<8}", signal_status(r), style))
    if not rows:
        return Content.assemble(("signals: none sent yet", "$text-muted"))
    parts: list[str | tuple[str, str]] = [(f"signals ({len(rows)})", "$text-muted")]
    if len(rows) > SIGNAL_LINES:
        parts.append((f", the last {SIGNAL_LINES}", "$text-muted"))
        rows = rows[-SIGNAL_LINES:]
    for head, what, style in rows:
        parts += ["\n  ", head, (what, style)]
    return Content.assemble(*parts)


class StepTable(KeyedTable):
    COLUMNS = (
        ("step", "Step", 8), ("status", "Status", 9), ("elapsed", "Elapsed", 8), ("ticked", "Ticked", 8),
        ("spared", "Spared", 6), ("signals", "Signals", None),
    )
    """Each step's note is below the table (#cleanup-notes), wrapped: a column would cut it."""

    def show(self, cleanup: CleanupState | None, colors: Colors, now: float = 0.0) -> None:
        rows: list[Row] = []
        if cleanup is not None:
            rows = [(name, step_cells(step, colors, cleanup, now)) for name, step in cleanup.steps.items()]
        self.sync(rows)

    def fits_signals(self, width: int) -> bool:
        """Whether every signals summary fits whole in WIDTH cells beside the other columns; if not the column is
        left out (the notes say them)."""
        fixed = sum(2 + (w or 0) for _, _, w in self.COLUMNS)
        widest = max([len("Signals"), *(len(t) for t in self.column_texts("signals"))])
        fits = fixed + widest <= width
        self.set_column_hidden("signals", not fits)
        return fits


class CleanupView(VerticalScroll):
    MEMORY_WIDTH = 32
    """The memory panel's content width (#cleanup-memory: 34 wide, less its padding and border)."""

    def compose(self) -> ComposeResult:
        yield Static(id="cleanup-plan")
        yield StepTable(id="step-table")
        yield Static(id="cleanup-notes")
        with Horizontal(id="cleanup-lower"):
            with Vertical(id="cleanup-left"):
                yield Static(id="cleanup-phase")
                yield Static(id="cleanup-verdict")
                yield Static(id="cleanup-signals")
            yield Static(id="cleanup-memory")

    def on_mount(self) -> None:
        self._shown: dict[str, Content] = {}
        self._notes: tuple[object, ...] | None = None
        self._last: tuple[SessionState, Colors] | None = None

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)

    @property
    def notes(self) -> dict[str, str]:
        """Each step's note as shown below the table (the signals' summary first when their column is left out)."""
        return dict(self._notes[0]) if self._notes else {}  # type: ignore[call-overload]

    def _update(self, widget_id: str, content: Content) -> None:
        """Update a Static only when its content changed (an update repaints and may lay out)."""
        if self._shown.get(widget_id) != content:
            self._shown[widget_id] = content
            self.query_one(f"#{widget_id}", Static).update(content)

    def draw(self, ctx: ViewContext) -> None:
        self.show(ctx.state, ctx.colors)

    def show(self, state: SessionState, colors: Colors) -> None:
        cleanup = state.cleanup
        self._update("cleanup-plan", plan_content(cleanup))
        self._last = (state, colors)
        table = self.query_one(StepTable)
        table.show(cleanup, colors, state.clock)
        room = (self.size.width or self.app.size.width) - 2  # a scrollbar's room
        rows = notes_rows(cleanup, with_signals=not table.fits_signals(room))
        if (rows, colors) != self._notes:
            self._notes = (rows, colors)
            self.query_one("#cleanup-notes", Static).update(notes_table(rows, colors))
        self._update("cleanup-phase", phase_content(state))
        self._update("cleanup-verdict", verdict_content(cleanup))
        self._update("cleanup-signals", signals_content(cleanup))
        self._update("cleanup-memory", memory_content(state, self.MEMORY_WIDTH))
