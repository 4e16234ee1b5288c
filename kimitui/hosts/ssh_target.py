"""Parsing an SSH target: ``ssh://[user@]host[:port]`` or plain ``[user@]host[:port]``.

The host may be a name, an address, an IPv6 address in brackets (``[::1]:2222``; a bare IPv6 address
without a port is accepted too), or an alias from ~/.ssh/config, which the connection resolves later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HOST_OK = re.compile(r"^[A-Za-z0-9_.%:+-]+$")


@dataclass(frozen=True, slots=True)
class SshTarget:
    host: str
    """A name, an address (IPv6 without brackets) or a ~/.ssh/config alias."""
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port is not None else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{user}{host}{port}"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"ssh://{user}{host}{port}"


def _port(text: str, target: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port {text!r} in SSH target {target!r}")
    return int(text)


def parse_target(text: str) -> SshTarget:
    """Parse ``ssh://[user@]host[:port]`` or ``[user@]host[:port]``; ValueError (one line) when malformed."""
    target = text.strip()
    rest = target[len("ssh://"):] if target.lower().startswith("ssh://") else target
    if rest.endswith("/"):
        rest = rest[:-1]
    if not rest or "/" in rest or any(c.isspace() for c in rest):
        raise ValueError(f"bad SSH target {text!r}: expected ssh://[user@]host[:port] or [user@]host[:port]")
    user: str | None = None
    if "@" in rest:
        user, _, rest = rest.rpartition("@")
        if not user:
            raise ValueError(f"empty user name in SSH target {text!r}")
    port: int | None = None
    if rest.startswith("["):
        host, sep, after = rest[1:].partition("]")
        if not sep or not host:
            raise ValueError(f"unclosed '[' in SSH target {text!r}")
        if after:
            if not after.startswith(":"):
                raise ValueError(f"unexpected {after!r} after ']' in SSH target {text!r}")
            port = _port(after[1:], text)
    elif rest.count(":") == 1:
        host, _, port_s = rest.partition(":")
        port = _port(port_s, text)
    else:
        host = rest  # a name, or a bare IPv6 address (two or more colons) without a port
    if not host or not _HOST_OK.match(host) or host.startswith("-"):
        raise ValueError(f"bad host {host!r} in SSH target {text!r}")
    return SshTarget(host, user, port)
