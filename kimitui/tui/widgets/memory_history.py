"""Per-GPU memory history: one sparkline a GPU, scaled from 0 to the GPU's total memory."""

from __future__ import annotations

import functools
from operator import itemgetter

from textual.content import Content

from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.widgets.part_lines import Line, PartLines, line_content

LABEL_W = 3
VALUE_W = 6

TITLE: Line = (("memory history (GiB)", "$text-muted"),)
WAITING = [TITLE, (("waiting for samples", "$text-muted"),)]


GpuLines = dict[int, tuple[tuple[object, ...], tuple[object, ...], Line]]
"""A GPU's line as last made, by GPU, with what it was made from: its points (with the total and the width),
and what of them the line shows (the sparkline's cells, the last point, the total, the width)."""


def history_parts(state: SessionState, width: int, made: GpuLines | None = None) -> list[Line]:
    """Lines aligned with the GPU table's rows: a header line (the phases that started within the history,
    each at its column: the help lists the letters), then 'N ▁▂▅█ 96.9' per GPU, each sparkline cell
    coloured by its own level. Parts, cheap to compare: a line is drawn again only when it changed. ``made``
    (kept by the caller between frames) keeps each GPU's line while what it shows is the same."""
    spark_w = max(width - LABEL_W - VALUE_W - 2, 4)
    indices = sorted(state.gpus.keys() | state.mem_history.keys())
    if not indices:
        return WAITING
    times = [t for t, _ in state.mem_history.get(indices[0], ())]
    marks = fmt.phase_marks(times, [(p.start, p.phase) for p in state.phases], spark_w)
    lines: list[Line] = [(("ph".ljust(LABEL_W), "$text-muted"), (marks, "bold $accent"),
                          (" GiB".rjust(VALUE_W + 1), "$text-muted")) if marks
                         else TITLE]
    for index in indices:
        points = tuple(map(_used, state.mem_history.get(index, ())))
        gpu = state.gpus.get(index)
        total = gpu.mem_total_mib if gpu is not None and gpu.mem_total_mib else max(fmt.readings(points), default=0.0)
        kept = made.get(index) if made is not None else None
        if kept is not None and kept[0] == (points, total, spark_w):  # the same points (a steady GPU's memory)
            lines.append(kept[2])
            continue
        cells = fmt.resample(points, spark_w)
        last = points[-1] if points else None  # None: the newest sample had no reading
        drawn = (tuple(cells), last, total, spark_w)
        if kept is not None and kept[1] == drawn:  # other points, drawn the same (the history still filling)
            line = kept[2]
        else:
            line = ((str(index).rjust(LABEL_W - 1) + " ", "$text-muted"),
                    *_coloured(fmt.spark_cells(cells, total or 0.0, spark_w)),
                    " " + fmt.gib(last).rjust(VALUE_W - 1))
        if made is not None:
            made[index] = ((points, total, spark_w), drawn, line)
        lines.append(line)
    return lines


def history_content(state: SessionState, width: int) -> Content:
    """Every line as one Content (what the widget draws)."""
    return Content("\n").join([line_content(line) for line in history_parts(state, width)])


_used = itemgetter(1)


def _level_style(char: str) -> str:
    if char == fmt.NO_READING:
        return "$text-muted"
    level = fmt.BLOCKS.find(char)
    if level >= 7:
        return "$error"
    if level >= 4:
        return "$warning"
    return "$success"


@functools.lru_cache(maxsize=1024)
def _coloured(spark: str) -> tuple[tuple[str, str], ...]:
    """The sparkline in runs of one colour: each cell coloured by its own fill level (a sparkline comes back
    often: a steady GPU's, a GPU's at each of its levels)."""
    runs: list[tuple[str, str]] = []
    for char in spark:
        style = _level_style(char)
        if runs and runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + char, style)
        else:
            runs.append((char, style))
    return tuple(runs)


class MemoryHistory(PartLines):
    """Redrawn from ``state.mem_history``: a sample repaints only the lines it changed (most samples move a
    GPU's figure or sparkline now and then, not every line every time). The width decides how many points
    a line shows."""

    DEFAULT_CSS = "MemoryHistory { height: auto; min-height: 2; }"

    _state: SessionState | None = None
    _made: GpuLines | None = None

    def show(self, state: SessionState) -> None:
        self._state = state
        if self._made is None:
            self._made = {}
        self.set_lines(history_parts(state, self.size.width or 36, self._made))

    def on_mount(self) -> None:
        self.set_lines(WAITING)

    def on_resize(self) -> None:
        if self._state is not None:
            self.show(self._state)
