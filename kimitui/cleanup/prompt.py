"""Consent on a terminal for ``kimitui cleanup``: each step's preview, then one question at a time (go ahead?
as previewed? which pids to leave out or add?), each asked again after an answer it cannot take.

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
    """The pids kept after an answer that changes the preview: ``123 456`` (or ``-123``) leaves targets out,
    ``+789`` ticks in an optional spared process (an NVML monitor, one that dies with a target). Raises
    ValueError, one line naming the token, on anything else."""
    keep = [r.pid for r in preview.targets]
    optional = {r.pid for r in preview.spared if is_optional(r)}
    for token in answer.replace(",", " ").split():
        add = token.startswith("+")
        digits = token.lstrip("+-")
        if not digits.isdigit():
            raise ValueError(f"{token!r} is not a pid (give pids like 1234, -1234 or +1234)")
        pid = int(digits)
        if add:
            if pid not in optional:
                raise ValueError(f"{pid} is not an optional process of this preview")
            if pid not in keep:
                keep.append(pid)
        elif pid in keep:
            keep.remove(pid)
        else:
            raise ValueError(f"{pid} is not in this preview's list to signal")
    return keep


YES, NO = ("y", "yes"), ("n", "no")


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
                     started: Started = unknown_start, width: int | None = None) -> ConsentCallback:
    """Ask per step on the terminal, one question at a time, each asked again after an answer it cannot take
    (the telemetry keeps flowing meanwhile): go ahead with this step? Then, when there is a list, as
    previewed? Then, only if not, which pids to leave out or tick in. With ``show_table`` (stdout carries
    JSON) each preview's table is written to stderr first, fitted to ``width``."""
    reader = LineReader(stdin)

    async def ask(prompt: str) -> str | None:
        """The answer, stripped; None at the end of the input."""
        stderr.write(prompt)
        stderr.flush()
        line = await reader.readline()
        return None if line == "" else line.strip()

    async def choose(prompt: str, default: bool) -> bool | None:
        while True:
            answer = await ask(prompt)
            if answer is None:
                return None
            if not answer:
                return default
            if answer.lower() in YES:
                return True
            if answer.lower() in NO:
                return False
            stderr.write(f"  {printable(repr(answer))}: answer y or n\n")

    async def decide(preview: StepPreview) -> ConsentDecision:
        if show_table:
            stderr.write(preview_text(preview, started, width) + "\n")
        go = await choose(f"{preview.step}: go ahead with this step? [y/N] ", False)
        if not go:
            why = "declined on the terminal" if go is False else "declined: the terminal's input ended"
            return ConsentDecision(False, None, operator, why)
        optional = [r.pid for r in preview.spared if is_optional(r)]
        if not preview.targets and not optional:
            return ConsentDecision(True, None, operator, "confirmed on the terminal")
        listed = f"the {len(preview.targets)} listed to signal" if preview.targets else "nothing listed to signal"
        extra = f" and none of the {len(optional)} optional ones" if optional else ""
        as_is = await choose(f"{preview.step}: {listed}{extra}, as previewed? [Y/n] ", True)
        if as_is is None:
            return ConsentDecision(False, None, operator, "declined: the terminal's input ended")
        if as_is:
            return ConsentDecision(True, None, operator, "confirmed on the terminal")
        while True:
            ticks = await ask(f"{preview.step}: pids to leave out (1234), or optional ones to add (+1234); "
                              "Enter for none: ")
            if ticks is None:
                return ConsentDecision(False, None, operator, "declined: the terminal's input ended")
            try:
                pids = parse_ticks(ticks, preview)
            except ValueError as exc:
                stderr.write(f"  {printable(str(exc))}\n")
                continue
            if not ticks:
                return ConsentDecision(True, None, operator, "confirmed on the terminal")
            return ConsentDecision(True, pids, operator, f"confirmed on the terminal, edited: {ticks}")

    return decide
