"""Per-GPU memory history: one sparkline a GPU, scaled from 0 to the GPU's total memory."""

from __future__ import annotations

from operator import itemgetter

from textual.app import ComposeResult
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from kimitui.core.state import SessionState
from kimitui.tui import fmt

LABEL_W = 3
VALUE_W = 6

Line = tuple[str, ...]
"""A line's parts: ('marks', marks) or ('title',) for the header, (label, sparkline, value) for a GPU."""


def history_parts(state: SessionState, width: int) -> list[Line]:
    """What the lines say (cheap to compare: a line's Content is made only when it changed)."""
    spark_w = max(width - LABEL_W - VALUE_W - 2, 4)
    indices = sorted(state.gpus.keys() | state.mem_history.keys())
    times = [t for t, _ in state.mem_history.get(indices[0], ())] if indices else []
    marks = fmt.phase_marks(times, [(p.start, p.phase) for p in state.phases], spark_w)
    lines: list[Line] = [("marks", marks) if marks else ("title",)]
    for index in indices:
        points = list(map(_used, state.mem_history.get(index, ())))
        gpu = state.gpus.get(index)
        total = gpu.mem_total_mib if gpu is not None and gpu.mem_total_mib else max(fmt.readings(points), default=0.0)
        last = points[-1] if points else None  # None: the newest sample had no reading
        lines.append((str(index).rjust(LABEL_W - 1) + " ", fmt.sparkline(points, total or 0.0, spark_w),
                      " " + fmt.gib(last).rjust(VALUE_W - 1)))
    return lines


def line_content(line: Line) -> Content:
    """A header line (the phases that started within the history, each at its column: the help lists the
    letters), or 'N ▁▂▅█ 96.9' for a GPU, each sparkline cell coloured by its own level."""
    if line[0] == "marks":
        return Content.assemble(("ph".ljust(LABEL_W), "$text-muted"), (line[1], "bold $accent"),
                                (" GiB".rjust(VALUE_W + 1), "$text-muted"))
    if line[0] == "title":
        return Content.assemble(("memory history (GiB)", "$text-muted"))
    label, spark, value = line
    return Content.assemble((label, "$text-muted"), *_coloured(spark), value)


def history_lines(state: SessionState, width: int) -> list[Content]:
    """Lines aligned with the GPU table's rows: a header line, then 'N ▁▂▅█ 96.9' per GPU."""
    return [line_content(line) for line in history_parts(state, width)]


def history_content(state: SessionState, width: int) -> Content:
    """Every line as one Content."""
    return Content("\n").join(history_lines(state, width))


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
    """Redrawn from ``state.mem_history``, a widget a line: a sample repaints only the lines it changed
    (most samples move a GPU's figure or sparkline now and then, not every line every time). The width
    decides how many points a line shows."""

    DEFAULT_CSS = """
    MemoryHistory { height: auto; min-height: 2; layout: vertical; }
    MemoryHistory > Static { height: 1; }
    MemoryHistory > Static.-waiting { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._state: SessionState | None = None
        self._lines: list[Static] = []
        self._shown: list[Line] = []
        """What each line says, as shown."""

    def compose(self) -> ComposeResult:
        yield Static("memory history: waiting for samples", classes="-waiting")

    def show(self, state: SessionState) -> None:
        self._state = state
        shown = history_parts(state, self.content_size.width or 36)
        if len(shown) != len(self._shown):  # a layout pass only when the number of lines changed
            self.remove_children()
            self._lines = [Static(line_content(line)) for line in shown]
            self.mount_all(self._lines)
        else:
            for static, now, before in zip(self._lines, shown, self._shown, strict=True):
                if now != before:
                    static.update(line_content(now), layout=False)
        self._shown = shown

    def on_resize(self) -> None:
        if self._state is not None:
            self._shown = []
            self.show(self._state)
