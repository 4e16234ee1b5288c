"""The process table: every process holding a GPU, largest first; scrolls past what fits."""

from __future__ import annotations

from rich.text import Text

from kimitui.core.changes import proc_id
from kimitui.core.events import ProcSample
from kimitui.core.state import SessionState, proc_mem_mib
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row

COMMAND_WIDTH = 120
MIN_COMMAND_WIDTH = 40
"""Below this, the Unit and then the User column give their room to the command (what tells processes apart)."""
NARROW_DROPS = ("unit", "user")


def proc_key(p: ProcSample) -> str:
    return f"{p.pid}:{p.start_time if p.start_time is not None else '-'}"


def proc_gpus(p: ProcSample) -> list[int]:
    return sorted(set(p.gpu_mem_mib) | set(p.gpus))


def kind_style(kind: str, colors: Colors) -> str:
    return {"cuda": colors.primary, "handle": colors.muted, "exiting": colors.muted,
            "exited": colors.warning}.get(kind, colors.warning)


def pid_list(pids: list[int]) -> str:
    return ", ".join(map(str, pids))


def proc_cells(p: ProcSample, colors: Colors) -> list[Cell]:
    mem = proc_mem_mib(p)
    unit = fmt.unit_label(p.unit, p.container)
    shown = fmt.command_gist(p.cmdline) if p.cmdline else "-"
    command = Text(fmt.shorten(shown, COMMAND_WIDTH), no_wrap=True, overflow="ellipsis")
    if p.kind == "exited":
        command = Text(f"(exited; its memory kept by pid {pid_list(p.held_by)} through inherited descriptors)"
                       if p.held_by else "(exited; the driver is releasing its memory)", style=colors.warning)
    elif not p.visible:
        command = Text("(not visible here)", style=colors.muted)
    elif p.inherits:
        command = Text.assemble((f"keeps exited pid {pid_list(p.inherits)}'s memory · ", colors.warning), command)
    return [
        Text(str(p.pid), justify="right"),
        Text(fmt.shorten(fmt.printable(p.user or "-"), 10)),
        Text(fmt.gpu_list(proc_gpus(p))),
        Text(fmt.gib(mem, 2) if p.gpu_mem_mib else "-", justify="right"),  # GiB, as the GPU table
        Text(p.kind, style=kind_style(p.kind, colors)),
        Text(fmt.shorten(unit, 22), no_wrap=True),
        command,
    ]


def sorted_procs(procs: list[ProcSample]) -> list[ProcSample]:
    return sorted(procs, key=lambda p: (-proc_mem_mib(p), p.pid))


class ProcTable(KeyedTable):
    CURSOR = True
    COLUMNS = (
        ("pid", "PID", 7),
        ("user", "User", 8),
        ("gpus", "GPUs", 7),
        ("memory", "GPU GiB", 9),
        ("kind", "Kind", 7),
        ("unit", "Unit", 18),
        ("command", "Command", None),
    )

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._made: dict[str, tuple[int, Colors, list[Cell]]] = {}
        """The cells last made for each process, with the revision (``state.changes``) and colours they show."""
        self._shown: tuple[int, Colors] | None = None
        """The revision of the process list and the colours last shown."""

    def on_resize(self) -> None:
        self.fit_to_width(self.size.width)

    def fit_to_width(self, width: int) -> None:
        fixed = {key: w + 2 for key, _, w in self.COLUMNS if w is not None}
        room = width - 1 - sum(fixed.values())  # 1: the scrollbar's column
        for key in NARROW_DROPS:
            hide = room < MIN_COMMAND_WIDTH
            self.set_column_hidden(key, hide)
            if hide:
                room += fixed[key]

    def show(self, state: SessionState, colors: Colors) -> None:
        # The fold says what the sample changed (core/changes.py). The same processes as last sample, read the
        # same (a steady service): nothing to sort or compare row by row. Otherwise a process that reads the same
        # keeps its very cells: nothing is formatted, and sync skips the row without comparing cells.
        changes = state.changes
        if changes.procs and self._shown == (changes.procs, colors):  # 0: a state no sample was folded into
            return
        self._shown = (changes.procs, colors)
        made: dict[str, tuple[int, Colors, list[Cell]]] = {}
        rows: list[Row] = []
        for p in sorted_procs(state.procs):
            key = proc_key(p)
            rev = changes.proc.get(proc_id(p), -1)
            last = self._made.get(key)
            if last is not None and last[1] == colors and last[0] == rev >= 0:
                made[key] = last
            else:
                made[key] = (rev, colors, proc_cells(p, colors))
            rows.append((key, made[key][2]))
        self._made = made
        self.sync(rows)
