"""The one interface every host offers, and the one program that serves it on the host.

A host is reached through a transport (``open_channel``: a local subprocess, an SSH channel) that starts
the agent (kimitui/hostside/agent/, started by kimitui/hosts/launch.py) on the host's own python; every
operation after that is a request on that one channel (``AgentLink``): the sample stream, process scans,
stats, file reads, guarded signals, commands, detached starts, HTTP probes and benchmark workers. Local,
SSH and simulated hosts differ only in the transport.

A process is named by (pid, start time) so a signal can never reach a process that reused the pid, and a
signal request is never resent: when the channel drops with one in flight, it fails with OutcomeUnknown.
"""

from __future__ import annotations

import abc
import asyncio
import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kimitui.hosts.channel import (
    AncestorProcess,
    Channel,
    HostError,
    HostFatal,
    OutcomeUnknown,
    ProcId,
    RequestFailed,
    Sleep,
    StateCallback,
)

if TYPE_CHECKING:
    from kimitui.hosts.link import AgentLink
    from kimitui.hosts.remote_worker import RemoteWorker

__all__ = [
    "BACKOFF", "NO_LIMIT_S", "AncestorProcess", "Channel", "CommandResult", "Host", "HostError", "HostFatal",
    "OutcomeUnknown", "ProcId", "RequestFailed", "SignalDelivery", "SignalResult", "Sleep", "StateCallback",
    "late_signal_result",
]


@dataclass(slots=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


SignalDelivery = Literal["sent", "gone", "mismatch", "refused", "error"]


@dataclass(slots=True)
class SignalResult:
    outcome: SignalDelivery
    detail: str = ""


def late_signal_result(reply: dict[str, Any]) -> SignalResult:
    """What a signal request's late reply says: the agent's outcome, or an error it answered with."""
    if reply.get("ok"):
        res = reply.get("result") or {}
        return SignalResult(str(res.get("outcome")), str(res.get("detail") or ""))
    return SignalResult("error", " ".join(str(reply.get("error") or "request failed").split()))


NO_LIMIT_S = 7 * 86400.0
"""A command's time limit when the caller sets none."""
BACKOFF: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)
"""Seconds before the 1st, 2nd, 3rd, ... attempt after failed ones (the last one repeats)."""


