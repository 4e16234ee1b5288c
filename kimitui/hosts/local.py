"""The machine kimitui runs on: the agent is a child process on this machine's python (or the one named)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys

from kimitui.hosts.base import Channel, Host, HostError, HostFatal
from kimitui.hosts.prestart import Prestarted, take_prestarted

STDERR_TAIL = 16384


class ProcessChannel:
    """A child process's stdin and stdout as the agent's channel; its stderr kept (the tail) for errors."""

    token: str | None = None
    """Set when the agent was started with its payload already (``prestart_agent``): the token it was sent."""

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


class _AdoptedProcess:
    """A ``subprocess.Popen`` seen as an ``asyncio.subprocess.Process`` (what ProcessChannel reads)."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self._proc, self.stdin, self.stdout, self.stderr = proc, stdin, stdout, stderr
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    async def wait(self) -> int:
        return await asyncio.to_thread(self._proc.wait)

    def kill(self) -> None:
        self._proc.kill()


async def adopt(pre: Prestarted, name: str) -> ProcessChannel:
    """The prestarted agent as a channel; its ``token`` says the payload is sent (the link sends none)."""
    assert pre.proc.stdin is not None and pre.proc.stdout is not None and pre.proc.stderr is not None
    await asyncio.to_thread(pre.writer.join)
    loop = asyncio.get_running_loop()
    out = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(out), pre.proc.stdout)
    err = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(err), pre.proc.stderr)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pre.proc.stdin)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)  # type: ignore[arg-type]
    channel = ProcessChannel(_AdoptedProcess(pre.proc, writer, out, err), name)  # type: ignore[arg-type]
    channel.token = pre.token
    return channel


class LocalHost(Host):
    is_local = True

    def __init__(self, name: str = "local", python: str | None = None) -> None:
        self.name = name
        self.python = python or sys.executable

    async def open_channel(self, argv: list[str]) -> Channel:
        pre = take_prestarted(argv)
        if pre is not None:
            return await adopt(pre, self.name)
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
