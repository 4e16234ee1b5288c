"""A Python worker the agent runs on the host (``Host.start_worker``, started by ``AgentLink.start_worker``): its
lines, its exit, its cancel; what is unknown of it when the channel drops (``WorkerLost``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from kimitui.hosts.channel import OutcomeUnknown, RequestFailed


class WorkerLink(Protocol):
    """What a worker needs of its agent's link (``AgentLink``): a request (its cancel)."""

    async def request(self, op: str, fields: dict[str, Any], *, timeout: float = 30.0) -> Any: ...


class WorkerLost(OutcomeUnknown):
    """The channel dropped while the worker ran: the agent ends its workers when its channel closes, but
    what the worker did last is unknown."""


class RemoteWorker:
    """A Python worker the agent runs on the host (``Host.start_worker``).

    The contract (what the micro benchmarks code against):

    - The SOURCE is sent over the channel and written by the agent to a private temporary file, run as
      ``PYTHON -u FILE ARGS...`` (so it is a real ``__main__`` module: dataclasses and multiprocessing
      "spawn" work) with the agent's environment plus ENV and PYTHONUNBUFFERED=1, in a session and process
      group of its own, stdin from /dev/null. PYTHON defaults to the agent's interpreter; name the host's
      python3 that has torch when it differs. A PYTHON that does not exist: HostError at start.
    - ``lines()`` yields, in order, each line the worker writes on stdout: a line that parses as JSON as
      that value (normally a dict), any other line as ``{"text": LINE}``. It ends after the worker's last
      line, when it has exited: then ``returncode`` is set (negative: killed by that signal) and
      ``stderr_tail`` holds the end of its stderr when it exited non-zero. Each line is yielded once (a
      second ``lines()`` goes on where the first stopped).
    - ``wait()`` returns the exit status (lines not consumed are kept for ``lines()``).
    - ``cancel(grace)`` sends SIGTERM to the worker's process group, SIGKILL to it after ``grace`` seconds
      if the worker is still there, and returns the exit status (``cancelled`` is then True).
    - When the worker exits, whatever is left in its process group is killed; when the agent's channel
      closes (kimitui exits or the connection drops) the agent ends every worker the same way.
    - When the channel drops while it runs, ``lines()``, ``wait()`` and ``cancel()`` raise WorkerLost
      (a HostError): its outcome is unknown and ``returncode`` stays None.
    """

    def __init__(self, link: WorkerLink, wid: int, host_name: str) -> None:
        self.link = link
        self.host_name = host_name
        self.id = wid
        self.pid: int | None = None
        self.python: str | None = None
        self.returncode: int | None = None
        self.cancelled = False
        self.stderr_tail = ""
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ended = False
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def _line(self, msg: dict[str, Any]) -> None:
        self._queue.put_nowait(msg["data"] if "data" in msg else {"text": msg.get("text", "")})

    def _exit(self, msg: dict[str, Any]) -> None:
        self.returncode = int(msg.get("returncode", -1))
        self.cancelled = bool(msg.get("cancelled"))
        self.stderr_tail = str(msg.get("stderr_tail") or "")
        self._queue.put_nowait(END)
        if not self._done.done():
            self._done.set_result(self.returncode)

    def _lost(self, reason: str) -> None:
        err = WorkerLost(f"{self.host_name}: worker {self.id} (pid {self.pid}): {reason}; its outcome is "
                         "unknown (the agent ends its workers when its channel closes)")
        self._queue.put_nowait(err)
        if not self._done.done():
            self._done.set_exception(err)
            self._done.exception()  # retrieved here: a worker nobody waits on is not an error

    async def lines(self) -> AsyncIterator[Any]:
        while not self._ended:
            item = await self._queue.get()
            if item is END:
                self._ended = True
                return
            if isinstance(item, WorkerLost):
                self._queue.put_nowait(item)  # a later call raises it too
                raise item
            yield item

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    async def cancel(self, grace: float = 5.0) -> int:
        if not self._done.done():
            try:
                await self.link.request("worker_cancel", {"worker": self.id, "grace": grace}, timeout=15.0)
            except RequestFailed:
                pass  # it exited meanwhile: its exit is on the way
        return await asyncio.wait_for(self.wait(), grace + 15.0)


END = object()
"""What a worker's queue gets after its last line."""
