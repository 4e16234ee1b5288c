"""The consent modal: one step's preview, the operator ticks and confirms or declines.

Two tables: what the step would signal (ticked; untick to spare) and what it will not touch, each with
why. A spared process marked optional (a handle-only NVML monitor) can be ticked in; the others cannot.
The modal returns a ``ConsentDecision`` with exactly the ticked pids: the executor signals nothing else.
"""

from __future__ import annotations

import textwrap
from typing import ClassVar

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from kimitui.cleanup.consent import ConsentDecision, is_optional
from kimitui.core.events import ProcRef, StepPreview
from kimitui.core.state import SessionState
from kimitui.tui import fmt

STEP_TITLES = {
    "graceful": "graceful stop: the service's own stop, then wait for its processes",
    "process": "process kill: what is left of the service's processes identified when the cleanup began",
    "others": "on the GPUs, not the service: the other processes holding the GPUs, asked for apart",
    "device": "device kill: the CUDA-context holders of the GPUs left (not the service's only after others)",
    "reset": "GPU reset: no holder is left but the memory is not back",
    "restart": "restart the service and wait until it answers",
}
NO_ROWS = frozenset({"restart", "reset"})
"""Steps that signal no process: their modal shows what they will do, not process tables."""
ALREADY_RUNNING = "already running"
"""The start of a restart preview whose service is up (kimitui.cleanup.last_steps.ALREADY_RUNNING)."""
GPUS_HELD = "GPU memory still held"
"""The start of a restart preview while the GPUs still hold memory (kimitui.cleanup.last_steps.GPUS_HELD)."""
TICKED, UNTICKED, LOCKED = "[x]", "[ ]", " - "
WIDE_COLUMNS = (("tick", "", 3), ("pid", "PID", 7), ("start", "Start", 8), ("user", "User", 8),
                ("gpus", "GPUs", 4), ("mem", "GPU MiB", 9), ("unit", "Unit", 15))
COMPACT_COLUMNS = (("tick", "", 3), ("pid", "PID", 7), ("start", "Start", 8), ("user", "User", 8),
                   ("gpus", "GPUs", 4), ("mem", "GPU MiB", 9))
"""Then one column of the command over why (a row of two or three lines), as wide as what is left. Below
COMPACT_WIDTH columns the unit goes (it is in the audit log) and the command column narrows: whose process
it is and when it started (which process a pid is) stay."""
COMPACT_WIDTH = 100
MIN_WHAT_WIDTH = 20
"""The command column's least width (what 80 columns leave it beside the compact columns is 21)."""
MAX_WIDTH = 150
WHY_LINES = 2
CHROME_LINES = 9
"""The modal's lines besides the action and the tables: border 2, title, two section lines, summary,
keys, buttons, and one spare."""


def what_lines(ref: ProcRef, width: int) -> list[str]:
    """The command's distinguishing part on one line, why on up to WHY_LINES more (the last one cut with an
    ellipsis)."""
    why = textwrap.wrap(fmt.printable(ref.reason or "-"), width) or ["-"]
    if len(why) > WHY_LINES:
        why = [*why[: WHY_LINES - 1], fmt.shorten(" ".join(why[WHY_LINES - 1:]), width)]
    return [fmt.fit_command(fmt.command_gist(ref.cmdline), width), *why]


def ref_cells(ref: ProcRef, tick: Text, why_style: str, width: int, compact: bool = False,
              started: str = fmt.DASH) -> tuple[list[str | Text], int]:
    lines = what_lines(ref, width)
    what = Text(no_wrap=True, overflow="ellipsis")
    what.append(lines[0])
    for line in lines[1:]:
        what.append("\n" + line, style=why_style)
    mem = Text(fmt.mib(ref.mem_mib), justify="right")
    # a str cell is markup, and the user and the unit come from the host: their brackets escaped
    user = escape(fmt.shorten(fmt.printable(ref.user or "?"), 8))
    if compact:
        return [tick, str(ref.pid), started, user, fmt.gpu_list(ref.gpus), mem, what], len(lines)
    cells: list[str | Text] = [tick, str(ref.pid), started, user,
                               fmt.gpu_list(ref.gpus), mem, escape(fmt.shorten(fmt.unit_label(ref.unit), 15)), what]
    return cells, len(lines)


