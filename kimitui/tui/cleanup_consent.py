"""The consent modal: one step's preview, the operator ticks and confirms or declines.

Two tables: what the step would signal (ticked; untick to spare) and what it will not touch, each with
why. A spared process marked optional (a handle-only NVML monitor) can be ticked in; the others cannot.
The modal returns a ``ConsentDecision`` with exactly the ticked pids: the executor signals nothing else.
"""

from __future__ import annotations

import textwrap
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from kimitui.cleanup.consent import ConsentDecision, is_optional
from kimitui.core.events import ProcRef, StepPreview
from kimitui.tui import fmt

STEP_TITLES = {
    "graceful": "graceful stop: the service's own stop, then wait for its processes",
    "process": "process kill: what is left of the service, and every process NVML lists on the GPUs",
    "device": "device kill: the CUDA-context holders of the GPUs left",
    "reset": "GPU reset: no holder is left but the memory is not back",
    "restart": "restart the service and wait until it answers",
}
TICKED, UNTICKED, LOCKED = "[x]", "[ ]", " - "
FIXED_COLUMNS = (("tick", "", 3), ("pid", "PID", 7), ("start", "Start", 8), ("user", "User", 8),
                 ("gpus", "GPUs", 4), ("mem", "Memory", 9), ("unit", "Unit", 12))
"""Then one column of the command line over why (a row of two or three lines), as wide as what is left."""
WHY_LINES = 2


def what_lines(ref: ProcRef, width: int) -> list[str]:
    """The command line on one line, why on up to WHY_LINES more (the last one cut with an ellipsis)."""
    why = textwrap.wrap(ref.reason or "-", width) or ["-"]
    if len(why) > WHY_LINES:
        why = [*why[: WHY_LINES - 1], fmt.shorten(" ".join(why[WHY_LINES - 1:]), width)]
    return [fmt.shorten(fmt.short_command(ref.cmdline), width), *why]


def ref_cells(ref: ProcRef, tick: Text, why_style: str, width: int) -> tuple[list[str | Text], int]:
    lines = what_lines(ref, width)
    what = Text(no_wrap=True, overflow="ellipsis")
    what.append(lines[0])
    for line in lines[1:]:
        what.append("\n" + line, style=why_style)
    cells: list[str | Text] = [tick, str(ref.pid), fmt.num(ref.start_time), ref.user or "?", fmt.gpu_list(ref.gpus),
                               Text(fmt.mem_mib(ref.mem_mib), justify="right"), fmt.shorten(ref.unit or "-", 12), what]
    return cells, len(lines)


