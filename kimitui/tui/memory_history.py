"""Per-GPU memory history: one sparkline a GPU, scaled from 0 to the GPU's total memory."""

from __future__ import annotations

from operator import itemgetter

from textual.content import Content
from textual.widget import Widget

from kimitui.core.state import SessionState
from kimitui.tui import fmt


def history_content(state: SessionState, width: int) -> Content:
    """Lines aligned with the GPU table's rows: a header line, then 'N ▁▂▅█ 96.9' per GPU."""
    label_w = 3
    value_w = 6
    spark_w = max(width - label_w - value_w - 2, 4)
    # One assemble of every line's parts (the same text and spans as joining a Content a line, at
    # a fraction of the cost: this runs at every sample).
    indices = sorted(state.gpus.keys() | state.mem_history.keys())
    times = [t for t, _ in state.mem_history.get(indices[0], ())] if indices else []
    marks = fmt.phase_marks(times, [(p.start, p.phase) for p in state.phases], spark_w)
    if marks:  # the phases that started within the history, each at its column (the help lists the letters)
        parts: list[str | tuple[str, str]] = [("ph".ljust(label_w), "$text-muted"), (marks, "bold $accent"),
                                              (" GiB".rjust(value_w + 1), "$text-muted")]
    else:
        parts = [("memory history (GiB)", "$text-muted")]
    for index in indices:
        points = list(map(_used, state.mem_history.get(index, ())))
        gpu = state.gpus.get(index)
        total = gpu.mem_total_mib if gpu is not None and gpu.mem_total_mib else max(points, default=0.0)
        last = points[-1] if points else None
        spark = fmt.sparkline(points, total or 0.0, spark_w)
        parts += ["\n", (str(index).rjust(label_w - 1) + " ", "$text-muted"), *_coloured(spark),
                  " " + fmt.gib(last).rjust(value_w - 1)]
    return Content.assemble(*parts)


_used = itemgetter(1)


def _level_style(char: str) -> str:
    level = fmt.BLOCKS.find(char)
    if level >= 7:
        return "$error"
    if level >= 4:
        return "$warning"
    return "$success"


def _coloured(spark: str) -> list[tuple[str, str]]:
    """The sparkline in runs of one colour: each cell coloured by its own fill level."""
    runs: list[tuple[str, str]] = []
    for char in spark:
        style = _level_style(char)
        if runs and runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + char, style)
        else:
            runs.append((char, style))
    return runs


class MemoryHistory(Widget):
    """Redrawn from ``state.mem_history``; the width decides how many points a line shows."""

    DEFAULT_CSS = """
    MemoryHistory { height: auto; min-height: 2; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._state: SessionState | None = None
        self._lines = 1

    def show(self, state: SessionState) -> None:
        """Repaint with the state's history; a layout pass only when the number of lines changed (a
        layout pass repaints the whole screen)."""
        self._state = state
        lines = self._line_count()
        self.refresh(layout=lines != self._lines)
        self._lines = lines

    def _line_count(self) -> int:
        if self._state is None:
            return 1
        return 1 + len(self._state.gpus.keys() | self._state.mem_history.keys())

    def render(self) -> Content:
        if self._state is None:
            return Content("memory history: waiting for samples")
        return history_content(self._state, self.content_size.width or 36)

    def get_content_height(self, container, viewport, width: int) -> int:  # type: ignore[no-untyped-def]
        return self._line_count()
