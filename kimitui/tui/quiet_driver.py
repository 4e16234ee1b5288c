"""Textual's Linux driver, with an input thread that sleeps until there is something to do.

Textual's input thread waits for a key at most 0.1 s at a time, to look at its exit flag and at the key
parser's timeout (a lone Escape is a key only once nothing follows it): ten wake-ups a second while nothing
happens, about a tenth of the dashboard's CPU at 2 Hz. Here it waits for the terminal, for the parser's own
deadline when it has one, and for the exit flag, which wakes it through a pipe when it is set.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from threading import Event
from typing import Any

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class WakingEvent(Event):
    """An Event whose ``set`` also writes a byte to a pipe (a selector waiting on it wakes)."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        try:
            os.write(self._wake_fd, b"x")
        except OSError:
            pass  # the pipe is full (a wake-up is already pending) or closed


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(wake_write, False)
        self._wake_write = wake_write
        self.exit_event = WakingEvent(wake_write)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_read, 512):
                pass
        except OSError:
            pass

    def run_input_thread(self) -> None:
        """Textual's input loop (LinuxDriver.run_input_thread), waiting without a fixed timeout."""
        self._drain_wake()
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        fileno = self.fileno
        EVENT_READ = selectors.EVENT_READ
        parser = XTermParser(self._debug)
        feed = parser.feed
        tick = parser.tick
        decode = getincrementaldecoder("utf-8")().decode
        read = os.read

        def process(selector_events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for last, (key, mask) in loop_last(selector_events):
                if key.fd != fileno:
                    self._drain_wake()
                    continue
                if mask & EVENT_READ:
                    unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:
                        break  # stdin piped and at its end
                    for event in feed(unicode_data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        def timeout() -> float | None:
            deadline = parser._timeout_time
            return None if deadline is None else max(0.0, deadline - get_time())

        try:
            while not self.exit_event.is_set():
                process(selector.select(timeout()))
            selector.unregister(self.fileno)
            process(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _event in feed(""):
                    pass
            except (EOFError, ParseError):
                pass