class ConsentScreen(ModalScreen[ConsentDecision]):
    DEFAULT_CSS = """
    ConsentScreen { align: center middle; }
    ConsentScreen > Vertical {
        width: 100%; max-width: 150; height: auto; max-height: 100%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    ConsentScreen #consent-title { text-style: bold; color: $warning; }
    ConsentScreen #consent-action { color: $text; margin-bottom: 1; }
    ConsentScreen .consent-section { color: $accent; text-style: bold; }
    ConsentScreen DataTable { height: auto; max-height: 14; margin-bottom: 1; }
    ConsentScreen #consent-spared { max-height: 10; }
    ConsentScreen #consent-summary { height: auto; }
    ConsentScreen #consent-keys { color: $text-muted; height: auto; }
    ConsentScreen #consent-buttons { height: auto; align-horizontal: right; }
    ConsentScreen #consent-buttons Button { margin-left: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "confirm", "Confirm", priority=True),
        Binding("escape", "decline", "Decline"),
        Binding("space", "toggle", "Tick / untick"),
        Binding("x", "cancel_cleanup", "Cancel the cleanup"),
    ]

    def __init__(self, preview: StepPreview, operator: str, position: str = "") -> None:
        super().__init__()
        self.preview = preview
        self.operator = operator
        self.position = position
        """e.g. 'step 2 of 3', shown in the title."""
        self.ticks: dict[int, bool] = {r.pid: True for r in preview.targets}
        for r in preview.spared:
            if is_optional(r) and r.pid not in self.ticks:
                self.ticks[r.pid] = False
        self._refs = {r.pid: r for r in (*preview.spared, *preview.targets)}

    # -- layout

    def compose(self) -> ComposeResult:
        p = self.preview
        with Vertical():
            title = f"Confirm {p.step}" + (f" ({self.position})" if self.position else "")
            yield Static(title, id="consent-title")
            yield Static(Text.assemble(STEP_TITLES.get(p.step, p.step), "\n", ("action: ", "dim"), p.action),
                         id="consent-action")
            yield Static(f"Would signal ({len(p.targets)})" + ("" if p.targets else ": none"),
                         classes="consent-section")
            targets: DataTable[str | Text] = DataTable(id="consent-targets", cursor_type="row", zebra_stripes=True)
            targets.display = bool(p.targets)
            yield targets
            yield Static(f"Will not touch ({len(p.spared)})" + ("" if p.spared else ": none"),
                         classes="consent-section")
            spared: DataTable[str | Text] = DataTable(id="consent-spared", cursor_type="row", zebra_stripes=True)
            spared.display = bool(p.spared)
            yield spared
            yield Static(id="consent-summary")
            yield Static("space tick / untick the row · tab the other table · enter confirm · esc decline · "
                         "x cancel the whole cleanup · full command lines go to the audit log",
                         id="consent-keys")
            with Horizontal(id="consent-buttons"):
                yield Button("Decline (esc)", variant="default", id="consent-decline")
                yield Button("Confirm (enter)", variant="error", id="consent-confirm")

    def on_mount(self) -> None:
        # the modal's border and padding (4), the columns' padding (2 each), a scrollbar (2)
        fixed = sum(w for _, _, w in FIXED_COLUMNS) + 2 * (len(FIXED_COLUMNS) + 1) + 6
        width = max(min(self.app.size.width, 150) - fixed, 24)
        for table_id, refs, why_style in (("#consent-targets", self.preview.targets, "bold"),
                                          ("#consent-spared", self.preview.spared, "italic")):
            table = self.query_one(table_id, DataTable)
            for key, label, w in FIXED_COLUMNS:
                table.add_column(label, key=key, width=w)
            table.add_column("Command / why", key="what", width=width)
            for ref in refs:
                cells, height = ref_cells(ref, self._tick_mark(ref.pid), why_style, width)
                table.add_row(*cells, key=str(ref.pid), height=height)
        first = self.query_one("#consent-targets" if self.preview.targets else "#consent-spared", DataTable)
        if first.display:
            first.focus()
        else:
            self.query_one("#consent-confirm", Button).focus()
        self._show_summary()

    def _tick_mark(self, pid: int) -> Text:
        """A Text, not a str: DataTable reads a str cell as markup, and '[x]' is a markup tag."""
        tick = self.ticks.get(pid)
        if tick is None:
            return Text(LOCKED, style="dim")
        return Text(TICKED, style="bold red") if tick else Text(UNTICKED)

    def _show_summary(self) -> None:
        ticked = self.ticked
        spared = [pid for pid, on in self.ticks.items() if not on and pid in {r.pid for r in self.preview.targets}]
        added = [pid for pid in ticked if pid not in {r.pid for r in self.preview.targets}]
        text = Text()
        if ticked:
            text.append("will signal: ", "bold")
            text.append(" ".join(map(str, ticked)), "bold red")
        else:
            text.append("will signal nothing" + (" (every process unticked)" if self.preview.targets else ""),
                        "bold")
        if spared:
            text.append("   unticked (spared): " + " ".join(map(str, spared)), "yellow")
        if added:
            text.append("   ticked in: " + " ".join(map(str, added)), "bold magenta")
        self.query_one("#consent-summary", Static).update(text)

    # -- state

    @property
    def ticked(self) -> list[int]:
        """The pids that would be signalled, in preview order (targets, then optional ones ticked in)."""
        return [pid for pid, on in self.ticks.items() if on]

    def decision(self, accepted: bool, note: str = "") -> ConsentDecision:
        if not accepted:
            return ConsentDecision(False, None, self.operator, note or "declined in the dashboard")
        targets = [r.pid for r in self.preview.targets]
        changes = [f"unticked {pid}" for pid in targets if not self.ticks.get(pid)]
        changes += [f"ticked in {pid}" for pid in self.ticked if pid not in targets]
        return ConsentDecision(True, self.ticked, self.operator,
                               "confirmed in the dashboard" + (f" ({', '.join(changes)})" if changes else ""))

    def toggle(self, pid: int) -> bool:
        """Flip a row's tick; False when the row cannot be ticked (protected, or not optional)."""
        if pid not in self.ticks:
            return False
        self.ticks[pid] = not self.ticks[pid]
        for table in self.query(DataTable):
            if str(pid) in table.rows:
                table.update_cell(str(pid), "tick", self._tick_mark(pid))
        self._show_summary()
        return True

    # -- actions

    def _cursor_pid(self) -> int | None:
        focused = self.focused
        if not isinstance(focused, DataTable) or focused.row_count == 0:
            return None
        row_key, _ = focused.coordinate_to_cell_key(focused.cursor_coordinate)
        return int(row_key.value) if row_key.value else None

    def action_toggle(self) -> None:
        pid = self._cursor_pid()
        if pid is None:
            return
        if not self.toggle(pid):
            ref = self._refs.get(pid)
            self.notify(f"pid {pid} cannot be ticked: {ref.reason if ref else 'not in this preview'}",
                        severity="warning", timeout=5)

    async def action_cancel_cleanup(self) -> None:
        """x: the app's cancel (declines this step and the rest); a modal screen stops app keys."""
        await self.app.run_action("cancel_cleanup")

    def action_confirm(self) -> None:
        self.dismiss(self.decision(True))

    def action_decline(self) -> None:
        self.dismiss(self.decision(False))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """A click on a row ticks or unticks it (enter confirms the step)."""
        event.stop()
        if event.row_key.value:
            self.action_toggle()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "consent-confirm":
            self.action_confirm()
        else:
            self.action_decline()
