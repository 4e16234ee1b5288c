"""The cleanup panel: the plan, each step's status, elapsed time and signals, and the verdict."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kimitui.state import CleanupState, SessionState, StepState
from kimitui.tui import fmt
from kimitui.tui.keyed_table import Cell, KeyedTable, Row
from kimitui.tui.palette import Colors

STATUS_COLORS = {"done": "success", "failed": "error", "declined": "warning", "skipped": "muted",
                 "running": "accent", "confirmed": "primary", "previewed": "primary", "pending": "muted"}


def signals_summary(step: StepState) -> str:
    """'SIGTERM x9 (7 exited, 2 survived)'."""
    if not step.signals:
        return "-"
    by_signal: dict[str, int] = {}
    for s in step.signals:
        by_signal[s.signal] = by_signal.get(s.signal, 0) + 1
    sent = ", ".join(f"{name} x{n}" for name, n in by_signal.items())
    outcomes: dict[str, int] = {}
    for o in step.outcomes:
        outcomes[o.outcome] = outcomes.get(o.outcome, 0) + 1
    refused = sum(1 for s in step.signals if s.outcome != "sent")
    detail = [f"{n} {name}" for name, n in outcomes.items()]
    if refused:
        detail.append(f"{refused} not sent")
    return sent + (f" ({', '.join(detail)})" if detail else "")


def step_cells(step: StepState, colors: Colors) -> list[Cell]:
    color = getattr(colors, STATUS_COLORS.get(step.status, "foreground"))
    preview = step.preview
    return [
        Text(step.step, style="bold"),
        Text(step.status, style=color),
        Text(fmt.num(step.elapsed_s, "{:.2f}", " s"), justify="right"),
        Text(str(len(preview.targets)) if preview else "-", justify="right"),
        Text(str(len(preview.spared)) if preview else "-", justify="right"),
        Text(signals_summary(step), no_wrap=True, overflow="ellipsis"),
        Text(step.reason or (preview.action if preview else ""), no_wrap=True, overflow="ellipsis"),
    ]


def plan_content(cleanup: CleanupState | None) -> Content:
    if cleanup is None:
        return Content.assemble(("no cleanup in this run yet", "$text-muted"))
    plan = cleanup.plan
    return Content.assemble(
        ("plan ", "$text-muted"), (plan.service or "GPUs", "bold"),
        (" via ", "$text-muted"), plan.manager or "-",
        (" on GPUs ", "$text-muted"), fmt.gpu_list(plan.gpus),
        (" clean below ", "$text-muted"), fmt.mem_mib(plan.clean_threshold_mib),
        (f"  (cleanup {cleanup.plan.host or ''})", "$text-muted") if cleanup.plan.host else "",
    )


def verdict_content(cleanup: CleanupState | None) -> Content:
    if cleanup is None or cleanup.verification is None:
        return Content.assemble(("verification: ", "$text-muted"), ("not yet", "$text-muted"))
    v = cleanup.verification
    verdict = ("CLEAN", "bold reverse $success") if v.clean else ("NOT CLEAN", "bold reverse $error")
    parts: list[str | tuple[str, str]] = [("verification: ", "$text-muted"), verdict,
                                          f"  after {v.elapsed_s:.2f} s"]
    if v.detail:
        parts.append(f"  {v.detail}")
    for g in v.gpus:
        mark = ("ok", "$success") if g.clean else ("HELD", "bold $error")
        parts += [f"\n  GPU {g.index}: {fmt.mem_mib(g.used_mib)} (baseline {fmt.mem_mib(g.baseline_mib)}) ",
                  mark]
        if g.holders:
            parts.append(f" holders {', '.join(map(str, g.holders))}")
    for h in v.holders_left:
        parts.append((f"\n  left: pid {h.pid} {h.user or '-'} {fmt.shorten(h.cmdline, 60)} {h.reason}",
                      "$warning"))
    return Content.assemble(*parts)


class StepTable(KeyedTable):
    COLUMNS = (
        ("step", "Step", 16), ("status", "Status", 9), ("elapsed", "Elapsed", 8), ("targets", "Targets", 7),
        ("spared", "Spared", 6), ("signals", "Signals", 34), ("note", "Note", None),
    )

    def show(self, cleanup: CleanupState | None, colors: Colors) -> None:
        rows: list[Row] = []
        if cleanup is not None:
            rows = [(name, step_cells(step, colors)) for name, step in cleanup.steps.items()]
        self.sync(rows)


class CleanupView(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="cleanup-plan")
        yield StepTable(id="step-table")
        yield Static(id="cleanup-verdict")

    def show(self, state: SessionState, colors: Colors) -> None:
        cleanup = state.cleanup
        self.query_one("#cleanup-plan", Static).update(plan_content(cleanup))
        self.query_one(StepTable).show(cleanup, colors)
        self.query_one("#cleanup-verdict", Static).update(verdict_content(cleanup))
