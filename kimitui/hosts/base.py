"""The one interface every host offers: run a command, stream its lines, read a file, signal a process.

Commands are argument lists, never shell strings; a remote host quotes them with shlex.join. A process
is named by (pid, start time) so a signal can never reach a process that reused the pid.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ProcId:
    pid: int
    start_time: int
    """Clock ticks after boot, /proc/PID/stat field 22."""


@dataclass(slots=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


SignalOutcome = Literal["sent", "gone", "mismatch", "refused", "error"]


@dataclass(slots=True)
class SignalResult:
    outcome: SignalOutcome
    detail: str = ""


class HostError(Exception):
    """The host could not be reached or a command could not be started there (one clear line)."""


class Host(abc.ABC):
    """A GPU host. Every method is async and safe to call concurrently."""

    name: str = "host"

    @abc.abstractmethod
    async def run(self, argv: list[str], *, timeout: float | None = 30.0,
                  stdin: bytes | None = None) -> CommandResult:
        """Run a command to completion and return its exit status and output."""

    @abc.abstractmethod
    def stream(self, argv: list[str], *, stdin: bytes | None = None) -> AsyncIterator[str]:
        """Run a command and yield its stdout lines (without newline) as they come. ``stdin`` is written
        first and the pipe is left open; closing the iterator (aclose) closes stdin and ends the command."""

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """A file's bytes; raises FileNotFoundError when absent."""

    @abc.abstractmethod
    async def signal(self, proc: ProcId, sig: int) -> SignalResult:
        """Send ``sig`` to the process only if (pid, start time) still match, checked right before."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release the connection and anything started on the host."""

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
