"""A DataTable that is synced to a list of keyed rows: unchanged cells are left alone, so a redraw
of a large table costs only what changed, and the scroll position and cursor survive a rebuild."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

Cell = str | Text
Row = tuple[str, Sequence[Cell]]


class KeyedTable(DataTable[Cell]):
    """Columns are declared by subclasses in ``COLUMNS`` as (key, label, width or None)."""

    COLUMNS: tuple[tuple[str, str, int | None], ...] = ()

    CURSOR = False
    """Whether a row cursor is shown (tables an operator scrolls through)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, zebra_stripes=True, cursor_type="row",
                         show_cursor=self.CURSOR)
        self._keys: list[str] = []
        self._cells: dict[str, list[Cell]] = {}

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
        keys = [k for k, _ in rows]
        if keys == self._keys:
            columns = [c[0] for c in self.COLUMNS]
            for key, cells in rows:
                old = self._cells[key]
                for i, cell in enumerate(cells):
                    if old[i] != cell:
                        self.update_cell(key, columns[i], cell)
                self._cells[key] = list(cells)
            return
        cursor_key = self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None
        scroll = self.scroll_y
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._keys = keys
        self._cells = {k: list(c) for k, c in rows}
        if cursor_key in self._cells:
            self.move_cursor(row=keys.index(cursor_key), animate=False, scroll=False)
        self.scroll_to(y=scroll, animate=False, immediate=True)
