"""A table of keyed rows on Textual's Line API: a ScrollView whose ``render_line`` returns one Strip per
line, from public Textual and Rich API only (its mixins, bare_lines and refresh_batch, reach into Textual's
internals on kimitui's drawing path: pyproject.toml lists what).

Drawing costs only what changed. Each cell keeps its rendered segments until its own value changes, and
each row keeps its line until one of its cells, its place, the cursor, the width or the look (the
component styles) changes; ``sync`` repaints only the lines of rows that changed. So a live table with a
few new values a frame renders those cells and no others, and a table that did not change is not drawn.

It draws what a DataTable with zebra stripes and a row cursor draws: the same component styles (under
``keyed-table--*`` names), the same cell rendering and the same segments (tests/test_tui_render.py holds
the two to that). The scroll position and the cursor's row survive a rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rich.console import ConsoleOptions
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.render import measure
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kimitui.tui.widgets.bare_lines import BareLines
from kimitui.tui.widgets.refresh_batch import BatchedIdle
from kimitui.tui.widgets.table_cells import CELL_PADDING, Cell, Row, as_text, render_cell, same_cell

HEADER = -1
"""The header's row index (DataTable's numbering: the meta of its segments says row -1)."""
NO_STYLE = Style()
RENDERED_CELLS = 4096
"""How many rendered cells a table keeps (then it starts again)."""


@dataclass(slots=True)
class Column:
    key: str
    label: Text
    width: int | None
    """Content width in cells; None: as wide as the widest cell or the label."""
    content_width: int = 0
    """The widest cell or the label (what an auto-width column is as wide as)."""
    hidden: bool = False
    """Left out of the frame (a narrow terminal gives its room to another column)."""

    @property
    def render_width(self) -> int:
        if self.hidden:
            return 0
        return 2 * CELL_PADDING + (self.content_width if self.width is None else self.width)


@dataclass(frozen=True, slots=True)
class TableStyles:
    """The styles a frame is drawn with, from the widget's CSS and component classes."""

    base: Style
    header: Style
    even: Style
    odd: Style
    cursor: Style
    cursor_post: Style
    """Applied after a cursor cell's own styles: the cursor's colours win (DataTable's "css" priority)."""


@dataclass(slots=True)
class _Line:
    """One row (or the header): its cells, and what was rendered from them."""

    cells: Sequence[Cell]
    """As last given to ``sync`` (a row given as the very same sequence is skipped)."""
    texts: list[Text]
    widths: list[int]
    """Measured content width of each cell (what an auto-width column fits)."""
    segments: list[list[Segment] | None] = field(default_factory=list)
    """Each cell's rendered segments (None: to render), valid for ``rendered_for``."""
    styles: list[Style | None] = field(default_factory=list)
    """Each cell's style (the row's, the cell's meta, the cursor's), valid for ``rendered_for``."""
    rendered_for: tuple[object, ...] = ()
    strip: Strip | None = None
    strip_for: tuple[int, int] = (-1, -1)
    """(width, scroll_x) the strip was cut for."""


