"""The machine kimitui runs on: the agent is a child process on this machine's python (or the one named)."""

from __future__ import annotations

import asyncio
import contextlib
import sys

from kimitui.hosts.base import Channel, Host, HostError, HostFatal

STDERR_TAIL = 16384


class ProcessChannel:
    """A child process's stdin and stdout as the agent's channel; its stderr kept (the tail) for errors."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc, self.name = proc, name
        self._err = bytearray()
        self._err_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(Exception):
            while chunk := await self.proc.stderr.read(65536):
                self._err.extend(chunk)
                if len(self._err) > 4 * STDERR_TAIL:
                    del self._err[: len(self._err) - STDERR_TAIL]

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        if self.proc.stdin.is_closing():
            raise HostError(f"{self.name}: the agent's input is closed")
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise HostError(f"{self.name}: the agent is gone ({exc.__class__.__name__})") from None

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        try:
            return await self.proc.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise HostError(f"{self.name}: agent line too long: {exc}") from None

    async def wait_exit(self, timeout: float) -> int | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), timeout)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._err_task), 1.0)
        return self.proc.returncode

    def stderr_tail(self) -> str:
        return bytes(self._err[-STDERR_TAIL:]).decode(errors="replace")

    def end_reason(self) -> str:
        rc = self.proc.returncode
        last = (self.stderr_tail().strip().splitlines() or [""])[-1]
        what = "agent exited" + (f" (status {rc})" if rc is not None else "")
        return f"{what}: {last}" if last else what

    async def close(self) -> None:
        """EOF on its stdin (the agent ends its workers and exits), a grace, then SIGKILL."""
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 8.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        self._err_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._err_task


class LocalHost(Host):
    is_local = True

    def __init__(self, name: str = "local", python: str | None = None) -> None:
        self.name = name
        self.python = python or sys.executable

    async def open_channel(self, argv: list[str]) -> Channel:
        try:
            # a session of its own: a Ctrl-C at the terminal reaches kimitui, which cancels what runs and
            # then closes the agent's stdin; the agent is not interrupted in the middle of a request
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024, start_new_session=True)
        except (FileNotFoundError, PermissionError) as exc:
            raise HostFatal(f"{self.name}: no {argv[0]} on the host ({exc.strerror}); the kimitui agent needs "
                            "python >= 3.8: install one or name it with --remote-python PATH") from None
        except OSError as exc:
            raise HostError(f"{self.name}: cannot start {argv[0]}: {exc}") from None
        return ProcessChannel(proc, self.name)
