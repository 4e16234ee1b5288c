"""A small terminal for tests: the sequences Textual and kimitui's screen diff write (cursor moves, absolute and
relative, SGR, text), applied to a grid of cells, each cell its character and the SGR state it was written with.
A move right stops at the last column and one left at the first, as a VT100's do."""

from __future__ import annotations

import re

from rich.cells import get_character_cell_size

SEQUENCE = re.compile(r"\x1b\[([0-9;?<=>]*)([A-Za-z])|\x1b\][^\x1b\x07]*(?:\x1b\\|\x07)|\x1b[=>]")


class Terminal:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.cells: list[list[tuple[str, tuple[object, ...]]]] = [[(" ", ())] * width for _ in range(height)]
        self.x = self.y = 0
        self.attrs: frozenset[str] = frozenset()
        self.fg: str | None = None
        self.bg: str | None = None

    def feed(self, data: str) -> None:
        pos = 0
        for match in SEQUENCE.finditer(data):
            self._text(data[pos:match.start()])
            pos = match.end()
            if match.group(2):
                self._csi(match.group(1), match.group(2))
        self._text(data[pos:])

    def _csi(self, params: str, final: str) -> None:
        if params.startswith(("?", "<", "=", ">")):  # private modes (the alternate screen, the kitty keyboard): no cell
            return
        numbers = [int(p) if p else 0 for p in params.split(";")] if params else []
        if final == "H":
            row, col = [*numbers, 1, 1][:2]
            self.y, self.x = max(row, 1) - 1, max(col, 1) - 1
        elif final in "ABCD":
            n = numbers[0] if numbers and numbers[0] else 1
            if final == "A":
                self.y = max(self.y - n, 0)
            elif final == "B":
                self.y = min(self.y + n, self.height - 1)
            elif final == "C":
                self.x = min(self.x + n, self.width - 1)
            else:
                self.x = max(self.x - n, 0)
        elif final == "m":
            self._sgr(numbers or [0])

    def _sgr(self, codes: list[int]) -> None:
        i = 0
        while i < len(codes):
            code = codes[i]
            if code == 0:
                self.attrs, self.fg, self.bg = frozenset(), None, None
            elif code in (38, 48):
                if codes[i + 1] == 5:
                    value, i = f"5;{codes[i + 2]}", i + 2
                else:
                    value, i = f"2;{codes[i + 2]};{codes[i + 3]};{codes[i + 4]}", i + 4
                if code == 38:
                    self.fg = value
                else:
                    self.bg = value
            elif code == 39:
                self.fg = None
            elif code == 49:
                self.bg = None
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = str(code)
            elif 40 <= code <= 47 or 100 <= code <= 107:
                self.bg = str(code)
            else:
                self.attrs = self.attrs | {str(code)}
            i += 1

    def _text(self, text: str) -> None:
        for char in text:
            if char == "\n":
                self.y, self.x = self.y + 1, 0
                continue
            if char == "\r":
                self.x = 0
                continue
            if char == "\b":
                self.x = max(self.x - 1, 0)
                continue
            width = get_character_cell_size(char)
            if width == 0 or not (0 <= self.y < self.height and 0 <= self.x < self.width):
                self.x += width
                continue
            look = (tuple(sorted(self.attrs)), self.fg, self.bg)
            self.cells[self.y][self.x] = (char, look)
            if width == 2 and self.x + 1 < self.width:
                self.cells[self.y][self.x + 1] = ("", look)
            self.x += width

    def text(self) -> str:
        return "\n".join("".join(char for char, _ in row) for row in self.cells)
