"""What a request may carry and how it fails: its argv and env checked, a regular file read without
waiting on anything else, the error a request answers with (its kind)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


READ_FILE_MAX_BYTES = 16 << 20
"""read_file's cap when the request names none (a pidfile's reader asks for 64 KiB)."""
_FILE_KINDS = ((0o010000, "a FIFO"), (0o040000, "a directory"), (0o020000, "a character device"),
               (0o060000, "a block device"), (0o140000, "a socket"))


class NotRegularFile(OSError):
    """The path names a FIFO, device, socket or directory: reading it could block or have side effects."""


def _file_kind(mode: int) -> str:
    import stat

    fmt = stat.S_IFMT(mode)
    return next((name for bits, name in _FILE_KINDS if bits == fmt), "not a regular file")


def read_regular_file(path: str, limit: int) -> bytes:
    """At most LIMIT bytes of a regular file. Anything else is refused before it is opened, and the open
    itself never waits (O_NONBLOCK: a FIFO swapped in after the check opens at once and is refused by its
    fstat): a FIFO would block the read until a writer came."""
    import stat

    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(_file_kind(mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(_file_kind(mode))
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class RequestError(Exception):
    def __init__(self, message: str, kind: str = "error") -> None:
        Exception.__init__(self, message)
        self.kind = kind


def argv_of(req: dict[str, Any]) -> list[str]:
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise RequestError("argv must be a non-empty list of strings", "bad_request")
    return argv


def env_with(extra: Any) -> dict[str, str]:
    env = dict(os.environ)
    if extra:
        if not isinstance(extra, dict):
            raise RequestError("env must be an object of strings", "bad_request")
        env.update({str(k): str(v) for k, v in extra.items()})
    return env

