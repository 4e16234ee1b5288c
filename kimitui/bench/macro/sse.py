"""A small, fast Server-Sent Events splitter for OpenAI-style streams.

It works on raw bytes: split on ``\\n`` (a trailing ``\\r`` is dropped, so CRLF works), collect ``data:``
lines (several ``data:`` lines of one event are joined with ``\\n``, as the SSE spec says), ignore comments
(``:``) and the other fields (``event:``, ``id:``, ``retry:``), and hand out one payload per blank line.
A lone ``\\r`` as a line end (legal SSE, never sent by vLLM or OpenAI) is not supported.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEDecoder:
    """Feed it byte blocks as they arrive; it returns the data payloads of the events they complete."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, block: bytes) -> list[bytes]:
        buf = self._buf + block if self._buf else block
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
        return out

    def flush(self) -> list[bytes]:
        """At the end of the stream: the payload of a last event that had no blank line after it, if any
        (the spec drops it; servers that forget the final blank line are common enough to accept it)."""
        rest = self.feed(b"\n\n") if self._buf or self._data else []
        self._buf = b""
        return rest

    @property
    def pending(self) -> bool:
        return bool(self._buf or self._data)
