"""What goes out on stdout: one JSON object a line, each line one write(2) (whole, whatever thread or
forked rank writes it).

The agent's lines start with the token the caller sent (``line_tag``: only lines that start with it are the
agent's), then ``t`` and ``type``; a worker's lines (``event``) start with ``type``, then ``t``, and the
agent forwards them as worker_line.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = 2
TOKEN_RE = re.compile(r"[0-9a-f]*\Z")
_OUT = threading.Lock()
_TAG = ""
"""What every line the agent writes starts with in place of its ``{``: ``{"k":"TOKEN",`` (line_tag), or ``{``."""


def line_tag(token: str) -> bytes:
    """How every line of an agent started with TOKEN begins: ``{"k":"TOKEN",`` then the rest of its JSON
    object. Nothing but the agent knows the token (it came on the agent's stdin), so a line a login shell
    or a process it left behind prints is told apart by its first bytes."""
    return b'{"k":"%s",' % token.encode("ascii")


def set_token(token: str) -> None:
    global _TAG
    _TAG = line_tag(token).decode("ascii") if token and TOKEN_RE.match(token) else ""


def err(exc: BaseException) -> str:
    """An exception as one line: ``Type: message``."""
    return " ".join((f"{type(exc).__name__}: {exc}").split()).rstrip(":")


def write_line(line: str) -> None:
    """One line to stdout in one write(2) where the pipe takes it whole (up to 4 KiB: atomic, so lines of
    forked processes never interleave), else in as many as it needs, never mixed with another thread's.
    BrokenPipeError when the reader is gone."""
    data = line.encode("utf-8")
    with _OUT:
        while data:
            try:
                n = os.write(1, data)
            except InterruptedError:
                continue
            data = data[n:]


def emit(obj: dict[str, Any]) -> None:
    """The agent's line: OBJ as compact JSON, tagged with the token."""
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    if _TAG:
        line = _TAG + line[1:]  # every object written is non-empty: after its "{" comes its first key
    write_line(line)


def log(level: str, message: str) -> None:
    """A warning of the agent's (the LogLine shape)."""
    emit({"t": time.time(), "type": "log", "level": level, "source": "agent", "message": message})


def event(kind: str, **fields: object) -> None:
    """A worker's line: ``{"type": KIND, "t": now, **FIELDS}``. The caller gone (a broken pipe), the
    worker exits at once: nobody reads what it would measure."""
    try:
        write_line(json.dumps(dict({"type": kind, "t": time.time()}, **fields), separators=(",", ":")) + "\n")
    except BrokenPipeError:
        os._exit(0)


def event_log(level: str, message: str) -> None:
    """A worker's log line."""
    event("log", level=level, message=message)