class KeyedTable(BatchedIdle, BareLines, ScrollView, can_focus=True):
    """Columns are declared by subclasses in ``COLUMNS`` as (key, label, width or None); rows are
    given whole to ``sync`` as (key, cells)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "keyed-table--header", "keyed-table--even-row", "keyed-table--odd-row", "keyed-table--cursor"}

    # DataTable's look, for the parts this table has (no fixed rows or columns, no hover highlight).
    DEFAULT_CSS = """
    KeyedTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;

        &:focus {
            background-tint: $foreground 5%;
            & > .keyed-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .keyed-table--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .keyed-table--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .keyed-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .keyed-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .keyed-table--odd-row {
        }
        & > .keyed-table--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .keyed-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    COLUMNS: tuple[tuple[str, str, int | None], ...] = ()
    _look: TableStyles | None = None
    _look_stale = True
    """Class defaults: Textual may refresh the widget before ``__init__`` has run to the end."""

    FILTERS_OWN = True
    CURSOR = False
    """Whether a row cursor is shown (tables an operator scrolls through)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.show_cursor = self.CURSOR
        self.cursor_row = 0
        self.columns: list[Column] = [Column(key, Text.from_markup(label), width) for key, label, width in self.COLUMNS]
        self._column_index = {c.key: i for i, c in enumerate(self.columns)}
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._lines: dict[str, _Line] = {}
        self._header = _Line(cells=[c.label for c in self.columns], texts=[c.label for c in self.columns],
                             widths=[])
        self._look_version = 0
        self._layout_version = 0
        """Bumped when a column's width changes: every cell is rendered again."""
        self._metas: dict[tuple[int, int], Style] = {}
        self._extends: dict[tuple[object, ...], Style | None] = {}
        """A row's style past its last column (its meta says out of bounds), by row and look."""
        self._rendered: dict[tuple[object, ...], list[Segment]] = {}
        """Cells rendered lately, by what they were rendered from (their place among it)."""
        self._blank_line: tuple[tuple[object, ...], Strip] | None = None
        self._frame: tuple[int, int, int] | None = None
        """(width, scroll_x, scroll_y) while render_lines runs: read once for the lines it renders."""

    def on_mount(self) -> None:
        console = self.app.console
        self._header.widths = [measure(console, c.label, 1) for c in self.columns]
        self._fit_columns(force=True)

    # -- reading

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._keys)

    def cell_text(self, row_key: str, column_key: str) -> str:
        """Plain text of a cell (for tests and copy-out)."""
        return self._lines[row_key].texts[self._column_index[column_key]].plain

    def column_texts(self, column_key: str) -> list[str]:
        return [self.cell_text(k, column_key) for k in self._keys]

    # -- writing

    def sync(self, rows: Sequence[Row]) -> None:
        """Show these rows. The same keys in the same order: only the cells that differ are rendered
        again and only their lines repainted (a row passed as the very sequence it was last time is
        skipped). Otherwise the table is rebuilt, keeping the cursor on its row and the scroll position."""
        keys = [k for k, _ in rows]
        if keys == self._keys:
            repaint: list[int] = []
            for index, (key, cells) in enumerate(rows):
                line = self._lines[key]
                if cells is line.cells:
                    continue
                old = line.cells
                changed = [i for i, cell in enumerate(cells) if not same_cell(old[i], cell)]
                line.cells = cells
                if changed:
                    self._set_cells(line, changed)
                    repaint.append(index)
            if repaint:
                self._refresh_rows(repaint)
            self._fit_columns()
            return
        cursor_key = self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None
        scroll = self.scroll_y
        self._keys = keys
        self._index = {k: i for i, k in enumerate(keys)}
        self._lines = {key: self._new_line(cells) for key, cells in rows}
        self.cursor_row = self._index.get(cursor_key, 0) if cursor_key is not None else 0
        self._fit_columns(force=True)
        self.scroll_to(y=scroll, animate=False, immediate=True)
        self.refresh()

    def update_cell(self, row_key: str, column_key: str, value: Cell) -> None:
        """Set one cell (its line is repainted)."""
        line = self._lines[row_key]
        column = self._column_index[column_key]
        cells = list(line.cells)
        if same_cell(cells[column], value):
            return
        cells[column] = value
        line.cells = cells
        self._set_cells(line, [column])
        self._refresh_rows([self._index[row_key]])
        self._fit_columns()

    def set_column_width(self, column_key: str, width: int | None) -> None:
        column = self.columns[self._column_index[column_key]]
        if column.width != width:
            column.width = width
            self._fit_columns(force=True)
            self.refresh()

    def set_column_hidden(self, column_key: str, hidden: bool) -> None:
        column = self.columns[self._column_index[column_key]]
        if column.hidden != hidden:
            column.hidden = hidden
            self._fit_columns(force=True)
            self.refresh()

    def move_cursor(self, row: int, *, scroll: bool = True) -> None:
        """Put the cursor on this row (clamped to the rows there are)."""
        row = max(0, min(row, len(self._keys) - 1))
        if row != self.cursor_row:
            if self.show_cursor:
                self._refresh_rows([self.cursor_row, row])
            self.cursor_row = row
        if scroll and self.show_cursor:
            self._scroll_to_row(row)

    def _new_line(self, cells: Sequence[Cell]) -> _Line:
        texts = [as_text(c) for c in cells]
        console = self.app.console
        widths = [measure(console, t, 1) if c.width is None else 0 for c, t in zip(self.columns, texts, strict=True)]
        return _Line(cells=cells, texts=texts, widths=widths)

    def _set_cells(self, line: _Line, columns: list[int]) -> None:
        console = self.app.console
        for i in columns:
            text = line.texts[i] = as_text(line.cells[i])
            if self.columns[i].width is None:
                line.widths[i] = measure(console, text, 1)
            if line.segments:
                line.segments[i] = None
        line.strip = None

    def _fit_columns(self, force: bool = False) -> None:
        """Auto-width columns as wide as their widest cell; the virtual size to match."""
        changed = force
        for i, column in enumerate(self.columns):
            if column.width is not None:
                continue
            header = self._header.widths[i] if i < len(self._header.widths) else 0
            width = max([header, *(line.widths[i] for line in self._lines.values())])
            if width != column.content_width:
                column.content_width = width
                changed = True
        if changed:
            self._layout_version += 1
            self.virtual_size = Size(sum(c.render_width for c in self.columns), 1 + len(self._keys))
            self.refresh()

    def _refresh_rows(self, indices: list[int]) -> None:
        width, height = self.size
        if not height:
            # Off screen (a hidden tab: Textual maps no region for it, and keeps the lines it last drew). A
            # line's repaint would be cut to nothing and the old lines would come back when shown: drop them
            # all, so the table is drawn from its rows when it is shown again.
            self.refresh()
            return
        top = round(self.scroll_y)
        regions = [Region(0, y, width, 1) for y in (1 + index - top for index in indices) if 1 <= y < height]
        if regions:
            self.refresh(*regions)

    # -- drawing

    def _restyled(self) -> None:
        # this table repaints only lines of its own: a whole repaint or a style update reads the look again,
        # and while the look stays the same, rendered cells and lines stay valid
        self._look_stale = True
        super()._restyled()

    def _read_look(self) -> TableStyles:
        if self._look is None or self._look_stale:
            self._look_stale = False
            get = self.get_component_rich_style
            cursor = get("keyed-table--cursor")
            look = TableStyles(base=self.rich_style, header=get("keyed-table--header"),
                               even=get("keyed-table--even-row"), odd=get("keyed-table--odd-row"),
                               cursor=Style() + cursor, cursor_post=Style.from_color(color=cursor.color)
                               + Style.from_color(bgcolor=cursor.bgcolor))
            if look != self._look:
                self._look = look
                self._look_version += 1
                self._extends.clear()
        return self._look

    def render_lines(self, crop: Region) -> list[Strip]:
        self._read_look()
        self._frame = (self.size.width, *self.scroll_offset)
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        look = self._read_look()
        width, scroll_x, scroll_y = self._frame or (self.size.width, *self.scroll_offset)
        if y == 0:
            index, line = HEADER, self._header
        else:
            index = y - 1 + scroll_y
            if index >= len(self._keys):
                return self._blank(width, look)
            line = self._lines[self._keys[index]]
        cursor = self.show_cursor and index == self.cursor_row
        rendered_for = (index, cursor, self._look_version, self._layout_version, self._filters)
        if line.rendered_for != rendered_for:
            line.rendered_for = rendered_for
            line.segments = [None] * len(self.columns)
            line.styles = [None] * len(self.columns)
            line.strip = None
        if line.strip is None or line.strip_for != (width, scroll_x):
            strip = self._render_row(line, index, cursor, look, width)
            if scroll_x or strip.cell_length > width:
                strip = strip.crop(scroll_x, scroll_x + width)
            if strip.cell_length != width:
                strip = strip.adjust_cell_length(width, self._filtered(look.base))
            line.strip = strip
            line.strip_for = (width, scroll_x)
        return line.strip

    def _render_row(self, line: _Line, index: int, cursor: bool, look: TableStyles, width: int) -> Strip:
        row_style = look.header if index == HEADER else look.odd if index % 2 else look.even
        component, post = (look.cursor, look.cursor_post) if cursor else (NO_STYLE, NO_STYLE)
        app = self.app
        console = app.console
        options: ConsoleOptions | None = None
        filters, background = self._filters
        segments: list[Segment] = []
        table_width = 0
        for i, column in enumerate(self.columns):
            if column.hidden:
                continue
            cell = line.segments[i]
            column_width = column.render_width
            if cell is None:
                style = line.styles[i]
                if style is None:
                    style = line.styles[i] = row_style + self._meta(index, i) + component
                text = line.texts[i]
                # A figure that comes back (a utilisation, a power draw, a memory bar) is rendered once at its place
                key = (text.plain, text.style, tuple(text.spans), text.justify, text.overflow, text.no_wrap,
                       text.end, text.tab_size, column_width, style, post, filters, background)
                cell = self._rendered.get(key)
                if cell is None:
                    if options is None:
                        options = app.console_options
                    cell = render_cell(console, options, text, column_width, style, post)
                    for line_filter in filters:  # each segment alone (bare_lines.SEGMENT_FILTERS)
                        cell = line_filter.apply(cell, background)  # type: ignore[arg-type]
                    if len(self._rendered) >= RENDERED_CELLS:
                        self._rendered.clear()
                    self._rendered[key] = cell
                line.segments[i] = cell
            segments += cell
            table_width += column_width  # a rendered cell is as wide as its column (render_cell)
        extend_key = (index, row_style, component, filters, background)
        extend = self._extends.get(extend_key)
        if extend is None:
            extend = self._extends[extend_key] = self._filtered(row_style + component + Style.from_meta(
                {"row": index, "column": 0, "out_of_bounds": True}))
        segments.append(Segment(" " * max(0, width - table_width), extend))
        return Strip(segments, max(width, table_width))

    def _filtered(self, style: Style) -> Style | None:
        """A style as the line filters this table applies make it."""
        filters, background = self._filters
        segments = [Segment(" ", style)]
        for line_filter in filters:
            segments = line_filter.apply(segments, background)  # type: ignore[arg-type]
        return segments[0].style

    def _blank(self, width: int, look: TableStyles) -> Strip:
        """A line below the last row."""
        key = (width, look.base, self._filters)
        if self._blank_line is None or self._blank_line[0] != key:
            self._blank_line = (key, Strip.blank(width, self._filtered(look.base)))
        return self._blank_line[1]

    def _meta(self, row: int, column: int) -> Style:
        """The meta DataTable gives a cell's segments (where a click landed)."""
        meta = self._metas.get((row, column))
        if meta is None:
            meta = self._metas[row, column] = Style.from_meta({"row": row, "column": column})
        return meta

    # -- cursor and scrolling: with a cursor the keys move it, without they scroll

    def _scroll_to_row(self, row: int) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)
        top = round(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False, immediate=True)

    def action_scroll_up(self) -> None:
        if self.show_cursor:
            self.move_cursor(self.cursor_row - 1)
        else:
            super().action_scroll_up()

    def action_scroll_down(self) -> None:
        if self.show_cursor:
            self.move_cursor(self.cursor_row + 1)
        else:
            super().action_scroll_down()

    def action_page_up(self) -> None:
        if self.show_cursor:
            self.move_cursor(self.cursor_row - max(1, self.scrollable_content_region.height - 1))
        else:
            super().action_page_up()

    def action_page_down(self) -> None:
        if self.show_cursor:
            self.move_cursor(self.cursor_row + max(1, self.scrollable_content_region.height - 1))
        else:
            super().action_page_down()

    def action_scroll_home(self) -> None:
        if self.show_cursor:
            self.move_cursor(0)
        else:
            super().action_scroll_home()

    def action_scroll_end(self) -> None:
        if self.show_cursor:
            self.move_cursor(len(self._keys) - 1)
        else:
            super().action_scroll_end()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if self.show_cursor and offset is not None and offset.y >= 1:
            self.move_cursor(offset.y - 1 + round(self.scroll_y))
