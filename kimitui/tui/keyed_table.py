"""A DataTable that is synced to a list of keyed rows: unchanged cells are left alone, so a redraw
of a large table costs only what changed, and the scroll position and cursor survive a rebuild."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.color import Color
from textual.css.styles import RenderStyles
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import Column, ColumnKey, RowKey

Cell = str | Text
Row = tuple[str, Sequence[Cell]]

SegmentLines = list[list[Segment]]

_stamps = count(1)
"""Cell stamps: a new one every time a cell's value is set, unique across tables."""
HEADER_STAMP = 0
"""The header's stamp: the labels are set once, on mount."""


class _FrameRenderStyles(RenderStyles):
    """Component styles for one frame: the Rich style (a walk over every ancestor's styles) is
    computed once, not once a line."""

    _frame_rich_style: Style | None = None

    @property
    def rich_style(self) -> Style:
        if self._frame_rich_style is None:
            self._frame_rich_style = super().rich_style
        return self._frame_rich_style


class KeyedTable(DataTable[Cell]):
    """Columns are declared by subclasses in ``COLUMNS`` as (key, label, width or None).

    Drawing costs only what changed. DataTable forgets every rendered cell whenever any cell changes
    (its render caches are keyed on a table-wide update count), so a live table with a few new values
    a frame would render every visible cell through Rich again each frame. This table also caches
    rendered cells by a stamp that changes only with the cell's own value. And while it renders a
    frame, it computes its CSS-derived styles (which walk every ancestor's styles) once, not once per
    line.
    """

    COLUMNS: tuple[tuple[str, str, int | None], ...] = ()

    CURSOR = False
    """Whether a row cursor is shown (tables an operator scrolls through)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        # Before DataTable's __init__: its reactive watchers clear the caches.
        self._cell_cache: LRUCache[tuple[object, ...], SegmentLines] = LRUCache(4096)
        self._stamps: dict[str, list[int]] = {}
        """Per row key, per column: the stamp of the value the cell holds."""
        self._frame_styles: dict[object, object] | None = None
        """Styles, size and columns, computed once during the frame being rendered (None outside
        ``render_lines``)."""
        super().__init__(id=id, classes=classes, zebra_stripes=True, cursor_type="row",
                         show_cursor=self.CURSOR)
        self._keys: list[str] = []
        self._cells: dict[str, Sequence[Cell]] = {}

    def on_mount(self) -> None:
        for key, label, width in self.COLUMNS:
            self.add_column(label, key=key, width=width)

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    def cell_text(self, row_key: str, column_key: str) -> str:
        """Plain text of a cell (for tests and copy-out)."""
        cell = self.get_cell(row_key, column_key)
        return cell.plain if isinstance(cell, Text) else str(cell)

    def column_texts(self, column_key: str) -> list[str]:
        return [self.cell_text(k, column_key) for k in self._keys]

    def sync(self, rows: Sequence[Row]) -> None:
        """Show these rows. The same keys in the same order: only the cells that differ are updated
        (a row passed as the very sequence it was last time is skipped). Otherwise the table is
        rebuilt, keeping the cursor on its row and the scroll position."""
        keys = [k for k, _ in rows]
        if keys == self._keys:
            columns = [c[0] for c in self.COLUMNS]
            for key, cells in rows:
                old = self._cells[key]
                if cells is old:
                    continue
                for i, cell in enumerate(cells):
                    if old[i] is not cell and old[i] != cell:
                        self.update_cell(key, columns[i], cell)
                self._cells[key] = cells
            return
        cursor_key = self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None
        scroll = self.scroll_y
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._keys = keys
        self._cells = dict(rows)
        self._stamps = {k: [next(_stamps) for _ in cells] for k, cells in rows}
        if cursor_key in self._cells:
            self.move_cursor(row=keys.index(cursor_key), animate=False, scroll=False)
        self.scroll_to(y=scroll, animate=False, immediate=True)

    # -- rendering

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Cell, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)
        stamps = self._stamps.get(row_key.value if isinstance(row_key, RowKey) else row_key)
        column = self._column_locations.get(
            column_key if isinstance(column_key, ColumnKey) else ColumnKey(column_key))
        if stamps is not None and column is not None and column < len(stamps):
            stamps[column] = next(_stamps)

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cell_cache.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_styles = {}
        try:
            return super().render_lines(crop)
        finally:
            self._frame_styles = None

    @property
    def rich_style(self) -> Style:
        styles = self._frame_styles
        if styles is None:
            return super().rich_style
        style = styles.get("rich_style")
        if style is None:
            style = styles["rich_style"] = super().rich_style
        assert isinstance(style, Style)
        return style

    @property
    def size(self) -> Size:
        styles = self._frame_styles
        if styles is None:
            return super().size
        size = styles.get("size")
        if size is None:
            size = styles["size"] = super().size
        assert isinstance(size, Size)
        return size

    @property
    def ordered_columns(self) -> list[Column]:
        styles = self._frame_styles
        if styles is None:
            return super().ordered_columns
        columns = styles.get("ordered_columns")
        if columns is None:
            columns = styles["ordered_columns"] = super().ordered_columns
        return columns  # type: ignore[return-value]

    @property
    def background_colors(self) -> tuple[Color, Color]:
        styles = self._frame_styles
        if styles is None:
            return super().background_colors
        colors = styles.get("background_colors")
        if colors is None:
            colors = styles["background_colors"] = super().background_colors
        return colors  # type: ignore[return-value]

    def get_component_styles(self, *names: str) -> RenderStyles:
        styles = self._frame_styles
        if styles is None:
            return super().get_component_styles(*names)
        key = ("component", names)
        component = styles.get(key)
        if component is None:
            plain = super().get_component_styles(*names)
            component = styles[key] = _FrameRenderStyles(plain.node, plain.base, plain.inline)
        assert isinstance(component, RenderStyles)
        return component

    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        styles = self._frame_styles
        if styles is None:
            return super()._get_row_style(row_index, base_style)
        # What DataTable's choice depends on: header, fixed, or which zebra stripe (else the base).
        kind = -1 if row_index == -1 else -2 if row_index < self.fixed_rows else row_index % 2
        key = ("row_style", kind, self.zebra_stripes, base_style)
        style = styles.get(key)
        if style is None:
            style = styles[key] = super()._get_row_style(row_index, base_style)
        assert isinstance(style, Style)
        return style

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> SegmentLines:
        """DataTable's cell rendering, cached by the cell's stamp rather than the table's update count
        (row labels and cells set other than through ``sync`` go to DataTable's own cache)."""
        stamp: int | None = None
        if row_index == -1:
            stamp = HEADER_STAMP
        else:
            row_key = self._row_locations.get_key(row_index)
            stamps = self._stamps.get(row_key.value) if row_key is not None and row_key.value else None
            if stamps is not None and column_index < len(stamps):
                stamp = stamps[column_index]
        if stamp is None or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (row_index, column_index, stamp, base_style, width, cursor, hover, self._show_hover_cursor,
               self._pseudo_class_state)
        lines = self._cell_cache.get(key)
        if lines is None:
            lines = self._render_text_cell(row_index, column_index, base_style, width, cursor, hover)
            if lines is None:
                lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._cell_cache[key] = lines
        return lines

    def _render_text_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                          cursor: bool, hover: bool) -> SegmentLines | None:
        """What DataTable's ``_render_cell`` renders for a body cell holding a Text in a row one line
        high, without Rich's generic rendering: the same Text.wrap and Text.render, then the same
        steps as its Padding, Styled and Console.render_lines wrappers, inlined (a third of the time;
        tests/test_tui_render.py holds the two to the same output). None: not that case."""
        if row_index < self.fixed_rows or column_index < self.fixed_columns or column_index < 0:
            return None
        row_key = self._row_locations.get_key(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        if row is None or row.height != 1:
            return None
        cells = self._get_row_renderables(row_index).cells
        cell = cells[column_index] if column_index < len(cells) else None
        pad = self.cell_padding
        inner = width - 2 * pad
        if not isinstance(cell, Text) or inner < 1:
            return None
        console = self.app.console
        options = self.app.console_options
        # Text.__rich_console__ with DataTable's options (width, one line, no_wrap)
        tab_size = console.tab_size if cell.tab_size is None else cell.tab_size
        wrapped = cell.wrap(console, inner, justify=cell.justify or options.justify or "default",
                            overflow=cell.overflow or options.overflow or "fold", tab_size=tab_size or 8,
                            no_wrap=True if cell.no_wrap is None else cell.no_wrap)
        segments = list(Text("\n").join(wrapped).render(console, end=cell.end))
        # Padding(cell, (0, pad)): its inner Console.render_lines (padded, first line only), then the
        # padding either side, in its style ("none", the null style)
        null = Style.null()
        text_line = next(Segment.split_and_crop_lines(segments, inner, include_new_lines=False, pad=True,
                                                      style=null), None)
        if text_line is None:
            text_line = [Segment(" " * inner, null)]
        side = Segment(" " * pad, null) if pad else None
        padded = [side, *text_line, side] if side is not None else text_line
        # Styled(pre_style=base + meta + component, post_style), then Console.render_lines at width
        base_style += Style.from_meta({"row": row_index, "column": column_index})
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        styled = Segment.apply_style([*padded, Segment.line()], style=base_style + component_style,
                                     post_style=post_style)
        line = next(Segment.split_and_crop_lines(styled, width, include_new_lines=False, pad=True), None)
        return [line if line is not None else [Segment(" " * width)]]
