"""A command's one-line error and its output written whole (``report -o``, ``compare -o``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def check_writable(path: Path, option: str) -> None:
    """CliError (one line) when ``path`` cannot be a file written: a directory, a folder that is missing."""
    if path.is_dir():
        raise CliError(f"{option} {path}: is a directory; give the file to write")
    if not path.parent.is_dir():
        raise CliError(f"{option} {path}: no such directory {path.parent}")


def write_whole(path: Path, text: str, option: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, renamed over it); CliError (one
    line) when it cannot be written, with nothing left behind."""
    check_writable(path, option)
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: written to, never replaced
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CliError(f"{option} {path}: {exc.strerror or exc}") from None
        return
    path = Path(os.path.realpath(path))  # a symlink to the report keeps pointing at it
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise CliError(f"{option} {path}: {exc.strerror or exc}") from None
