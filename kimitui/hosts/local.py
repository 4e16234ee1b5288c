"""The machine kimitui runs on, through asyncio subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal as signal_mod
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from kimitui.hosts.base import CommandResult, Host, HostError, ProcId, SignalResult
from kimitui.procfs import read_start_time


class LocalHost(Host):
    def __init__(self, name: str = "local", python: str | None = None) -> None:
        self.name = name
        self.python = python or sys.executable

    async def run(self, argv: list[str], *, timeout: float | None = 30.0,
                  stdin: bytes | None = None) -> CommandResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError as exc:
            raise HostError(f"{self.name}: command not found: {argv[0]}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise HostError(f"{self.name}: {argv[0]} timed out after {timeout:.1f}s") from None
        return CommandResult(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))

    async def stream(self, argv: list[str], *, stdin: bytes | None = None) -> AsyncIterator[str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, limit=16 * 1024 * 1024,
            )
        except FileNotFoundError as exc:
            raise HostError(f"{self.name}: command not found: {argv[0]}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            while line := await proc.stdout.readline():
                yield line.decode(errors="replace").rstrip("\n")
        finally:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(Path(path).read_bytes)

    async def signal(self, proc: ProcId, sig: int) -> SignalResult:
        return signal_local(proc, sig)


def signal_local(proc: ProcId, sig: int) -> SignalResult:
    """pidfd first, then the start-time check, then the signal through the pidfd."""
    try:
        fd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return SignalResult("gone")
    except OSError as exc:
        return SignalResult("error", exc.strerror or str(exc))
    try:
        start = read_start_time(proc.pid)
        if start is None:
            return SignalResult("gone")
        if start != proc.start_time:
            return SignalResult("mismatch", f"start time {start}, expected {proc.start_time}")
        try:
            signal_mod.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return SignalResult("gone")
        except PermissionError:
            return SignalResult("error", "permission denied")
        return SignalResult("sent")
    finally:
        os.close(fd)
