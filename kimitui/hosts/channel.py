"""What a host and its agent link both speak of: the channel a transport opens, the names of processes on
the host, and the errors a request ends in.

``kimitui.hosts.base`` (the host interface, which makes its link on first use) and ``kimitui.hosts.link``
(the link, which opens its channel through the host) both build on this module, so neither needs the other
for them; ``base`` re-exports every name here, the one place callers import them from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ProcId:
    pid: int
    start_time: int
    """Clock ticks after boot, /proc/PID/stat field 22."""


@dataclass(frozen=True, slots=True)
class AncestorProcess:
    """An ancestor of the agent on the host (what its hello names, from its parent up to PID 1): over SSH
    the login's shell and sshd processes, locally kimitui itself and its parents. The agent refuses to
    signal these; the cleanup protects them too."""

    pid: int
    start_time: int
    ppid: int
    comm: str

    @property
    def proc_id(self) -> ProcId:
        return ProcId(self.pid, self.start_time)


class HostError(Exception):
    """The host could not be reached or a request failed there (one clear line)."""


class HostFatal(HostError):
    """Another attempt cannot fix this (host key, authentication, a name that does not resolve, no usable
    python on the host): the host stops retrying and says it once."""


class OutcomeUnknown(HostError):
    """The channel dropped (or stopped answering) with this request in flight: it may or may not have been
    carried out. It is never resent; the caller looks again (re-scans) once the host is back."""

    late: asyncio.Future[Any] | None = None
    """When the channel is still up (the reply only came too late): the agent's reply should it come after
    all (its raw message; ``late_signal_result`` reads a signal's). None when no reply can come."""


class RequestFailed(HostError):
    """The agent answered the request with an error; ``kind`` is its class (bad_request, not_found,
    permission, timeout, nodriver, too_large, error)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


class Channel(Protocol):
    """The agent's stdin and stdout on the host (what a transport opens)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None:
        """Wait until what was written can be sent; HostError when the channel is gone."""

    async def readline(self) -> bytes:
        """One line with its newline; b"" at the end; HostError when the transport fails."""

    async def close(self) -> None:
        """End of input for the agent (it ends its workers and exits), then the channel is closed."""

    async def wait_exit(self, timeout: float) -> int | None:
        """The agent's exit status once it has exited (None if it has not within the timeout)."""

    def stderr_tail(self) -> str: ...

    def end_reason(self) -> str:
        """Why the channel ended, in a few words (a dropped connection, the agent's exit)."""


StateCallback = Callable[[str, str], None]
Sleep = Callable[[float], Awaitable[None]]
