"""An error from a library, in words a user reads: ``[Errno 111] Connect call failed ('127.0.0.1', 8000)`` and
``All connection attempts failed`` say "connection refused" (or what the errno means), a JSON decoder's
``Unterminated string starting at`` is not followed by a second "at"."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import ssl

_ERRNO = re.compile(r"\[Errno (-?\d+)\]\s*")


def os_words(message: str) -> str:
    """``message`` with each ``[Errno N] ...`` said as the errno's words, lower case (``connection refused``);
    a message with no errno number as it is."""
    found = _ERRNO.search(message)
    if found is None:
        return message
    number = int(found.group(1))
    words = os.strerror(number) if number in errno.errorcode else f"error {number}"
    return words[:1].lower() + words[1:]


def exc_words(exc: BaseException) -> str:
    """What went wrong, in words: an OSError's strerror, an errno found in the chain of causes (httpx wraps
    the socket's), a TLS error's own text (its errno is OpenSSL's: 1 is not "operation not permitted"), else
    the exception's own text (its class name when it has none)."""
    gai = unresolved(exc)
    if gai is not None:  # its errno is the resolver's (-2), not the system's, and its text is in the chain too
        return f"the name does not resolve ({resolver_words(gai)})"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):  # an OSError whose errno is OpenSSL's code, not the system's
            return str(seen) or type(seen).__name__
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno in errno.errorcode:
            words = os.strerror(seen.errno)
            return words[:1].lower() + words[1:]
        if _ERRNO.search(str(seen)):
            return os_words(str(seen))
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def resolver_words(exc: socket.gaierror) -> str:
    """The resolver's own words, lower case: ``name or service not known``."""
    words = exc.strerror or str(exc)
    return words[:1].lower() + words[1:]


def unresolved(exc: BaseException) -> socket.gaierror | None:
    """The resolver's error behind ``exc`` (httpx wraps it in httpcore's ConnectError, as an argument and as
    the context), None when the name resolved."""
    todo: list[BaseException] = [exc]
    looked: set[int] = set()
    while todo:
        e = todo.pop()
        if isinstance(e, socket.gaierror):
            return e
        if id(e) not in looked:
            looked.add(id(e))
            todo += [x for x in (e.__cause__, e.__context__, *e.args) if isinstance(x, BaseException)]
    return None


def json_words(exc: json.JSONDecodeError, where: str = "column") -> str:
    """``Expecting value at column 5``: the decoder's message (some end on "at" already), then the place."""
    place = exc.colno if where == "column" else exc.lineno
    return f"{exc.msg.removesuffix(' at')} at {where} {place}"
