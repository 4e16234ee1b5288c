"""Lines of styled parts on Textual's Line API, each line's strip kept until its own parts change.

A Static renders its whole Content again on every update, through Content's per-segment styles with their
offsets (about 0.2-0.8 ms a line): for a header and eight sparklines that change twice a second, that is
most of a frame. Here a line is a tuple of parts, ``"text"`` or ``("text", "style")`` with the styles
Content takes (``"bold $success"``); a part's segment is made from its style resolved once per look, and
a line that did not change is neither rendered nor repainted. What a line draws is what
``Content.assemble(*parts)`` draws on the widget (tests/test_tui_render.py holds the two to that), without
the offsets that text selection uses (nothing here is selectable).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from kimitui.tui.widgets.bare_lines import BareLines
from kimitui.tui.widgets.refresh_batch import BatchedIdle

Part = str | tuple[str, str]
Line = tuple[Part, ...]

ELLIPSIS = "…"


def line_content(line: Line) -> Content:
    """The line as one Content (what a Static would show)."""
    return Content.assemble(*line)


class PartLines(BatchedIdle, BareLines, Widget):
    """Shows ``set_lines``' lines; ``overflow_ellipsis`` ends a line too long for the widget with "…"."""

    DEFAULT_CSS = "PartLines { height: auto; }"

    overflow_ellipsis = False

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: list[Line] = []
        self._strips: dict[int, Strip] = {}
        self._styles: dict[str, RichStyle] = {}
        self._look: object = None
        self._frame: tuple[RichStyle, int] | None = None
        """(base style, width) while render_lines runs: read once for the lines it renders."""

    @property
    def lines(self) -> list[Line]:
        return list(self._lines)

    def set_lines(self, lines: Sequence[Line]) -> None:
        """Show these lines: only those that differ from what is shown are drawn again."""
        lines = list(lines)
        if len(lines) != len(self._lines):
            self._lines = lines
            self._strips.clear()
            self.refresh(layout=True)
            return
        width = self.size.width
        for y, (now, before) in enumerate(zip(lines, self._lines, strict=True)):
            if now != before:
                self._lines[y] = now
                self._strips.pop(y, None)
                if width:
                    self.refresh(Region(0, y, width, 1))
        if not width:
            self.refresh()  # off screen: drawn whole when shown

    def render(self) -> Content:
        return Content("\n").join([line_content(line) for line in self._lines])

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((line_content(line).cell_length for line in self._lines), default=0)

    def notify_style_update(self) -> None:
        self._look = None
        super().notify_style_update()

    def _read_look(self) -> RichStyle:
        base = self.visual_style
        look = (base, self.app.theme)
        if look != self._look:
            self._look = look
            self._styles.clear()
            self._strips.clear()
        return base.rich_style

    def _style(self, style: str) -> RichStyle:
        rich = self._styles.get(style)
        if rich is None:
            rich = self._styles[style] = (self.visual_style + self._get_style(style)).rich_style
        return rich

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = (self._read_look(), self.size.width)
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        base, width = self._frame or (self._read_look(), self.size.width)
        strip = self._strips.get(y)
        if strip is not None and strip.cell_length == width:
            return strip
        if y >= len(self._lines):
            return Strip.blank(width, base)
        segments = [Segment(part, base) if isinstance(part, str) else Segment(part[0], self._style(part[1]))
                    for part in self._lines[y] if (part if isinstance(part, str) else part[0])]
        strip = Strip(segments)
        if self.overflow_ellipsis and strip.cell_length > width > 0:
            cut = list(strip.crop(0, width - 1))
            strip = Strip([*cut, Segment(ELLIPSIS, cut[-1].style if cut else base)])
        strip = strip.adjust_cell_length(width, base).simplify()
        self._strips[y] = strip
        return strip
