"""The GPU table: one row per GPU with a memory bar, utilisation, temperature, power and SM clock."""

from __future__ import annotations

from rich.text import Text

from kimitui.core.events import GpuSample
from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row

BAR_WIDTH = 10
NAME_WIDTH = 18


def gpu_cells(g: GpuSample, colors: Colors, name_width: int) -> list[Cell]:
    fraction = fmt.mem_fraction(g.mem_used_mib, g.mem_total_mib)
    memory = Text(no_wrap=True)
    memory.append(fmt.bar(fraction, BAR_WIDTH), style=colors.level(fraction))
    memory.append(" " + fmt.mem_label(g.mem_used_mib, g.mem_total_mib))
    name = Text(fmt.shorten(fmt.printable(fmt.short_gpu_name(g.name)) or "-", name_width), no_wrap=True)
    if g.error:
        name = Text(fmt.shorten(fmt.printable(f"! {g.error}"), name_width), style=colors.error, no_wrap=True)
    util = Text(fmt.num(g.util_pct, "{:.0f}", "%"), justify="right",
                style=colors.level(None if g.util_pct is None else g.util_pct / 100))
    return [
        Text(str(g.index), justify="right"),
        name,
        memory,
        util,
        Text(fmt.num(g.temp_c, "{:.0f}", "C"), justify="right"),
        Text(fmt.num(g.power_w, "{:.0f}", "W"), justify="right"),
        Text(fmt.num(g.sm_clock_mhz, "{:.0f}"), justify="right"),
    ]


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
        rows: list[Row] = [(str(i), gpu_cells(state.gpus[i], colors, self.name_width)) for i in sorted(state.gpus)]
        self.sync(rows)
