"""Starting, streaming and cancelling a benchmark worker on a GPU host.

The runner is written against ``WorkerHost`` / ``WorkerProcess``: the shape of the host program's own
worker requests (``worker = await host.start_worker(source, args, env, python)``, ``async for line in
worker.lines()``, ``await worker.cancel()``, ``worker.returncode``). Until the host program answers those
itself, two stand-ins live here, picked by ``worker_host_for``:

- ``LocalWorkers`` (STAND-IN, to be replaced at merge by the host program's ``start_worker``): an asyncio
  subprocess in its own process group, the worker's source piped on stdin through a bootstrap, stdin left
  open as the worker's liveness channel, stderr kept (its tail explains a failure). Cancel: SIGTERM to every
  process of the group, SIGKILL to what is left after a grace, each process named by (pid, start time) and
  re-checked right before its signal, then wait until none is left.
- ``StreamWorkers`` (STAND-IN for remote hosts): the same bootstrap through ``Host.stream``; cancel closes
  the stream, so the worker's stdin reaches EOF and (``--exit-on-stdin-eof``) it ends its ranks and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from kimitui.hosts.base import Host, HostError, ProcId
from kimitui.hosts.local import LocalHost, signal_local
from kimitui.procfs import parse_stat

WORKER_BOOTSTRAP = (
    "import os,sys\n"
    "def rd(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(0,n-len(b))\n"
    "  if not c:sys.exit(4)\n"
    "  b+=c\n"
    " return b\n"
    "h=b''\n"
    "while not h.endswith(b'\\n'):h+=rd(1)\n"
    "src=rd(int(h))\n"
    "sys.argv=['kimitui-worker']+sys.argv[1:]\n"
    "exec(compile(src,'kimitui-worker','exec'),{'__name__':'__main__','__builtins__':__builtins__})\n"
)
"""``python3 -u -c WORKER_BOOTSTRAP ARGS``: reads ``<length>\\n<source>`` from stdin (unbuffered: nothing past
the source is consumed), then runs it as ``__main__``; the rest of stdin stays open (liveness)."""

STDERR_TAIL = 4096
TERM_GRACE_S = 3.0
GONE_S = 10.0
POLL_S = 0.02


def payload(source: bytes) -> bytes:
    return b"%d\n" % len(source) + source


@runtime_checkable
class WorkerProcess(Protocol):
    returncode: int | None

    def lines(self) -> AsyncIterator[str]: ...

    async def cancel(self) -> None: ...


class WorkerHost(Protocol):
    async def start_worker(self, source: bytes, args: list[str], env: dict[str, str],
                           python: str | None) -> WorkerProcess: ...


# --- the local stand-in ----------------------------------------------------------------------------------


def group_members(pgid: int, born_after: int, proc_root: str = "/proc") -> list[ProcId]:
    """Live processes of process group ``pgid`` started at or after ``born_after`` (clock ticks)."""
    out = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_root}/{name}/stat") as fh:
                text = fh.read()
            st = parse_stat(text)
            pgrp = int(text.rpartition(")")[2].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        if pgrp == pgid and st.state not in ("Z", "X") and st.start_time >= born_after:
            out.append(ProcId(st.pid, st.start_time))
    return out


class LocalWorker:
    """STAND-IN: one worker started by ``LocalWorkers``."""

    def __init__(self, proc: asyncio.subprocess.Process, leader: ProcId) -> None:
        self.proc = proc
        self.leader = leader
        self.returncode: int | None = None
        self.cancelled = False
        self.stderr_tail = ""
        self.signalled: list[tuple[ProcId, str]] = []
        """Every (process, signal) cancel sent (for tests and the log)."""
        self.group_at_cancel: list[ProcId] = []
        """The worker's processes when cancel began (the launcher and its ranks)."""
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    @property
    def pid(self) -> int:
        return self.leader.pid

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self.stderr_tail = (self.stderr_tail + chunk.decode(errors="replace"))[-STDERR_TAIL:]

    async def lines(self) -> AsyncIterator[str]:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            yield line.decode(errors="replace").rstrip("\n")
        self.returncode = await self.proc.wait()
        with contextlib.suppress(Exception):
            await self._stderr_task

    def members(self) -> list[ProcId]:
        return group_members(self.leader.pid, self.leader.start_time)

    async def cancel(self) -> None:
        """SIGTERM every process of the worker's group, SIGKILL what is left after TERM_GRACE_S, then wait
        until none is left (or GONE_S passes: what is left is reported in ``stderr_tail``)."""
        self.cancelled = True
        self.group_at_cancel = self.members()
        for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, GONE_S)):
            targets = self.members()
            for proc in targets:
                if signal_local(proc, sig).outcome == "sent":
                    self.signalled.append((proc, sig.name))
            deadline = time.monotonic() + grace
            while self.members() and time.monotonic() < deadline:
                await asyncio.sleep(POLL_S)
            if not self.members():
                break
        left = self.members()
        if left:
            self.stderr_tail += "\nstill running after SIGKILL: " + ", ".join(str(p.pid) for p in left)
        with contextlib.suppress(ProcessLookupError):
            self.returncode = await asyncio.wait_for(self.proc.wait(), GONE_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stderr_task, GONE_S)


