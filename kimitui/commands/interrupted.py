"""Ctrl-C before a command has started: one line on standard error and exit status 130 (128 + SIGINT),
not a ``KeyboardInterrupt`` traceback. A second Ctrl-C while it is said is ignored: the process is ending."""

from __future__ import annotations

import contextlib
import signal
import sys

INTERRUPTED_STATUS = 130


def interrupted() -> int:
    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        print("kimitui: interrupted before the command started", file=sys.stderr)
    return INTERRUPTED_STATUS
