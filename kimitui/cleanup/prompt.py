"""Consent on a terminal for ``kimitui cleanup``: each step's preview, y/N, then the pids to untick.

The terminal is read through the event loop (``loop.add_reader``), never by a thread blocked in
``readline``: Ctrl-C cancels a prompt at once, and nothing is left waiting for Enter when the command ends.
"""

from __future__ import annotations

import asyncio
import io
import os
from typing import TextIO

from kimitui.cleanup.consent import ConsentCallback, ConsentDecision, is_optional
from kimitui.core.describe import Started, preview_text, unknown_start
from kimitui.core.events import StepPreview
from kimitui.core.printable import printable


def parse_ticks(answer: str, preview: StepPreview) -> list[int]:
    """The pids kept after an untick answer: ``123 456`` (or ``-123``) unticks targets, ``+789`` ticks in an
    optional spared process (an NVML monitor). Raises ValueError on anything else."""
    keep = [r.pid for r in preview.targets]
    optional = {r.pid for r in preview.spared if is_optional(r)}
    for token in answer.replace(",", " ").split():
        add = token.startswith("+")
        pid = int(token.lstrip("+-"))
        if add:
            if pid not in optional:
                raise ValueError(f"{pid} is not an optional process of this preview")
            if pid not in keep:
                keep.append(pid)
        elif pid in keep:
            keep.remove(pid)
        else:
            raise ValueError(f"{pid} is not in this preview")
    return keep


class LineReader:
    """Lines of a terminal (or pipe) read as the event loop sees them arrive; a stream without a file
    descriptor (an ``io.StringIO``) is read directly. An empty string is the end of the input."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._buf = b""
        self._eof = False

    def _fd(self) -> int | None:
        try:
            return self.stream.fileno()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return None

    async def readline(self) -> str:
        fd = self._fd()
        if fd is None:
            return self.stream.readline()
        loop = asyncio.get_running_loop()
        while b"\n" not in self._buf and not self._eof:
            ready: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = ready) -> None:
                if not fut.done():
                    fut.set_result(None)

            try:
                loop.add_reader(fd, wake)
            except (PermissionError, ValueError, NotImplementedError):  # a regular file: reading cannot block
                wake()
            try:
                await ready
            finally:
                loop.remove_reader(fd)
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            except OSError:  # the terminal went away (EIO on a hung-up pty): the end of the input
                chunk = b""
            self._eof = not chunk
            self._buf += chunk
        line, newline, self._buf = self._buf.partition(b"\n")
        return (line + newline).decode(errors="replace")


def terminal_consent(operator: str, show_table: bool, stdin: TextIO, stderr: TextIO,
                     started: Started = unknown_start) -> ConsentCallback:
    """Ask per step on the terminal: y/N, then pids to untick (the telemetry keeps flowing meanwhile).
    With ``show_table`` (stdout carries JSON) each preview's table is written to stderr first."""
    reader = LineReader(stdin)

    async def ask(prompt: str) -> str:
        stderr.write(prompt)
        stderr.flush()
        return (await reader.readline()).strip()

    async def decide(preview: StepPreview) -> ConsentDecision:
        if show_table:
            stderr.write(preview_text(preview, started) + "\n")
        answer = (await ask(f"{preview.step}: proceed? [y/N] ")).lower()
        if answer not in ("y", "yes"):
            return ConsentDecision(False, None, operator, "declined on the terminal")
        if not preview.targets and not any(is_optional(r) for r in preview.spared):
            return ConsentDecision(True, None, operator, "confirmed on the terminal")
        while True:
            ticks = await ask("pids to untick (+PID ticks in an optional one; Enter keeps the preview): ")
            try:
                pids = parse_ticks(ticks, preview)
            except ValueError as exc:
                stderr.write(f"  {printable(str(exc))}\n")
                continue
            if not ticks:
                return ConsentDecision(True, None, operator, "confirmed on the terminal")
            return ConsentDecision(True, pids, operator, f"confirmed on the terminal, edited: {ticks}")

    return decide