def what_width(screen_width: int, compact: bool) -> int:
    """The command / why column's width: the modal's, less its border and padding (4), the other columns
    with their padding (2 each), the column's own padding (2) and a scrollbar (2)."""
    columns = COMPACT_COLUMNS if compact else WIDE_COLUMNS
    fixed = sum(w for _, _, w in columns) + 2 * (len(columns) + 1) + 6
    return max(min(screen_width, MAX_WIDTH) - fixed, MIN_WHAT_WIDTH)


def table_heights(avail: int, need: tuple[int, int]) -> tuple[int, int]:
    """Heights of the two tables (header line included) within ``avail`` lines: each as tall as its rows
    when both fit; else shared in proportion, neither below 4 lines (its header and a row): the rows
    scroll, the controls stay on screen."""
    a, b = need
    if a + b <= avail:
        return a, b
    if not a or not b:
        return (max(min(a, avail), 4 if a else 0), max(min(b, avail), 4 if b else 0))
    first = min(max(4, min(a, round(avail * a / (a + b)))), avail - min(b, 4))
    return first, max(min(b, 4), min(b, avail - first))


class ConsentScreen(ModalScreen[ConsentDecision]):
    DEFAULT_CSS = """
    ConsentScreen { align: center middle; }
    ConsentScreen > Vertical {
        width: 100%; max-width: 150; height: auto; max-height: 100%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    ConsentScreen #consent-title { text-style: bold; color: $warning; }
    ConsentScreen #consent-action { color: $text; }
    ConsentScreen .consent-section { color: $accent; text-style: bold; }
    ConsentScreen DataTable { height: auto; }
    ConsentScreen #consent-summary { height: auto; }
    ConsentScreen #consent-keys { color: $text-muted; height: auto; }
    ConsentScreen #consent-buttons { height: 1; align-horizontal: right; }
    ConsentScreen #consent-buttons Button { margin-left: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "confirm", "Confirm", priority=True),
        Binding("escape", "decline", "Decline"),
        Binding("space", "toggle", "Tick / untick"),
        Binding("x", "cancel_cleanup", "Cancel the cleanup"),
        Binding("A", "campaign_abort", "Abort the campaign"),
    ]

    def __init__(self, preview: StepPreview, operator: str, position: str = "",
                 state: SessionState | None = None) -> None:
        super().__init__()
        self.preview = preview
        self.operator = operator
        self.position = position
        """e.g. 'step 2 of 3', shown in the title."""
        self.state = state
        """The session's state: when the host said when it booted, process start times read as times."""
        self.rows = preview.step not in NO_ROWS or bool(preview.targets or preview.spared)
        """Whether the step lists processes (a restart or reset does not)."""
        self.ticks: dict[int, bool] = {r.pid: True for r in preview.targets}
        for r in preview.spared:
            if is_optional(r) and r.pid not in self.ticks:
                self.ticks[r.pid] = False
        self._refs = {r.pid: r for r in (*preview.spared, *preview.targets)}
        self._need = (0, 0)

    # -- layout

    def compose(self) -> ComposeResult:
        p = self.preview
        with Vertical():
            title = f"Confirm {p.step}" + (f" ({self.position})" if self.position else "")
            up = p.step == "restart" and p.action.startswith((ALREADY_RUNNING, GPUS_HELD))
            if up:
                title += (": the service is ALREADY RUNNING" if p.action.startswith(ALREADY_RUNNING) else
                          ": the GPUs STILL HOLD MEMORY (finish the cleanup first)")
            yield Static(Text(fmt.printable(title)), id="consent-title")
            action = Text.assemble(STEP_TITLES.get(p.step, p.step), "\n", ("action: ", "dim"),
                                   (fmt.printable(p.action), "bold yellow" if up else ""))
            yield Static(action, id="consent-action")
            if self.rows:
                yield Static(f"Would signal ({len(p.targets)})" + ("" if p.targets else ": none"),
                             classes="consent-section")
                targets: DataTable[str | Text] = DataTable(id="consent-targets", cursor_type="row",
                                                           zebra_stripes=True)
                targets.display = bool(p.targets)
                yield targets
                yield Static(f"Will not touch ({len(p.spared)})" + ("" if p.spared else ": none"),
                             classes="consent-section")
                spared: DataTable[str | Text] = DataTable(id="consent-spared", cursor_type="row", zebra_stripes=True)
                spared.display = bool(p.spared)
                yield spared
            yield Static(id="consent-summary")
            yield Static(self._keys(), id="consent-keys")
            with Horizontal(id="consent-buttons"):
                yield Button("Decline (esc)", variant="default", id="consent-decline", compact=True)
                yield Button("Confirm (enter)", variant="error", id="consent-confirm", compact=True)

    def _keys(self) -> str:
        # in a campaign, x (the F action's cancel) has no cleanup of its own to cancel: A aborts the campaign
        stop = " · A abort the campaign" if self._in_campaign() else " · x cancel the cleanup"
        if not self.rows:
            return f"enter confirm · esc decline{stop if self.preview.step == 'reset' or self._in_campaign() else ''}"
        return f"space tick / untick · tab next table · enter confirm · esc decline{stop}"

    def _in_campaign(self) -> bool:
        campaign = getattr(self.app, "campaign", None)
        return bool(campaign is not None and campaign.running)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self._in_campaign() if action == "campaign_abort" else True

    @property
    def compact(self) -> bool:
        return self.app.size.width < COMPACT_WIDTH

    def on_mount(self) -> None:
        if self.rows:
            self._fill_tables()
            first = self.query_one("#consent-targets" if self.preview.targets else "#consent-spared", DataTable)
            if first.display:
                first.focus()
            else:
                self.query_one("#consent-confirm", Button).focus()
        else:
            self.query_one("#consent-confirm", Button).focus()
        self._show_summary()
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _started(self, ref: ProcRef) -> str:
        state = self.state
        if state is None:
            return fmt.DASH
        return fmt.started(state.started_at(ref.start_time), state.clock)

    def _fill_tables(self) -> None:
        compact = self.compact
        width = what_width(self.app.size.width, compact)
        need = []
        for table_id, refs, why_style in (("#consent-targets", self.preview.targets, "bold"),
                                          ("#consent-spared", self.preview.spared, "italic")):
            table = self.query_one(table_id, DataTable)
            for key, label, w in (COMPACT_COLUMNS if compact else WIDE_COLUMNS):
                table.add_column(label, key=key, width=w)
            table.add_column("Command / why", key="what", width=width)
            lines = 1
            for ref in refs:
                cells, height = ref_cells(ref, self._tick_mark(ref.pid), why_style, width, compact, self._started(ref))
                table.add_row(*cells, key=str(ref.pid), height=height)
                lines += height
            need.append(lines if refs else 0)
        self._need = (need[0], need[1])

    def _fit(self) -> None:
        """Give the tables what the screen has left once every control has its line."""
        if not self.rows:
            return
        width = min(self.app.size.width, MAX_WIDTH) - 4
        action = self.query_one("#consent-action", Static)
        plain = action.render()
        action_lines = sum(max(1, -(-len(line) // max(width, 1))) for line in str(plain).splitlines())
        keys_lines = -(-len(self._keys()) // max(width, 1))
        avail = max(self.app.size.height - CHROME_LINES - action_lines - keys_lines, 8)
        heights = table_heights(avail, self._need)
        for table_id, height in zip(("#consent-targets", "#consent-spared"), heights, strict=True):
            table = self.query_one(table_id, DataTable)
            table.styles.max_height = max(height, 1)

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
        if not self.rows:
            what = {"restart": "will start the service and wait for it", "reset": "will reset the GPUs named above"}
            if self.preview.step == "restart" and self.preview.action.startswith(ALREADY_RUNNING):
                text.append("the service is up: esc declines; confirming starts it again, which fails", "bold yellow")
            elif self.preview.step == "restart" and self.preview.action.startswith(GPUS_HELD):
                text.append("the GPUs still hold memory: esc declines (then free them); confirming starts the "
                            "service beside it", "bold yellow")
            else:
                text.append(what.get(self.preview.step, fmt.printable(f"will run: {self.preview.action}")), "bold")
            self.query_one("#consent-summary", Static).update(text)
            return
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

    async def action_campaign_abort(self) -> None:
        """A: the campaign's abort, which declines this step; a modal screen stops app keys."""
        await self.app.run_action("campaign_abort")

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