class LocalWorkers:
    """STAND-IN for the host program's ``start_worker`` on this machine (LocalHost and the simulated host):
    the lead replaces it with the host's method at merge."""

    stdin_liveness = True
    """The worker's stdin stays open while the caller lives: workers may exit on its EOF."""

    def __init__(self, python: str, name: str = "local") -> None:
        self.python = python
        self.name = name

    async def start_worker(self, source: bytes, args: list[str], env: dict[str, str],
                           python: str | None = None) -> LocalWorker:
        argv = [python or self.python, "-u", "-c", WORKER_BOOTSTRAP, *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env={**os.environ, **env}, start_new_session=True,
                limit=16 * 1024 * 1024)
        except OSError as exc:
            raise HostError(f"{self.name}: cannot start {argv[0]}: {exc.strerror or exc}") from None
        with open(f"/proc/{proc.pid}/stat") as fh:
            leader = ProcId(proc.pid, parse_stat(fh.read()).start_time)
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload(source))
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died at once: its stderr and exit status say why
        return LocalWorker(proc, leader)


# --- the stream stand-in (remote hosts) --------------------------------------------------------------------


class StreamWorker:
    """STAND-IN: a worker run through ``Host.stream``; its exit status is not known (returncode None)."""

    def __init__(self, stream: AsyncIterator[str]) -> None:
        self.stream = stream
        self.returncode: int | None = None
        self.cancelled = False
        self.stderr_tail = ""

    async def lines(self) -> AsyncIterator[str]:
        async for line in self.stream:
            yield line

    async def cancel(self) -> None:
        self.cancelled = True
        aclose = getattr(self.stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class StreamWorkers:
    """STAND-IN for the host program's ``start_worker`` on a remote host (SSH)."""

    stdin_liveness = True

    def __init__(self, host: Host) -> None:
        self.host = host

    async def start_worker(self, source: bytes, args: list[str], env: dict[str, str],
                           python: str | None = None) -> StreamWorker:
        argv = [python or getattr(self.host, "python", None) or "python3", "-u", "-c", WORKER_BOOTSTRAP, *args]
        if env:
            argv = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]
        return StreamWorker(self.host.stream(argv, stdin=payload(source)))


def worker_host_for(host: Host | Any) -> Any:
    """The host's own ``start_worker`` when it has one (the host program), else a stand-in."""
    if hasattr(host, "start_worker"):
        return host
    if isinstance(host, LocalHost):
        return LocalWorkers(host.python, host.name)
    return StreamWorkers(host)
