"""A small, fast Server-Sent Events splitter for OpenAI-style streams.

It works on raw bytes: split on ``\\n`` (a trailing ``\\r`` is dropped, so CRLF works), collect ``data:``
lines (several ``data:`` lines of one event are joined with ``\\n``, as the SSE spec says), ignore comments
(``:``) and the other fields (``event:``, ``id:``, ``retry:``), and hand out one payload per blank line.
A lone ``\\r`` as a line end (legal SSE, never sent by vLLM or OpenAI) is not supported.

A line, or an event's data, longer than ``max_line`` (1 MiB; a token chunk is a few hundred bytes) raises
``SSEOverflow`` as soon as the cap is passed: a server that never ends a line costs the cap, not the
stream. The start of a line not yet ended is kept as a list of the pieces that brought it (joined once,
when it ends), so a line that trickles in over many reads is not copied once per read.
"""

from __future__ import annotations

DONE = b"[DONE]"
MAX_LINE = 1 << 20
"""Bytes of one SSE line, and of the data of one event, beyond which the stream is refused."""


class SSEOverflow(ValueError):
    """A line or an event over the cap; its message is the request's failure reason."""


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


class SSEDecoder:
    """Feed it byte blocks as they arrive; it returns the data payloads of the events they complete."""

    __slots__ = ("_data", "_data_size", "_parts", "_parts_size", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._parts: list[bytes] = []
        """The pieces of a line not yet ended."""
        self._parts_size = 0
        self._data: list[bytes] = []
        self._data_size = 0

    def _pend(self, piece: bytes) -> None:
        self._parts.append(piece)
        self._parts_size += len(piece)
        if self._parts_size > self.max_line:
            self._parts.clear()
            raise SSEOverflow(f"SSE line over {_size_text(self.max_line)}")

    def feed(self, block: bytes) -> list[bytes]:
        lines = block.split(b"\n")
        tail = lines.pop()
        if self._parts:
            if not lines:  # the line goes on
                self._pend(tail)
                return []
            self._pend(lines[0])
            lines[0] = b"".join(self._parts)
            self._parts.clear()
            self._parts_size = 0
        if tail:
            self._pend(tail)
        if len(block) > self.max_line and lines and max(map(len, lines)) > self.max_line:
            raise SSEOverflow(f"SSE line over {_size_text(self.max_line)}")  # whole in one (huge) block
        out: list[bytes] = []
        data = self._data
        size = self._data_size
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line[:5] == b"data:":
                piece = line[6:] if line[5:6] == b" " else line[5:]
                if data:  # an event of several data lines: its joined data is capped like a line
                    size += 1 + len(piece)
                    if size > self.max_line:
                        data.clear()
                        raise SSEOverflow(f"SSE event over {_size_text(self.max_line)}")
                else:
                    size = len(piece)
                data.append(piece)
        self._data_size = size
        return out

    def flush(self) -> list[bytes]:
        """At the end of the stream: the payload of a last event that had no blank line after it, if any
        (the spec drops it; servers that forget the final blank line are common enough to accept it)."""
        rest = self.feed(b"\n\n") if self.pending else []
        self._parts.clear()
        self._parts_size = 0
        return rest

    @property
    def pending(self) -> bool:
        return bool(self._parts or self._data)
