"""What the micro runner needs of a host: the host program's worker requests.

``worker = await host.start_worker(source, args, env, python)`` runs a self-contained worker program on the
GPU host (its source sent over the channel, its own process group), ``async for obj in worker.lines()``
streams its JSON lines back, ``await worker.cancel()`` ends the group (SIGTERM, then SIGKILL), and
``worker.returncode`` / ``worker.stderr_tail`` say how it ended. Every host (local, SSH, simulated) offers
it through its agent; see ``kimitui.hosts.remote_worker.RemoteWorker`` for the whole contract.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class WorkerProcess(Protocol):
    returncode: int | None
    stderr_tail: str

    def lines(self) -> AsyncIterator[Any]: ...

    async def cancel(self, grace: float = 5.0) -> int: ...


class WorkerHost(Protocol):
    name: str

    async def start_worker(self, source: bytes | str, args: Sequence[str] = (), env: dict[str, str] | None = None,
                           python: str | None = None, cwd: str | None = None) -> Any: ...

    async def request(self, op: str, fields: dict[str, Any] | None = None, *, timeout: float = 30.0) -> Any: ...
