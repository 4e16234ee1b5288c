"""A worker: python started from source sent over the channel (worker_start), its stdout streamed back
line by line (worker_line), its end reported (worker_exit)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from ..signals import killpg
from ..wire import emit

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


class HostWorker:
    """One worker: its own session and process group; stdout JSON lines go out tagged with its id."""

    TAIL = 8192

    def __init__(self, wid: int, proc: Any, workdir: str) -> None:
        self.id, self.proc, self.workdir = wid, proc, workdir
        self.lock = threading.Lock()
        self.reaped = False
        self.cancelled = False
        self.exited = threading.Event()
        self.stderr = bytearray()

    def start(self) -> None:
        self.out_thread = threading.Thread(target=self._stdout, daemon=True)
        self.err_thread = threading.Thread(target=self._stderr, daemon=True)
        self.out_thread.start()
        self.err_thread.start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _stdout(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            msg: dict[str, Any] = {"t": time.time(), "type": "worker_line", "worker": self.id}
            try:
                msg["data"] = json.loads(text)
            except ValueError:
                msg["text"] = text
            try:
                emit(msg)
            except (BrokenPipeError, ValueError):
                pass

    def _stderr(self) -> None:
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
            except OSError:
                chunk = b""
            if not chunk:
                return
            self.stderr.extend(chunk)
            if len(self.stderr) > 4 * self.TAIL:
                del self.stderr[: len(self.stderr) - self.TAIL]

    def _wait(self) -> None:
        pid = self.proc.pid
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its group id is still ours
        except ChildProcessError:
            pass
        with self.lock:
            killpg(pid, signal.SIGKILL)  # what is left in its group (a child it started) goes with it
            rc = self.proc.wait()
            self.reaped = True
        self.exited.set()
        self.out_thread.join(5.0)
        self.err_thread.join(5.0)
        tail = bytes(self.stderr[-self.TAIL:]).decode("utf-8", "replace") if rc != 0 else ""
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            emit({"t": time.time(), "type": "worker_exit", "worker": self.id, "returncode": rc,
                  "cancelled": self.cancelled, "stderr_tail": tail})
        except (BrokenPipeError, ValueError):
            pass

    def signal_group(self, sig: int) -> bool:
        """Signal its process group while the worker is not reaped (the group id cannot be reused then)."""
        with self.lock:
            if self.reaped:
                return False
            return killpg(self.proc.pid, sig)

    def cancel(self, grace: float) -> bool:
        self.cancelled = True
        sent = self.signal_group(signal.SIGTERM)

        def escalate() -> None:
            if not self.exited.wait(grace):
                self.signal_group(signal.SIGKILL)

        threading.Thread(target=escalate, daemon=True).start()
        return sent