class Host(abc.ABC):
    """A GPU host. Every method is async and safe to call concurrently; they share one agent."""

    name: str = "host"
    python: str = "python3"
    """The interpreter that runs the agent on the host (``--remote-python``)."""
    is_local: bool = False
    backoff: Sequence[float] = BACKOFF
    first_line_s: float = 30.0
    """How long the agent may take to say hello (a slow login shell, a cold python)."""
    signal_timeout_s: float = 15.0
    """How long a signal request waits for the agent's reply before its outcome is unknown."""
    _link: AgentLink | None = None
    _sleep: Sleep | None = None

    @abc.abstractmethod
    async def open_channel(self, argv: list[str]) -> Channel:
        """Start ARGV on the host with its stdin and stdout as a channel: one attempt (HostFatal when
        another cannot help, HostError otherwise; retries are the link's)."""

    @property
    def link(self) -> AgentLink:
        if self._link is None:
            from kimitui.hosts.link import AgentLink

            self._link = AgentLink(self, sleep=self._sleep or asyncio.sleep)
        return self._link

    def on_state(self, callback: StateCallback) -> Callable[[], None]:
        """Call ``callback(state, detail)`` on every change of the agent channel's state (connecting,
        reconnecting, connected, lost, failed); returns an unsubscriber."""
        return self.link.on_state(callback)

    async def request(self, op: str, fields: dict[str, Any] | None = None, *, timeout: float = 30.0) -> Any:
        """One agent request (see the agent's docstring for its ops and fields): its result; RequestFailed
        when the agent says no, OutcomeUnknown when no answer can come, HostError when the host is out of
        reach. ``timeout`` is how long to wait for the reply."""
        return await self.link.request(op, fields or {}, timeout=timeout)

    # --- the operations -----------------------------------------------------------------------------

    async def run(self, argv: list[str], *, timeout: float | None = 30.0, stdin: bytes | None = None,
                  env: dict[str, str] | None = None) -> CommandResult:
        """Run a command (an argument list, never a shell string) to completion, in its own process group,
        killed with its group on timeout (HostError; None: no limit)."""
        if not argv:
            raise ValueError("empty command")
        limit = NO_LIMIT_S if timeout is None else timeout
        fields: dict[str, Any] = {"argv": [str(a) for a in argv], "timeout": limit}
        if stdin is not None:
            fields["stdin"] = base64.b64encode(stdin).decode("ascii")
        if env:
            fields["env"] = env
        try:
            res = await self.request("run", fields, timeout=limit + 15.0)
        except RequestFailed as exc:
            raise HostError(f"{self.name}: {exc}") from None
        return CommandResult(int(res["rc"]), res["stdout"], res["stderr"])

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """A regular file's bytes (at most MAX_BYTES, else HostError; the agent's cap when None);
        FileNotFoundError / PermissionError as for a local file; HostError for a FIFO, device or directory
        (refused by the agent without waiting on it)."""
        fields: dict[str, Any] = {"path": path}
        if max_bytes is not None:
            fields["max_bytes"] = int(max_bytes)
        try:
            res = await self.request("read_file", fields)
        except RequestFailed as exc:
            if exc.kind == "not_found":
                raise FileNotFoundError(2, "No such file or directory", path) from None
            if exc.kind == "permission":
                raise PermissionError(13, "Permission denied", path) from None
            raise HostError(f"{self.name}: {exc}") from None
        return base64.b64decode(res["data"])

    async def signal(self, proc: ProcId, sig: int, companions: Sequence[ProcId] = ()) -> SignalResult:
        """Send ``sig`` only if (pid, start time) still match, checked by the agent right before (through a
        pidfd), the process is no host daemon then, and what the kernel would end with it (a terminal's
        foreground group, a PID namespace's processes) is all in ``companions``. At most once: OutcomeUnknown
        when the channel drops with the request in flight."""
        res = await self.request("signal", {"pid": proc.pid, "start_time": proc.start_time, "sig": int(sig),
                                            "companions": [[c.pid, c.start_time] for c in companions]},
                                 timeout=self.signal_timeout_s)
        return SignalResult(res["outcome"], res.get("detail") or "")

    async def scan_processes(self) -> dict[str, Any]:
        """The whole process table and who scans it (the agent's scan reply)."""
        return await self.request("scan")  # type: ignore[no-any-return]

    async def stat(self, pids: list[int]) -> dict[int, tuple[int, str]]:
        """{pid: (start time, state)} for those still present; zombies are reported with state Z."""
        if not pids:
            return {}
        res = await self.request("stat", {"pids": [int(p) for p in pids]})
        return {int(k): (int(v[0]), str(v[1])) for k, v in res["procs"].items()}

    async def spawn(self, argv: list[str], *, log: str | None = None, env: dict[str, str] | None = None,
                    cwd: str | None = None) -> ProcId:
        """Start a command detached (its own session, output appended to ``log``), as a service is."""
        try:
            res = await self.request("spawn", {"argv": [str(a) for a in argv], "log": log, "env": env, "cwd": cwd})
        except RequestFailed as exc:
            raise HostError(f"{self.name}: {exc}") from None
        return ProcId(int(res["pid"]), int(res["start_time"] or -1))

    async def http_get(self, url: str, timeout: float = 2.0) -> int | None:
        """The status of GET URL fetched on the host (a service's health endpoint), or None."""
        res = await self.request("http_get", {"url": url, "timeout": timeout}, timeout=timeout + 15.0)
        return res["status"] if isinstance(res["status"], int) else None

    async def start_worker(self, source: bytes | str, args: Sequence[str] = (), env: dict[str, str] | None = None,
                           python: str | None = None, cwd: str | None = None) -> RemoteWorker:
        """Start a Python worker on the host from SOURCE (sent over the channel; nothing is read from the
        host's disk). See ``kimitui.hosts.remote_worker.RemoteWorker`` for the whole contract::

            worker = await host.start_worker(SOURCE, ["--shape", "7168x1024"], {"CUDA_VISIBLE_DEVICES": "0"},
                                             python="/usr/bin/python3")
            async for obj in worker.lines():   # each JSON line the worker prints on stdout
                ...
            rc = worker.returncode             # set once lines() ends (or: rc = await worker.wait())
            await worker.cancel()              # SIGTERM to its process group, SIGKILL after a grace
        """
        return await self.link.start_worker(source, list(args), dict(env or {}), python, cwd)

    async def ancestor_pids(self) -> list[AncestorProcess]:
        """The agent's ancestors (over SSH: the login's shell and sshd processes, and the listening
        sshd), nearest first. The agent refuses to signal them; the cleanup protects them too."""
        hello = await self.link.connect()
        return list(hello.ancestors)

    async def close(self) -> None:
        """End the agent (its workers with it) and release the transport."""
        if self._link is not None:
            await self._link.close()

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
