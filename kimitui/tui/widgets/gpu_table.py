"""The GPU table: one row per GPU with its name and state (its XID, clock caps, a busy link below its maximum), a
memory bar, utilisation, temperature, power and SM clock."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from rich.text import Text

from kimitui.core.events import GpuSample
from kimitui.core.gpu_words import gpu_state_words
from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row

BAR_WIDTH = 10
NAME_WIDTH = 18


def _index_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    return Text(str(g.index), justify="right")


def _name_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    if g.error:
        return Text(fmt.shorten(fmt.printable(f"! {g.error}"), name_width), style=colors.error, no_wrap=True)
    name = fmt.printable(fmt.short_gpu_name(g.name)) or "-"
    words = ", ".join(fmt.printable(w) for w in gpu_state_words(g))
    if not words:
        return Text(fmt.shorten(name, name_width), no_wrap=True)
    # The GPUs of a host share a name: where both do not fit, the name gives way to its first word ("H100"), then
    # goes; the state is what tells this row from the others.
    cell = Text(no_wrap=True)
    fits = [n for n in (name, name.split()[0]) if len(n) + 2 + len(words) <= name_width]
    if fits:
        cell.append(fits[0] + "  ")
    cell.append(fmt.shorten(words, name_width), style=colors.error if g.xid else colors.warning)
    return cell


def _name_figures(g: GpuSample) -> object:
    return g.name, g.error, gpu_state_words(g)


def _memory_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    fraction = fmt.mem_fraction(g.mem_used_mib, g.mem_total_mib)
    memory = Text(no_wrap=True)
    memory.append(fmt.bar(fraction, BAR_WIDTH), style=colors.level(fraction))
    memory.append(" " + fmt.mem_label(g.mem_used_mib, g.mem_total_mib))
    return memory


def _util_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    return Text(fmt.num(g.util_pct, "{:.0f}", "%"), justify="right",
                style=colors.level(None if g.util_pct is None else g.util_pct / 100))


def _temp_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    return Text(fmt.num(g.temp_c, "{:.0f}", "C"), justify="right")


def _power_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    return Text(fmt.num(g.power_w, "{:.0f}", "W"), justify="right")


def _clock_cell(g: GpuSample, colors: Colors, name_width: int) -> Cell:
    return Text(fmt.num(g.sm_clock_mhz, "{:.0f}"), justify="right")


CellMaker = Callable[[GpuSample, Colors, int], Cell]
CELLS: tuple[tuple[Callable[[GpuSample], object], CellMaker], ...] = (
    (attrgetter("index"), _index_cell),
    (_name_figures, _name_cell),
    (attrgetter("mem_used_mib", "mem_total_mib"), _memory_cell),
    (attrgetter("util_pct"), _util_cell),
    (attrgetter("temp_c"), _temp_cell),
    (attrgetter("power_w"), _power_cell),
    (attrgetter("sm_clock_mhz"), _clock_cell),
)
"""Each column's cell, and the figures of a sample it is made from (a cell whose figures did not change is
kept as it is)."""


def gpu_cells(g: GpuSample, colors: Colors, name_width: int) -> list[Cell]:
    return [make(g, colors, name_width) for _, make in CELLS]


class GpuTable(KeyedTable):
    COLUMNS = (
        ("gpu", "GPU", 3),
        ("name", "Name", NAME_WIDTH),
        ("memory", "Memory used/total", BAR_WIDTH + 1 + 13),
        ("util", "Util", 4),
        ("temp", "Temp", 4),
        ("power", "Power", 5),
        ("clock", "SM MHz", 6),
    )

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.name_width = NAME_WIDTH
        self._last: tuple[SessionState, Colors] | None = None
        self._made: dict[int, tuple[Colors, int, list[object], list[Cell]]] = {}
        """Each GPU's cells as last made, with the colours, name width and figures they were made from."""

    def fitted_name_width(self) -> int:
        """The name column takes what the other columns leave (at least NAME_WIDTH, at most a long name)."""
        others = sum(w or 0 for key, _, w in self.COLUMNS if key != "name") + 2 * len(self.COLUMNS)
        return max(NAME_WIDTH, min(self.size.width - others, 40))

    def on_resize(self) -> None:
        width = self.fitted_name_width()
        if width != self.name_width:
            self.name_width = width
            self.set_column_width("name", width)
            if self._last is not None:
                self.show(*self._last)

    def show(self, state: SessionState, colors: Colors) -> None:
        self._last = (state, colors)
        made: dict[int, tuple[Colors, int, list[object], list[Cell]]] = {}
        rows: list[Row] = []
        width = self.name_width
        for i in sorted(state.gpus):
            g = state.gpus[i]
            figures = [read(g) for read, _ in CELLS]
            last = self._made.get(i)
            if last is None or last[0] != colors or last[1] != width:
                cells = gpu_cells(g, colors, width)
            elif last[2] == figures:
                cells = last[3]  # the very cells: sync skips the row
            else:
                cells = [old if was == now else make(g, colors, width)
                         for (_, make), old, was, now in zip(CELLS, last[3], last[2], figures, strict=True)]
            made[i] = (colors, width, figures, cells)
            rows.append((str(i), cells))
        self._made = made
        self.sync(rows)
